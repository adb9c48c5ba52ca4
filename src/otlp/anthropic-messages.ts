/**
 * Anthropic's Messages API (`POST /v1/messages`: `@anthropic-ai/sdk`, LangChain's ChatAnthropic,
 * the Vercel AI SDK's provider, the Claude Agent SDK). Its stream is typed events
 * (`message_start`, `content_block_start` / `_delta` / `_stop`, `message_delta`, `message_stop`)
 * assembled into the Message a plain call answers: text, thinking and signatures concatenated,
 * tool inputs parsed from their JSON deltas, stop reason and usage from the final delta.
 */
import type { Attributes } from '@opentelemetry/api';
import {
  contentText,
  finishOf,
  functionTool,
  type GenAiMessage,
  type GenAiPart,
  type GenAiRequest,
  textPart,
} from './genai-documents.js';
import { fieldsOf, isFields, objectsIn, type Fields } from './json-fields.js';
import type { LlmCodec, LlmFailure, StreamAccumulator } from './llm-codec.js';

const REQUEST_PARAMETERS: [string, string][] = [
  ['temperature', 'gen_ai.request.temperature'],
  ['top_p', 'gen_ai.request.top_p'],
  ['top_k', 'gen_ai.request.top_k'],
  ['max_tokens', 'gen_ai.request.max_tokens'],
];

function requestAttributes(request: Fields): Attributes {
  const attributes: Attributes = {};
  if (typeof request.model === 'string') attributes['gen_ai.request.model'] = request.model;
  for (const [field, key] of REQUEST_PARAMETERS) {
    const value = request[field];
    if (typeof value === 'number') attributes[key] = value;
  }
  if (Array.isArray(request.stop_sequences))
    attributes['gen_ai.request.stop_sequences'] = request.stop_sequences.filter(
      (s): s is string => typeof s === 'string',
    );
  return attributes;
}

const count = (value: unknown) => (typeof value === 'number' ? value : 0);

/**
 * Anthropic's `input_tokens` leaves out the tokens read from or written to the prompt cache; the
 * GenAI conventions' `gen_ai.usage.input_tokens` counts every input token, as OpenAI's
 * `prompt_tokens` does, so the three are added (and the cache's two kept apart as well).
 */
function responseAttributes(response: Fields): Attributes {
  const attributes: Attributes = {};
  const { id, model, stop_reason: stopReason, usage } = response;
  if (typeof id === 'string') attributes['gen_ai.response.id'] = id;
  if (typeof model === 'string') attributes['gen_ai.response.model'] = model;
  if (typeof stopReason === 'string') attributes['gen_ai.response.finish_reasons'] = [stopReason];
  const tokens = fieldsOf(usage);
  const cacheRead = count(tokens.cache_read_input_tokens);
  const cacheCreation = count(tokens.cache_creation_input_tokens);
  if (typeof tokens.input_tokens === 'number')
    attributes['gen_ai.usage.input_tokens'] = tokens.input_tokens + cacheRead + cacheCreation;
  if (typeof tokens.output_tokens === 'number') attributes['gen_ai.usage.output_tokens'] = tokens.output_tokens;
  if (cacheRead > 0) attributes['gen_ai.usage.cache_read.input_tokens'] = cacheRead;
  if (cacheCreation > 0) attributes['gen_ai.usage.cache_creation.input_tokens'] = cacheCreation;
  return attributes;
}

/** A content block being streamed, and the JSON text of its tool input so far. */
interface OpenBlock {
  block: Fields;
  inputJson: string;
}

/** The fields of a content block's delta that are text to append to the block's own field. */
const TEXT_DELTAS: Record<string, [delta: string, field: string]> = {
  text_delta: ['text', 'text'],
  thinking_delta: ['thinking', 'thinking'],
  signature_delta: ['signature', 'signature'],
};

class MessagesAccumulator implements StreamAccumulator {
  private message: Fields = {};
  private readonly blocks = new Map<number, OpenBlock>();
  private stopped = false;
  private error: Fields | undefined;

  add(event: Fields): void {
    switch (event.type) {
      case 'message_stop':
        this.stopped = true;
        break;
      case 'error':
        this.error ??= fieldsOf(event.error);
        break;
      case 'message_start':
        this.message = { ...fieldsOf(event.message) };
        break;
      case 'content_block_start':
        this.blocks.set(indexOf(event), { block: { ...fieldsOf(event.content_block) }, inputJson: '' });
        break;
      case 'content_block_delta':
        this.addDelta(event);
        break;
      case 'content_block_stop':
        this.closeBlock(indexOf(event));
        break;
      case 'message_delta': {
        Object.assign(this.message, fieldsOf(event.delta));
        if (isFields(event.usage))
          this.message.usage = { ...fieldsOf(this.message.usage), ...withoutNulls(event.usage) };
        break;
      }
    }
  }

