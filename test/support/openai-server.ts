import { createGzip } from 'node:zlib';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The stand-in for a remote LLM service: an OpenAI-compatible server on 127.0.0.1 that answers
 * deterministically, so tests can assert exact content.
 * - `/v1/chat/completions`, `/v1/completions`, `/v1/responses`, `/v1/embeddings`, `/v1/models`;
 *   JSON or SSE (`stream: true`, usage with `stream_options.include_usage`).
 * - The answer echoes the last user text (`Echo: <text>`). With `tools` and no tool result in the
 *   conversation yet, it calls the first tool, with arguments made from the tool's JSON schema.
 * - vLLM-style token ids on `return_token_ids: true` (`prompt_token_ids`, `choices[].token_ids`,
 *   also per streamed chunk) and logprobs on `logprobs: true`; one token per word.
 * - `fixedIds`: chat answers carry id `chatcmpl-fixed` and created 0, so two answers to the
 *   same request are byte for byte the same.
 * - Behaviour by model name: `error-<status>` answers that status; `slow-<ms>` waits first;
 *   `cut-stream` ends a stream mid-way without `[DONE]`; `gzip-<model>` gzips the answer
 *   whatever the request's accept-encoding (as some servers do).
 * - `chat`: a script for chat completions: for each request body it may answer with its own
 *   content, an error status, or a delay or a promise to wait for first (tests of algorithms that play agent model, critic
 *   and editor through one server); what it leaves out behaves as above.
 */
export interface OpenAITestServer {
  readonly url: string;
  /** Base URL for OpenAI clients (`<url>/v1`). */
  readonly baseURL: string;
  /** Request bodies received, in order. */
  readonly requests: { path: string; headers: IncomingMessage['headers']; body: RequestBody }[];
  close(): Promise<void>;
}

/** What a chat script answers to one request; every field may be left out. */
export interface ChatScript {
  readonly content?: string;
  readonly status?: number;
  readonly delayMs?: number;
  /** The answer waits for this (a test holds a call open, then lets it finish). */
  readonly hold?: Promise<void>;
}

/** A chat completion request, as far as a script reads it. */
export interface ChatRequest {
  readonly model?: string;
  readonly messages: readonly { readonly role?: string; readonly content?: unknown }[];
  readonly seed?: number;
}

export interface OpenAITestServerOptions {
  latencyMs?: number;
  fixedIds?: boolean;
  chat?: (body: ChatRequest) => ChatScript | undefined;
}

interface JsonSchema {
  required?: string[];
  properties?: Record<string, { type?: string }>;
}

/** A tool as chat completions (`function`) or the Responses API (`parameters`) define it. */
interface ToolDefinition {
  function?: { name: string; parameters?: JsonSchema };
  parameters?: JsonSchema;
}

/** A request body: the fields this server reads, and whatever else the client sent. */
export interface RequestBody {
  [field: string]: unknown;
  model?: unknown;
  messages?: { role?: string; content?: unknown }[];
  tools?: ToolDefinition[];
  prompt?: unknown;
  input?: unknown;
  stream?: boolean;
  stream_options?: { include_usage?: boolean };
  return_token_ids?: unknown;
  logprobs?: unknown;
}

