import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The stand-in for Anthropic's API: a server on 127.0.0.1 speaking the Messages API's JSON and
 * SSE (`POST /v1/messages`, `POST /v1/messages/count_tokens`), deterministic like the
 * OpenAI-compatible one (openai-server.ts).
 * - The answer echoes the last user text (`Echo: <text>`). With `tools` and no `tool_result` in
 *   the conversation yet, it calls the first tool (`toolu_1`), with input made from its schema.
 * - With `thinking` asked for, a thinking block (with its signature) comes first.
 * - Usage: one token per word; a system block with `cache_control` is read from the cache
 *   (`cache_read_input_tokens`: its words).
 * - Streams send Anthropic's events (with a `ping`), text word by word, tool input in two halves.
 * - By model name: `error-<status>` answers that status in Anthropic's error shape; `cut-stream`
 *   ends a stream after its first word; `error-mid-stream` sends an `error` event after it (as
 *   Anthropic does when overloaded mid-way) and ends; `no-message-stop` ends a whole stream
 *   without its last event.
 */
export interface AnthropicTestServer {
  /** Base URL for Anthropic clients (the SDK adds `/v1/messages`). */
  readonly url: string;
  /** Requests received, in order. */
  readonly requests: { path: string; headers: IncomingMessage['headers']; body: MessagesRequest }[];
  close(): Promise<void>;
}

type Block = { type: string; text?: string; cache_control?: unknown; [field: string]: unknown };

interface MessagesRequest {
  model?: string;
  system?: string | Block[];
  messages?: { role: string; content: string | Block[] }[];
  tools?: { name: string; input_schema?: { properties?: Record<string, { type?: string }>; required?: string[] } }[];
  stream?: boolean;
  thinking?: { type?: string };
}

