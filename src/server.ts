// `agl/server`: the HTTP server of `agl serve` (OTLP, the store's REST API, SQL, the gateway) over
// a store from `agl/store`, and a small OpenAI-compatible model server for demos and examples.
export { startServer, type ServerOptions, type RunningServer } from './collector/server.js';
export {
  startExampleModel,
  EXAMPLE_MODEL,
  EXAMPLE_CRITIC_MODEL,
  EXAMPLE_EDITOR_MODEL,
  EXAMPLE_REFLECTOR_MODEL,
} from './runtime/example-model.js';
