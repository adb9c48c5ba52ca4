// `agl/client`: what a runner on another machine needs to reach `agl serve`: the LightningStore
// over REST, and the gateway's URLs for an agent's OpenAI client.
export {
  StoreAnswerError,
  StoreClient,
  StoreUnreachableError,
  type StoreClientOptions,
} from './client/store-client.js';
export { gatewayBaseUrl, gatewayEnv } from './client/gateway-url.js';
