import { httpRequest, type HttpAnswer } from '../../client/http-request.js';

/**
 * The models an algorithm consults itself (APO's critic and editor): an OpenAI-compatible
 * `/chat/completions` endpoint or Anthropic's Messages API, called with retries and backoff. It goes through agl's own HTTP
 * client (undici), not `fetch`, so that the Trainer's recording of the agent's calls does not
 * also record the algorithm's.
 */

export interface ChatMessage {
  readonly role: 'system' | 'user' | 'assistant';
  readonly content: string;
}

interface ChatUsage {
  readonly inputTokens: number;
  readonly outputTokens: number;
}

export interface ChatAnswer {
  readonly content: string;
  /** From the answer's `usage`; estimated from the text's length (4 characters a token) when the server sent none. */
  readonly usage: ChatUsage;
  /** Tries it took, the first included. */
  readonly tries: number;
}

/** Which API an endpoint speaks: OpenAI's chat completions, or Anthropic's Messages. */
export type ChatApi = 'openai' | 'anthropic';

export interface ChatEndpoint {
  readonly api?: ChatApi;
  /**
   * The API's base URL, e.g. https://api.openai.com/v1 (`/chat/completions` is added) or
   * https://api.anthropic.com (`/v1/messages` is added, as Anthropic's SDK does).
   */
  readonly baseURL: string;
  readonly apiKey?: string;
  readonly model: string;
}

export interface RetryPolicy {
  /** Tries after the first, for failures that may pass: no answer, a timeout, 408, 409, 429, 5xx. */
  readonly retries: number;
  /** The first wait; each next one doubles (a server's Retry-After, when longer, wins; at most 60 s). */
  readonly backoffSeconds: number;
  /** How long one try may take. */
  readonly timeoutSeconds: number;
}

/** A call that failed for good: after its retries, or at once for an answer no retry changes (400, 401, 404 ...). */
export class ChatError extends Error {
  constructor(
    message: string,
    readonly tries: number,
  ) {
    super(message);
    this.name = 'ChatError';
  }
}