  private addDelta(event: Fields): void {
    const open = this.blocks.get(indexOf(event));
    if (!open) return;
    const delta = fieldsOf(event.delta);
    const text = TEXT_DELTAS[String(delta.type)];
    if (text) {
      const piece = delta[text[0]];
      if (typeof piece === 'string') open.block[text[1]] = `${open.block[text[1]] ?? ''}${piece}`;
    } else if (delta.type === 'input_json_delta' && typeof delta.partial_json === 'string') {
      open.inputJson += delta.partial_json;
    } else if (delta.type === 'citations_delta' && delta.citation !== undefined) {
      open.block.citations = [...(Array.isArray(open.block.citations) ? open.block.citations : []), delta.citation];
    }
  }

  /** A tool input streamed as JSON text is parsed once whole; one cut short stays as text. */
  private closeBlock(index: number): void {
    const open = this.blocks.get(index);
    if (!open || open.inputJson === '') return;
    try {
      open.block.input = JSON.parse(open.inputJson);
    } catch {
      open.block.input = open.inputJson;
    }
    open.inputJson = '';
  }

  /**
   * An `error` event mid-way (Anthropic sends `overloaded_error` that way once a stream has begun),
   * or a stream that ended without `message_stop`: what arrived is kept, and the span says which.
   */
  failure(): LlmFailure | undefined {
    if (this.error)
      return {
        type: typeof this.error.type === 'string' ? this.error.type : 'stream_error',
        message: `the stream reported an error: ${typeof this.error.message === 'string' ? this.error.message : 'no message'}`,
      };
    if (!this.stopped) return { type: 'stream_incomplete', message: 'the stream ended without message_stop' };
    return undefined;
  }

  result(): unknown {
    for (const index of this.blocks.keys()) this.closeBlock(index);
    const content = [...this.blocks.entries()].sort(([a], [b]) => a - b).map(([, open]) => open.block);
    return { ...this.message, content };
  }
}

const indexOf = (event: Fields) => (typeof event.index === 'number' ? event.index : 0);

function withoutNulls(value: Fields): Fields {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null && v !== undefined));
}

/** A content block as a GenAI part: text, images, tool use and results, thinking; others as they are. */
function blockPart(block: Fields): GenAiPart {
  const source = fieldsOf(block.source);
  switch (block.type) {
    case 'text':
      return textPart(String(block.text ?? ''));
    case 'image':
      return source.type === 'url'
        ? { type: 'uri', modality: 'image', uri: source.url }
        : { type: 'blob', modality: 'image', mime_type: source.media_type, content: source.data };
    case 'tool_use':
      return { type: 'tool_call', id: block.id, name: block.name, arguments: block.input };
    case 'tool_result':
      return { type: 'tool_call_response', id: block.tool_use_id, response: contentText(block.content) };
    case 'thinking':
      return { type: 'reasoning', content: block.thinking };
    default:
      return { ...block, type: String(block.type) };
  }
}

const blocksOf = (content: unknown): GenAiPart[] =>
  typeof content === 'string' ? [textPart(content)] : objectsIn(content).map(blockPart);

function genAiRequest(request: Fields): GenAiRequest {
  return {
    input: objectsIn(request.messages).map((m) => ({ role: String(m.role ?? 'user'), parts: blocksOf(m.content) })),
    ...(request.system !== undefined ? { system: blocksOf(request.system) } : {}),
    tools: objectsIn(request.tools).map((t) =>
      t.input_schema !== undefined ? functionTool(t.name, t.description, t.input_schema) : t,
    ),
  };
}

function genAiResponse(response: Fields): GenAiMessage[] {
  if (!Array.isArray(response.content)) return [];
  return [{ role: 'assistant', parts: blocksOf(response.content), ...finishOf(response.stop_reason) }];
}

export const anthropicMessagesCodec: LlmCodec = {
  api: 'messages',
  operation: 'chat',
  provider: () => 'anthropic',
  requestAttributes,
  responseAttributes,
  genAiRequest,
  genAiResponse,
  streamAccumulator: () => new MessagesAccumulator(),
};
