/**
 * OpenAI's chat completions, completions and Responses bodies as OpenTelemetry GenAI documents
 * (genai-documents.ts): chat messages' content, tool calls, tool results and reasoning as parts;
 * Responses' items as the messages they stand for.
 */
import {
  contentText,
  finishOf,
  functionTool,
  type GenAiMessage,
  type GenAiPart,
  type GenAiRequest,
  imagePart,
  jsonValue,
  textPart,
} from './genai-documents.js';
import { fieldsOf, type Fields, objectsIn } from './json-fields.js';

const AUDIO_TYPES: Record<string, string> = { wav: 'audio/wav', mp3: 'audio/mpeg' };

/** A chat content part (`text`, `image_url`, `input_audio`, `file`); others as they are. */
function chatContentPart(part: Fields): GenAiPart {
  const { type } = part;
  if (type === 'text') return textPart(String(part.text ?? ''));
  if (type === 'image_url') return imagePart(String(fieldsOf(part.image_url).url ?? ''));
  if (type === 'input_audio') {
    const audio = fieldsOf(part.input_audio);
    const mime = AUDIO_TYPES[String(audio.format)];
    return { type: 'blob', modality: 'audio', ...(mime ? { mime_type: mime } : {}), content: audio.data };
  }
  if (type === 'file' && typeof fieldsOf(part.file).file_id === 'string')
    return { type: 'file', modality: 'document', file_id: fieldsOf(part.file).file_id };
  return { ...part, type: String(type) };
}

function contentParts(content: unknown): GenAiPart[] {
  if (typeof content === 'string') return content === '' ? [] : [textPart(content)];
  return objectsIn(content).map(chatContentPart);
}

const toolCallParts = (calls: unknown): GenAiPart[] =>
  objectsIn(calls).map((call) => {
    const fn = fieldsOf(call.function);
    return { type: 'tool_call', id: call.id, name: fn.name, arguments: jsonValue(fn.arguments) };
  });

/** One chat message: a tool's answer is a tool_call_response part, an assistant's tool calls tool_call parts. */
function chatMessage(message: Fields): GenAiMessage {
  const role = String(message.role ?? 'user');
  const parts: GenAiPart[] =
    role === 'tool'
      ? [{ type: 'tool_call_response', id: message.tool_call_id, response: contentText(message.content) }]
      : [
          ...(typeof message.reasoning_content === 'string' && message.reasoning_content !== ''
            ? [{ type: 'reasoning', content: message.reasoning_content }]
            : []),
          ...contentParts(message.content),
          ...toolCallParts(message.tool_calls),
        ];
  return { role, parts, ...(typeof message.name === 'string' ? { name: message.name } : {}) };
}

const chatTools = (tools: unknown) =>
  objectsIn(tools).map((tool) => {
    const fn = fieldsOf(tool.function);
    return tool.type === 'function' ? functionTool(fn.name, fn.description, fn.parameters) : tool;
  });

export function chatGenAiRequest(request: Fields): GenAiRequest {
  return { input: objectsIn(request.messages).map(chatMessage), tools: chatTools(request.tools) };
}

export function chatGenAiResponse(response: Fields): GenAiMessage[] {
  return objectsIn(response.choices).map((choice) => ({
    ...chatMessage({ role: 'assistant', ...fieldsOf(choice.message) }),
    ...finishOf(choice.finish_reason),
  }));
}

export function completionGenAiRequest(request: Fields): GenAiRequest {
  const prompts = Array.isArray(request.prompt) ? request.prompt : [request.prompt];
  return {
    input: prompts
      .filter((p): p is string => typeof p === 'string')
      .map((p) => ({ role: 'user', parts: [textPart(p)] })),
  };
}

export function completionGenAiResponse(response: Fields): GenAiMessage[] {
  return objectsIn(response.choices).map((choice) => ({
    role: 'assistant',
    parts: [textPart(String(choice.text ?? ''))],
    ...finishOf(choice.finish_reason),
  }));
}

/** A Responses item: a message, a function call or its output, reasoning; others a generic part. */
function responsesItem(item: Fields): GenAiMessage {
  switch (item.type ?? 'message') {
    case 'message':
      return {
        role: String(item.role ?? 'user'),
        parts:
          typeof item.content === 'string'
            ? [textPart(item.content)]
            : objectsIn(item.content).map((part) =>
                typeof part.text === 'string'
                  ? textPart(part.text)
                  : part.type === 'input_image' && typeof part.image_url === 'string'
                    ? imagePart(part.image_url)
                    : { ...part, type: String(part.type) },
              ),
      };
    case 'function_call':
      return {
        role: 'assistant',
        parts: [{ type: 'tool_call', id: item.call_id, name: item.name, arguments: jsonValue(item.arguments) }],
      };
    case 'function_call_output':
      return { role: 'tool', parts: [{ type: 'tool_call_response', id: item.call_id, response: item.output }] };
    case 'reasoning':
      return {
        role: 'assistant',
        parts: objectsIn(item.summary).map((s) => ({ type: 'reasoning', content: String(s.text ?? '') })),
      };
    default:
      return { role: 'assistant', parts: [{ ...item, type: String(item.type) }] };
  }
}

export function responsesGenAiRequest(request: Fields): GenAiRequest {
  const { input, instructions } = request;
  return {
    input:
      typeof input === 'string' ? [{ role: 'user', parts: [textPart(input)] }] : objectsIn(input).map(responsesItem),
    ...(typeof instructions === 'string' ? { system: [textPart(instructions)] } : {}),
    tools: objectsIn(request.tools).map((tool) =>
      tool.type === 'function' ? functionTool(tool.name, tool.description, tool.parameters) : tool,
    ),
  };
}

/** The output items as one output message (one choice), its parts in order. */
export function responsesGenAiResponse(response: Fields): GenAiMessage[] {
  const items = objectsIn(response.output);
  if (items.length === 0) return [];
  const parts = items.flatMap((item) => responsesItem(item).parts);
  const calls = parts.some((part) => part.type === 'tool_call');
  const finish = calls ? 'tool_call' : response.status === 'incomplete' ? 'length' : 'stop';
  return [{ role: 'assistant', parts, finish_reason: finish }];
}
