/**
 * One LLM API dialect, as the fetch capture and the gateway see it: what its request says, what
 * its answer says, and how its stream's events assemble into the answer a plain call gives. The
 * normalization of each dialect into OpenAI chat messages is SQL (src/sql/derived.ts), keyed by
 * the `agl.llm.api` the codec's span carries. A new API is a module implementing this and a line
 * in llm-exchange.ts's table of paths.
 */
import type { Attributes } from '@opentelemetry/api';
import type { GenAiMessage, GenAiRequest } from './genai-documents.js';
import type { Fields } from './json-fields.js';

/** Why a call failed, as its span says it: `error.type` and the status message. */
export interface LlmFailure {
  readonly type: string;
  readonly message: string;
}

/** Collects one stream's events (each SSE `data:` parsed) into the answer's body. */
export interface StreamAccumulator {
  add(event: Fields): void;
  result(): unknown;
  /** Why a stream that reached its end is still no whole answer (an error event, no final event), if it is not. */
  failure?(): LlmFailure | undefined;
}

export interface LlmCodec {
  /** `agl.llm.api`, what SQL reads to pick the dialect's normalization. */
  readonly api: string;
  /** `gen_ai.operation.name`. */
  readonly operation: string;
  /** `gen_ai.provider.name` of a call to `host`. */
  provider(host: string): string;
  /** The request's model and sampling parameters. */
  requestAttributes(request: Fields): Attributes;
  /** The answer's id, model, finish reasons and usage. */
  responseAttributes(response: Fields): Attributes;
  /** The request as OpenTelemetry GenAI documents (none for an API without messages: embeddings). */
  genAiRequest?(request: Fields): GenAiRequest;
  /** The answer's output messages, as GenAI documents. */
  genAiResponse?(response: Fields): GenAiMessage[];
  /** A fresh accumulator for one streamed answer. */
  streamAccumulator(): StreamAccumulator;
}
