import { httpRequest, type HttpAnswer } from '../../client/http-request.js';

/**
 * The models an algorithm consults itself (APO's critic and editor): an OpenAI-compatible
 * `/chat/completions` endpoint, called with retries and backoff. It goes through agl's own HTTP
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

export interface ChatEndpoint {
  /** The API's base URL, e.g. https://api.openai.com/v1 (`/chat/completions` is added). */
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
  ) {}

  /**
   * One completion. `signal` ends the waits between tries (the call then fails with the last
   * error); a try in flight runs to its answer or its timeout.
   */
  async complete(
    messages: readonly ChatMessage[],
    options: { temperature?: number; seed?: number; signal?: AbortSignal } = {},
  ): Promise<ChatAnswer> {
    const body = JSON.stringify({
      model: this.endpoint.model,
      messages,
      ...(options.temperature === undefined ? {} : { temperature: options.temperature }),
      ...(options.seed === undefined ? {} : { seed: options.seed }),
    });
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
    const url = `${this.endpoint.baseURL.replace(/\/+$/, '')}/chat/completions`;
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.endpoint.apiKey) headers.authorization = `Bearer ${this.endpoint.apiKey}`;
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
    return parseCompletion(answer.body, body.length);
  }
}

/** The first choice's text and the usage of a chat completion body. */
function parseCompletion(text: string, requestChars: number): Omit<ChatAnswer, 'tries'> {
  let parsed: {
    choices?: { message?: { content?: unknown } }[];
    usage?: { prompt_tokens?: unknown; completion_tokens?: unknown };
  };
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new RetryableError(`the answer is not JSON: ${text.slice(0, 200)}`);
  }
  const content = parsed.choices?.[0]?.message?.content;
  const reply = typeof content === 'string' ? content : '';
  const usage = parsed.usage;
  return {
    content: reply,
    usage: {
      inputTokens: typeof usage?.prompt_tokens === 'number' ? usage.prompt_tokens : Math.ceil(requestChars / 4),
      outputTokens:
        typeof usage?.completion_tokens === 'number' ? usage.completion_tokens : Math.ceil(reply.length / 4),
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