export async function startOpenAITestServer(options: OpenAITestServerOptions = {}): Promise<OpenAITestServer> {
  const requests: OpenAITestServer['requests'] = [];
  const server = createServer((req, res) => {
    handle(req, res, requests, options).catch((error) => {
      if (!res.headersSent) json(res, 500, { error: { message: String(error), type: 'server_error' } });
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    baseURL: `${url}/v1`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function handle(
  req: IncomingMessage,
  res: ServerResponse,
  requests: OpenAITestServer['requests'],
  options: OpenAITestServerOptions,
): Promise<void> {
  const { latencyMs = 0, fixedIds = false } = options;
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  const path = new URL(req.url ?? '/', 'http://x').pathname;
  if (req.method === 'GET' && path === '/v1/models') {
    return json(res, 200, {
      object: 'list',
      data: [{ id: 'test-model', object: 'model', created: 0, owned_by: 'agl' }],
    });
  }
  let body: RequestBody;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as RequestBody; // the clients under test send these
  } catch {
    return json(res, 400, { error: { message: 'body is not JSON', type: 'invalid_request_error' } });
  }
  requests.push({ path, headers: req.headers, body });
  const script = path === '/v1/chat/completions' ? options.chat?.(body as ChatRequest) : undefined;
  if (script?.delayMs) await new Promise((resolve) => setTimeout(resolve, script.delayMs));
  if (script?.hold) await script.hold;
  if (script?.status)
    return json(res, script.status, {
      error: { message: `test server answers ${script.status}`, type: 'test_error', code: null },
    });
  const model = String(body.model ?? '');
  const slow = /^slow-(\d+)$/.exec(model);
  const wait = slow ? Number(slow[1]) : latencyMs;
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  const error = /^error-(\d{3})$/.exec(model);
  if (error)
    return json(res, Number(error[1]), {
      error: { message: `test server answers ${error[1]}`, type: 'test_error', code: null },
    });
  if (model.startsWith('gzip-')) res = gzipped(res);

  switch (path) {
    case '/v1/chat/completions':
      return chatCompletion(res, body, fixedIds, script?.content);
    case '/v1/completions':
      return completion(res, body);
    case '/v1/responses':
      return response(res, body);
    case '/v1/embeddings':
      return json(res, 200, {
        object: 'list',
        model,
        data: ([] as unknown[])
          .concat(body.input)
          .map((_, index) => ({ object: 'embedding', index, embedding: [0.1, 0.2, 0.3] })),
        usage: { prompt_tokens: 2, total_tokens: 2 },
      });
    default:
      return json(res, 404, { error: { message: `no route ${path}`, type: 'invalid_request_error' } });
  }
}

/** `res` with its body gzipped on the way out (content-encoding set, content-length dropped). */
function gzipped(res: ServerResponse): ServerResponse {
  const gzip = createGzip();
  gzip.pipe(res);
  const wrapped = Object.create(res) as ServerResponse;
  wrapped.writeHead = ((status: number, headers: Record<string, string | number>) => {
    const { 'content-length': _, ...rest } = headers;
    res.writeHead(status, { ...rest, 'content-encoding': 'gzip' });
    return wrapped;
  }) as ServerResponse['writeHead'];
  wrapped.write = ((chunk: string) => {
    gzip.write(chunk);
    gzip.flush(); // each SSE event goes out as it is made
    return true;
  }) as ServerResponse['write'];
  wrapped.end = ((chunk?: string) => {
    gzip.end(chunk);
    return wrapped;
  }) as ServerResponse['end'];
  return wrapped;
}

function json(res: ServerResponse, status: number, value: unknown): void {
  const text = JSON.stringify(value);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** Token ids for text: one per word, stable across runs. */
export function testTokenIds(text: string): number[] {
  return words(text).map((word) => {
    let hash = 7;
    for (const ch of word) hash = (hash * 31 + (ch.codePointAt(0) ?? 0)) % 50_000;
    return hash;
  });
}

const words = (text: string) => text.split(/(?<=\s)/).filter((w) => w.length > 0);

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content.map((part) => (typeof part === 'string' ? part : String(part?.text ?? ''))).join('');
  return '';
}

function promptText(messages: readonly { content?: unknown }[]): string {
  return messages.map((m) => textOf(m.content)).join('\n');
}

/** Arguments a tool call would have: every required property filled from its JSON-schema type. */
function argumentsFor(tool: ToolDefinition): string {
  const parameters = tool.function?.parameters ?? tool.parameters ?? {};
  const args: Record<string, unknown> = {};
  for (const name of parameters.required ?? Object.keys(parameters.properties ?? {})) {
    const type = parameters.properties?.[name]?.type;
    args[name] = type === 'number' || type === 'integer' ? 1 : type === 'boolean' ? true : 'Paris';
  }
  return JSON.stringify(args);
}

/** What the test model answers a chat request: a call of its first tool, or the echo. */
interface ChatAnswer {
  readonly toolCall?: { id: string; type: string; function: { name: string; arguments: string } };
  /** The tool call's arguments, or the echo. */
  readonly text: string;
  readonly outputIds: number[];
  readonly promptIds: number[];
}

/** `scripted`: the content a chat script gave, answered instead of a tool call or the echo. */
function chatAnswerOf(body: RequestBody, scripted?: string): ChatAnswer {
  const messages = body.messages ?? [];
  const lastUser = [...messages].reverse().find((m) => m.role === 'user');
  const toolResult = messages.some((m) => m.role === 'tool');
  const tool = body.tools?.length && !toolResult && scripted === undefined ? body.tools[0] : undefined;
  const toolCall = tool
    ? { id: 'call_1', type: 'function', function: { name: tool.function?.name ?? '', arguments: argumentsFor(tool) } }
    : undefined;
  const text = toolCall ? toolCall.function.arguments : (scripted ?? `Echo: ${textOf(lastUser?.content)}`);
  return { toolCall, text, outputIds: testTokenIds(text), promptIds: testTokenIds(promptText(messages)) };
}

function chatCompletion(res: ServerResponse, body: RequestBody, fixedIds: boolean, scripted?: string): void {
  const answer = chatAnswerOf(body, scripted);
  const { toolCall, outputIds, promptIds } = answer;
  const head = {
    id: fixedIds ? 'chatcmpl-fixed' : `chatcmpl-${Math.random().toString(36).slice(2, 10)}`,
    created: fixedIds ? 0 : Math.floor(Date.now() / 1000),
    model: body.model,
  };
  if (body.stream) {
    streamChatCompletion(res, body, head, answer);
    return;
  }
  const content = toolCall ? null : answer.text;
  const tokenIds = body.return_token_ids === true;
  const choice = {
    index: 0,
    message: { role: 'assistant', content, ...(toolCall ? { tool_calls: [toolCall] } : {}) },
    finish_reason: toolCall ? 'tool_calls' : 'stop',
    ...(body.logprobs
      ? { logprobs: { content: words(content ?? '').map((token) => ({ token, logprob: -0.5, top_logprobs: [] })) } }
      : {}),
    ...(tokenIds ? { token_ids: outputIds } : {}),
  };
  json(res, 200, {
    id: head.id,
    object: 'chat.completion',
    created: head.created,
    model: head.model,
    choices: [choice],
    usage: usageOf(answer),
    ...(tokenIds ? { prompt_token_ids: promptIds } : {}),
  });
}

const usageOf = ({ promptIds, outputIds }: ChatAnswer) => ({
  prompt_tokens: promptIds.length,
  completion_tokens: outputIds.length,
  total_tokens: promptIds.length + outputIds.length,
});

/** The answer as SSE chunks: tool-call arguments in two halves, text word by word; `cut-stream` stops after the first word. */
function streamChatCompletion(
  res: ServerResponse,
  body: RequestBody,
  head: { id: string; created: number; model: unknown },
  answer: ChatAnswer,
): void {
  const { toolCall, text, outputIds, promptIds } = answer;
  const tokenIds = body.return_token_ids === true;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  const chunk = (choice: object | null, extra: object = {}) =>
    res.write(
      `data: ${JSON.stringify({ id: head.id, object: 'chat.completion.chunk', created: head.created, model: head.model, choices: choice ? [{ index: 0, ...choice }] : [], ...extra })}\n\n`,
    );
  chunk(
    { delta: { role: 'assistant', content: '' }, finish_reason: null },
    tokenIds ? { prompt_token_ids: promptIds } : {},
  );
  if (toolCall) {
    const half = Math.floor(text.length / 2);
    chunk({
      delta: {
        tool_calls: [
          { index: 0, id: toolCall.id, type: 'function', function: { name: toolCall.function.name, arguments: '' } },
        ],
      },
      finish_reason: null,
    });
    chunk({
      delta: { tool_calls: [{ index: 0, function: { arguments: text.slice(0, half) } }] },
      finish_reason: null,
      ...(tokenIds ? { token_ids: outputIds.slice(0, 1) } : {}),
    });
    chunk({
      delta: { tool_calls: [{ index: 0, function: { arguments: text.slice(half) } }] },
      finish_reason: null,
      ...(tokenIds ? { token_ids: outputIds.slice(1) } : {}),
    });
  } else {
    const pieces = words(text);
    for (let i = 0; i < pieces.length; i++) {
      if (body.model === 'cut-stream' && i === 1) {
        setTimeout(() => res.destroy(), 20); // once what was written has gone out
        return;
      }
      chunk({
        delta: { content: pieces[i] },
        finish_reason: null,
        ...(tokenIds ? { token_ids: [outputIds[i]] } : {}),
        ...(body.logprobs ? { logprobs: { content: [{ token: pieces[i], logprob: -0.5, top_logprobs: [] }] } } : {}),
      });
    }
  }
  chunk({ delta: {}, finish_reason: toolCall ? 'tool_calls' : 'stop' });
  if (body.stream_options?.include_usage) chunk(null, { usage: usageOf(answer) });
  res.end('data: [DONE]\n\n');
}

function completion(res: ServerResponse, body: RequestBody): void {
  const prompt = textOf(body.prompt);
  const text = ` Echo: ${prompt}`;
  const outputIds = testTokenIds(text);
  const promptIds = testTokenIds(prompt);
  const tokenIds = body.return_token_ids === true;
  const usage = {
    prompt_tokens: promptIds.length,
    completion_tokens: outputIds.length,
    total_tokens: promptIds.length + outputIds.length,
  };
  const id = `cmpl-${Math.random().toString(36).slice(2, 10)}`;
  const base = { id, object: 'text_completion', created: Math.floor(Date.now() / 1000), model: body.model };
  if (!body.stream) {
    json(res, 200, {
      ...base,
      choices: [
        {
          index: 0,
          text,
          finish_reason: 'stop',
          logprobs: null,
          ...(tokenIds ? { token_ids: outputIds, prompt_token_ids: promptIds } : {}),
        },
      ],
      usage,
    });
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const [i, piece] of words(text).entries()) {
    res.write(
      `data: ${JSON.stringify({ ...base, choices: [{ index: 0, text: piece, finish_reason: null, ...(tokenIds ? { token_ids: [outputIds[i]], ...(i === 0 ? { prompt_token_ids: promptIds } : {}) } : {}) }] })}\n\n`,
    );
  }
  res.write(
    `data: ${JSON.stringify({ ...base, choices: [{ index: 0, text: '', finish_reason: 'stop' }], ...(body.stream_options?.include_usage ? { usage } : {}) })}\n\n`,
  );
  res.end('data: [DONE]\n\n');
}

function response(res: ServerResponse, body: RequestBody): void {
  const input = typeof body.input === 'string' ? body.input : promptText(Array.isArray(body.input) ? body.input : []);
  const text = `Echo: ${input}`;
  const full = {
    id: `resp_${Math.random().toString(36).slice(2, 10)}`,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: 'completed',
    model: body.model,
    output: [
      {
        type: 'message',
        id: 'msg_1',
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text, annotations: [] }],
      },
    ],
    usage: {
      input_tokens: testTokenIds(input).length,
      output_tokens: testTokenIds(text).length,
      total_tokens: testTokenIds(input).length + testTokenIds(text).length,
    },
  };
  if (!body.stream) {
    json(res, 200, full);
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  let sequence = 0;
  const event = (type: string, data: object) =>
    res.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: sequence++, ...data })}\n\n`);
  event('response.created', { response: { ...full, status: 'in_progress', output: [] } });
  for (const piece of words(text))
    event('response.output_text.delta', { item_id: 'msg_1', output_index: 0, content_index: 0, delta: piece });
  event('response.completed', { response: full });
  res.end();
}