export async function startAnthropicTestServer(): Promise<AnthropicTestServer> {
  const requests: AnthropicTestServer['requests'] = [];
  const server = createServer((req, res) => {
    handle(req, res, requests).catch((error) => {
      res.destroy(error as Error);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function handle(req: IncomingMessage, res: ServerResponse, requests: AnthropicTestServer['requests']) {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const path = new URL(req.url ?? '/', 'http://x').pathname;
  let body: MessagesRequest;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    return error(res, 400, 'invalid_request_error', 'body is not JSON');
  }
  requests.push({ path, headers: req.headers, body });
  if (req.method !== 'POST') return error(res, 404, 'not_found_error', `no route ${path}`);
  if (path !== '/v1/messages' && path !== '/v1/messages/count_tokens')
    return error(res, 404, 'not_found_error', `no route ${path}`);
  // A body not shaped as Messages is a 400, as Anthropic answers it (the fuzz sends such bodies).
  let answer: Message;
  try {
    if (body === null || typeof body !== 'object') throw new Error('the body is not an object');
    if (body.model !== undefined && typeof body.model !== 'string') throw new Error('model: not a string');
    if (body.messages !== undefined && !Array.isArray(body.messages)) throw new Error('messages: not a list');
    if (path === '/v1/messages/count_tokens') return json(res, 200, { input_tokens: promptWords(body) });
    const failing = /^error-(\d{3})$/.exec(body.model ?? '');
    if (failing) return error(res, Number(failing[1]), 'overloaded_error', `test server answers ${failing[1]}`);
    answer = answerOf(body);
    JSON.stringify(answer); // what it echoes may nest too deep to write
  } catch (problem) {
    return error(res, 400, 'invalid_request_error', `not a Messages request: ${(problem as Error).message}`);
  }
  if (body.stream) streamMessage(res, body, answer);
  else json(res, 200, answer);
}

function json(res: ServerResponse, status: number, value: unknown): void {
  const text = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

function error(res: ServerResponse, status: number, type: string, message: string): void {
  json(res, status, { type: 'error', error: { type, message } });
}

const words = (text: string) => text.split(/(?<=\s)/).filter((w) => w.length > 0);

const blocksOf = (content: string | Block[] | undefined): Block[] =>
  typeof content === 'string' ? [{ type: 'text', text: content }] : (content ?? []);

const textOf = (blocks: Block[]) =>
  blocks
    .filter((b) => b.type === 'text')
    .map((b) => b.text)
    .join('');

function promptWords(body: MessagesRequest): number {
  const texts = [blocksOf(body.system), ...(body.messages ?? []).map((m) => blocksOf(m.content))].map(textOf);
  return words(texts.join('\n')).length;
}

interface Message {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: Block[];
  stop_reason: string;
  stop_sequence: null;
  usage: {
    input_tokens: number;
    output_tokens: number;
    cache_creation_input_tokens: number;
    cache_read_input_tokens: number;
  };
}

function answerOf(body: MessagesRequest): Message {
  const messages = body.messages ?? [];
  const toolResult = messages.some((m) => blocksOf(m.content).some((b) => b.type === 'tool_result'));
  const tool = body.tools?.length && !toolResult ? body.tools[0] : undefined;
  const lastUser = [...messages].reverse().find((m) => m.role === 'user' && textOf(blocksOf(m.content)) !== '');
  const content: Block[] = [];
  if (body.thinking?.type === 'enabled')
    content.push({ type: 'thinking', thinking: 'The user wants an echo.', signature: 'sig-test' });
  if (tool) content.push({ type: 'tool_use', id: 'toolu_1', name: tool.name, input: inputFor(tool) });
  else content.push({ type: 'text', text: `Echo: ${textOf(blocksOf(lastUser?.content))}` });
  const cached = blocksOf(body.system).filter((b) => b.cache_control !== undefined);
  const cacheRead = words(textOf(cached)).length;
  const said = content.map((b) => (b.type === 'tool_use' ? JSON.stringify(b.input) : String(b.text ?? b.thinking)));
  return {
    id: `msg_${Math.random().toString(36).slice(2, 12)}`,
    type: 'message',
    role: 'assistant',
    model: body.model ?? '',
    content,
    stop_reason: tool ? 'tool_use' : 'end_turn',
    stop_sequence: null,
    usage: {
      input_tokens: promptWords(body) - cacheRead,
      output_tokens: words(said.join(' ')).length,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: cacheRead,
    },
  };
}

function inputFor(tool: NonNullable<MessagesRequest['tools']>[number]): Record<string, unknown> {
  const schema = tool.input_schema ?? {};
  const input: Record<string, unknown> = {};
  for (const name of schema.required ?? Object.keys(schema.properties ?? {})) {
    const type = schema.properties?.[name]?.type;
    input[name] = type === 'number' || type === 'integer' ? 1 : type === 'boolean' ? true : 'Paris';
  }
  return input;
}

/** The answer as Anthropic streams it; `cut-stream` and `error-mid-stream` stop after the first word of text. */
function streamMessage(res: ServerResponse, body: MessagesRequest, answer: Message): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  const send = (event: { type: string; [field: string]: unknown }) =>
    res.write(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
  const { content, stop_reason, stop_sequence, usage } = answer;
  send({
    type: 'message_start',
    message: { ...answer, content: [], stop_reason: null, usage: { ...usage, output_tokens: 1 } },
  });
  send({ type: 'ping' });
  for (const [index, block] of content.entries()) {
    if (block.type === 'tool_use') {
      send({ type: 'content_block_start', index, content_block: { ...block, input: {} } });
      const input = JSON.stringify(block.input);
      const half = Math.floor(input.length / 2);
      for (const partial_json of [input.slice(0, half), input.slice(half)])
        send({ type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json } });
    } else if (block.type === 'thinking') {
      send({ type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } });
      send({ type: 'content_block_delta', index, delta: { type: 'thinking_delta', thinking: block.thinking } });
      send({ type: 'content_block_delta', index, delta: { type: 'signature_delta', signature: block.signature } });
    } else {
      send({ type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
      for (const [i, text] of words(String(block.text)).entries()) {
        if (body.model === 'cut-stream' && i === 1) {
          setTimeout(() => res.destroy(), 20); // once what was written has gone out
          return;
        }
        if (body.model === 'error-mid-stream' && i === 1) {
          send({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
          res.end();
          return;
        }
        send({ type: 'content_block_delta', index, delta: { type: 'text_delta', text } });
      }
    }
    send({ type: 'content_block_stop', index });
  }
  send({ type: 'message_delta', delta: { stop_reason, stop_sequence }, usage: { output_tokens: usage.output_tokens } });
  if (body.model !== 'no-message-stop') send({ type: 'message_stop' });
  res.end();
}