/** Did not answer, or answered with a status worth another try. */
class RetryableError extends Error {
  constructor(
    message: string,
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

const RETRY_STATUSES = new Set([408, 409, 429]);
const MAX_WAIT_SECONDS = 60;

export class ChatModel {
  constructor(
    readonly endpoint: ChatEndpoint,
    private readonly policy: RetryPolicy,
    /** Told about each failed try that will be retried. */
    private readonly onRetry: (message: string) => void = () => {},
  ) {
    this.wire = WIRES[endpoint.api ?? 'openai'];
  }

  private readonly wire: Wire;

  /**
   * One completion. `signal` ends the waits between tries (the call then fails with the last
   * error); a try in flight runs to its answer or its timeout.
   */
  async complete(
    messages: readonly ChatMessage[],
    options: { temperature?: number; seed?: number; signal?: AbortSignal } = {},
  ): Promise<ChatAnswer> {
    const body = JSON.stringify(this.wire.body(this.endpoint.model, messages, options));
    for (let tries = 1; ; tries++) {
      try {
        return { ...(await this.once(body)), tries };
      } catch (error) {
        const reason = (error as Error).message;
        if (!(error instanceof RetryableError)) throw new ChatError(reason, tries);
        if (tries > this.policy.retries) throw new ChatError(`${reason} (after ${tries} tries)`, tries);
        const wait = Math.min(
          MAX_WAIT_SECONDS,
          Math.max(error.retryAfterSeconds ?? 0, this.policy.backoffSeconds * 2 ** (tries - 1)),
        );
        this.onRetry(
          `${this.endpoint.model}: ${reason}; try ${tries + 1} of ${this.policy.retries + 1} in ${wait.toFixed(1)} s`,
        );
        await sleep(wait, options.signal);
        if (options.signal?.aborted) throw new ChatError(`${reason} (not retried: stopping)`, tries);
      }
    }
  }

  private async once(body: string): Promise<Omit<ChatAnswer, 'tries'>> {
    const url = `${this.endpoint.baseURL.replace(/\/+$/, '')}${this.wire.path}`;
    const headers: Record<string, string> = { 'content-type': 'application/json', ...this.wire.headers };
    if (this.endpoint.apiKey) Object.assign(headers, this.wire.auth(this.endpoint.apiKey));
    let answer: HttpAnswer;
    try {
      answer = await httpRequest(url, 'POST', headers, body, this.policy.timeoutSeconds * 1000);
    } catch (error) {
      throw new RetryableError(`no answer from ${url}: ${(error as Error).message}`);
    }
    if (answer.status !== 200) {
      const reason = `${url} answered ${answer.status}: ${errorDetail(answer.body)}`;
      if (answer.status >= 500 || RETRY_STATUSES.has(answer.status))
        throw new RetryableError(reason, retryAfter(answer.headers['retry-after']));
      throw new Error(reason);
    }
    return completionOf(this.wire.read(parseJson(answer.body)), body.length);
  }
}

type CompleteOptions = { temperature?: number; seed?: number };

/** What an answer says, before estimates fill in a missing usage. */
interface Reply {
  readonly content: string;
  readonly inputTokens?: number;
  readonly outputTokens?: number;
}

/** How one API is spoken: where, with which headers, the request body, the answer read. */
interface Wire {
  readonly path: string;
  readonly headers: Record<string, string>;
  auth(apiKey: string): Record<string, string>;
  body(model: string, messages: readonly ChatMessage[], options: CompleteOptions): object;
  read(answer: Record<string, unknown>): Reply;
}

const numberOr = (value: unknown) => (typeof value === 'number' ? value : undefined);
const fields = (value: unknown) => (value && typeof value === 'object' ? (value as Record<string, unknown>) : {});

/**
 * An answer a critique or a rewritten prompt fits in: Anthropic requires `max_tokens`, and APO's
 * own budget (`maxTokens`) counts what the calls used, not what they may use.
 */
const ANTHROPIC_MAX_TOKENS = 8192;

const WIRES: Record<ChatApi, Wire> = {
  openai: {
    path: '/chat/completions',
    headers: {},
    auth: (apiKey) => ({ authorization: `Bearer ${apiKey}` }),
    body: (model, messages, { temperature, seed }) => ({
      model,
      messages,
      ...(temperature === undefined ? {} : { temperature }),
      ...(seed === undefined ? {} : { seed }),
    }),
    read: (answer) => {
      const content = fields(fields((answer.choices as unknown[] | undefined)?.[0]).message).content;
      const usage = fields(answer.usage);
      return {
        content: typeof content === 'string' ? content : '',
        inputTokens: numberOr(usage.prompt_tokens),
        outputTokens: numberOr(usage.completion_tokens),
      };
    },
  },
  // System messages go to `system`; Anthropic has no seed.
  anthropic: {
    path: '/v1/messages',
    headers: { 'anthropic-version': '2023-06-01' },
    auth: (apiKey) => ({ 'x-api-key': apiKey }),
    body: (model, messages, { temperature }) => {
      const system = messages.filter((m) => m.role === 'system').map((m) => m.content);
      return {
        model,
        max_tokens: ANTHROPIC_MAX_TOKENS,
        ...(system.length > 0 ? { system: system.join('\n\n') } : {}),
        messages: messages.filter((m) => m.role !== 'system'),
        ...(temperature === undefined ? {} : { temperature }),
      };
    },
    read: (answer) => {
      const blocks = Array.isArray(answer.content) ? answer.content.map(fields) : [];
      const usage = fields(answer.usage);
      const input = numberOr(usage.input_tokens);
      const cached =
        (numberOr(usage.cache_read_input_tokens) ?? 0) + (numberOr(usage.cache_creation_input_tokens) ?? 0);
      return {
        content: blocks
          .filter((block) => block.type === 'text' && typeof block.text === 'string')
          .map((block) => block.text)
          .join(''),
        inputTokens: input === undefined ? undefined : input + cached,
        outputTokens: numberOr(usage.output_tokens),
      };
    },
  },
};

function parseJson(text: string): Record<string, unknown> {
  try {
    return fields(JSON.parse(text));
  } catch {
    throw new RetryableError(`the answer is not JSON: ${text.slice(0, 200)}`);
  }
}

/** The reply with its usage; estimated from the texts' length (4 characters a token) where the server sent none. */
function completionOf(reply: Reply, requestChars: number): Omit<ChatAnswer, 'tries'> {
  return {
    content: reply.content,
    usage: {
      inputTokens: reply.inputTokens ?? Math.ceil(requestChars / 4),
      outputTokens: reply.outputTokens ?? Math.ceil(reply.content.length / 4),
    },
  };
}

function errorDetail(body: string): string {
  try {
    const message = (JSON.parse(body) as { error?: { message?: unknown } }).error?.message;
    if (typeof message === 'string') return message;
  } catch {}
  return body.slice(0, 200) || '(no body)';
}

function retryAfter(value: string | string[] | undefined): number | undefined {
  const seconds = Number(Array.isArray(value) ? value[0] : value);
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined;
}

function sleep(seconds: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, seconds * 1000);
    signal?.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
  });
}
