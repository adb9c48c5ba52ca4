// `agl/client`: what a runner on another machine needs to reach `agl serve`: the LightningStore
// over REST, and the gateway's URLs for an agent's OpenAI client.
export { StoreClient, type StoreClientOptions } from './client/store-client.js';
export { StoreAnswerError, StoreUnreachableError } from './client/store-request.js';
export { gatewayBaseUrl, gatewayEnv } from './client/gateway-url.js';
