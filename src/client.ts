// `agl/client`: what a runner or an algorithm on another machine needs to reach `agl serve`: the
// LightningStore over REST, SQL over its query route, and the gateway's URLs for an agent's OpenAI client.
export { StoreClient, type StoreClientOptions } from './client/store-client.js';
export { StoreAnswerError, StoreUnreachableError } from './client/store-request.js';
export { QueryClient, type QueryClientOptions, type QueryTarget } from './client/query-client.js';
export { gatewayBaseUrl, gatewayEnv } from './client/gateway-url.js';
export type { FeedbackReceipt, FeedbackRequest } from './api/feedback.js';
