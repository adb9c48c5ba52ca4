/**
 * OpenTelemetry's GenAI documents (semantic-conventions-genai: `gen_ai.input.messages`,
 * `gen_ai.output.messages`, `gen_ai.system_instructions`, `gen_ai.tool.definitions`), the form
 * other OpenTelemetry backends read a call's content in. Each LLM API's codec makes them of its
 * request and answer (LlmCodec.genAiRequest / genAiResponse); agl's own capture and the gateway
 * add them when asked (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: docs/recording.md).
 * agl itself reads the exact exchange (`agl.llm.*`); src/sql/genai-messages.ts reads these back.
 */
import { GENAI } from '../api/semconv.js';
import { fieldsOf, type Fields } from './json-fields.js';

export type GenAiPart = Fields & { type: string };
export interface GenAiMessage {
  role: string;
  parts: GenAiPart[];
  name?: string;
  finish_reason?: string;
}

/** What a request says: its messages, system instructions and tools. */
export interface GenAiRequest {
  readonly input: GenAiMessage[];
  readonly system?: GenAiPart[];
  readonly tools?: Fields[];
}

export const textPart = (content: string): GenAiPart => ({ type: 'text', content });

/** An output message's finish reason, the provider's own, when the answer gave one (a cut stream gives none). */
export const finishOf = (reason: unknown) => (typeof reason === 'string' ? { finish_reason: reason } : {});

/** A JSON text as its value (tool arguments are objects in the conventions), else the text itself. */
export function jsonValue(text: unknown): unknown {
  if (typeof text !== 'string') return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** An image by URL: a `data:` URL is a blob of its bytes, any other a uri. */
export function imagePart(url: string): GenAiPart {
  const data = /^data:([^;,]*)(?:;base64)?,(.*)$/s.exec(url);
  return data
    ? { type: 'blob', modality: 'image', ...(data[1] ? { mime_type: data[1] } : {}), content: data[2] }
    : { type: 'uri', modality: 'image', uri: url };
}

/** A function tool as the conventions define one: `{type: function, name, description, parameters}`. */
export function functionTool(name: unknown, description: unknown, parameters: unknown): Fields {
  return {
    type: 'function',
    name,
    ...(description !== undefined ? { description } : {}),
    ...(parameters !== undefined ? { parameters } : {}),
  };
}

/** The documents as span attributes: JSON text (span attributes hold no structures), only those present. */
export function genAiAttributes(request: GenAiRequest | undefined, output: GenAiMessage[] | undefined): Fields {
  const structured = genAiEventAttributes(request, output);
  return Object.fromEntries(Object.entries(structured).map(([key, value]) => [key, JSON.stringify(value)]));
}

/** The text of content that is a string or a list of `{type: text, text}` blocks. */
export function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return content === undefined || content === null ? '' : JSON.stringify(content);
  return content
    .map(fieldsOf)
    .filter((block) => typeof block.text === 'string')
    .map((block) => block.text)
    .join('');
}

/**
 * What agl records of a call in OpenTelemetry's GenAI form, besides its exact exchange
 * (`agl.llm.*`, which agl reads): the documents as span attributes (`span`), as a
 * `gen_ai.client.inference.operation.details` event (`event`), as
 * OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT asks with the values OpenTelemetry's GenAI
 * instrumentations take (SPAN_ONLY, EVENT_ONLY, SPAN_AND_EVENT); and `gen_ai.system` beside
 * `gen_ai.provider.name` for backends that read the older conventions, unless
 * OTEL_SEMCONV_STABILITY_OPT_IN asks for the latest only (gen_ai_latest_experimental).
 */
export interface GenAiRecording {
  readonly span: boolean;
  readonly event: boolean;
  readonly olderSystem: boolean;
}

/** The exchange alone, the newest attribute names alone. */
export const NO_GENAI: GenAiRecording = { span: false, event: false, olderSystem: false };

export function genAiRecordingOf(env: Record<string, string | undefined>): GenAiRecording {
  const mode = env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT?.trim().toUpperCase() ?? '';
  const latest = (env.OTEL_SEMCONV_STABILITY_OPT_IN ?? '')
    .split(',')
    .some((v) => v.trim() === 'gen_ai_latest_experimental');
  return {
    span: mode === 'SPAN_ONLY' || mode === 'SPAN_AND_EVENT',
    event: mode === 'EVENT_ONLY' || mode === 'SPAN_AND_EVENT',
    olderSystem: !latest,
  };
}

/** The documents as an event's attributes: structured values, as the conventions want them on events. */
export function genAiEventAttributes(request: GenAiRequest | undefined, output: GenAiMessage[] | undefined): Fields {
  const attributes: Fields = {};
  if (request && request.input.length > 0) attributes[GENAI.inputMessages] = request.input;
  if (request?.system?.length) attributes[GENAI.systemInstructions] = request.system;
  if (request?.tools?.length) attributes[GENAI.toolDefinitions] = request.tools;
  if (output && output.length > 0) attributes[GENAI.outputMessages] = output;
  return attributes;
}
