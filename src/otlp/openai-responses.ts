/**
 * OpenAI's Responses API: its request and answer read like chat's (openai-chat.ts), its stream
 * is events whose last `response.*` one carries the whole response.
 */
import { isFields, type Fields } from './json-fields.js';
import type { LlmCodec, StreamAccumulator } from './llm-codec.js';
import { openAIProvider, openAIRequestAttributes, openAIResponseAttributes } from './openai-chat.js';
import { responsesGenAiRequest, responsesGenAiResponse } from './openai-genai.js';

class ResponsesAccumulator implements StreamAccumulator {
  private response: unknown;

  add(event: Fields): void {
    if (isFields(event.response)) this.response = event.response;
  }

  result(): unknown {
    return this.response ?? {};
  }
}

export const responsesCodec: LlmCodec = {
  api: 'responses',
  operation: 'chat',
  provider: openAIProvider,
  requestAttributes: openAIRequestAttributes,
  responseAttributes: openAIResponseAttributes,
  genAiRequest: responsesGenAiRequest,
  genAiResponse: responsesGenAiResponse,
  streamAccumulator: () => new ResponsesAccumulator(),
};
