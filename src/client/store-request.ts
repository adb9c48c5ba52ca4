import { InvalidQueryError, NotFoundError } from '../api/errors.js';

/**
 * The store did not answer (refused, reset, timed out), or a proxy or the store itself said it
 * is unavailable for now (502, 503, 504): the same call may succeed later.
 */
export class StoreUnreachableError extends Error {
  /** What the store said, when it answered. */
  readonly detail?: string;
  /** How many times the call was sent and failed, and when the first of those failed (ms since the epoch). */
  readonly tries: number;
  readonly failingSince: number;

  constructor(
    message: string,
    readonly status?: number,
    options?: ErrorOptions & { detail?: string; tries?: number; failingSince?: number },
  ) {
    super(message, options);
    this.name = 'StoreUnreachableError';
    this.detail = options?.detail;
    this.tries = options?.tries ?? 1;
    this.failingSince = options?.failingSince ?? Date.now();
  }
}

/** The store answered with an error that retrying will not fix (a 500, a 401, ...). */
export class StoreAnswerError extends Error {
  constructor(
    message: string,
    readonly status: number,
    /** What the store said. */
    readonly detail = message,
  ) {
    super(message);
    this.name = 'StoreAnswerError';
  }
}

/** What every answer has, whether its body is read at once or streamed. */
export interface AnswerHead {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
}

/** One request to an agl server, and how to send it again. */
export interface StoreCall<A extends AnswerHead> {
  /** The server's API root (…/v1/agl), for messages. */
  readonly base: string;
  readonly method: string;
  readonly path: string;
  /** Retry after network errors: always (reads, updates that set a state), never, or only when the request was never sent ('unsent': calls that create something). */
  readonly retry: boolean | 'unsent';
  /** Delays between retries (seconds); a 503 or 429 waits its Retry-After instead. */
  readonly delaysSeconds: readonly number[];
  /** A refused connection is retried too (default): false for a caller that must hear at once that nothing listens. */
  readonly retryRefused?: boolean;
  /** Sends the request once; rejects when no answer came. */
  send(): Promise<A>;
  /** The body of an error answer, as text. */
  text(answer: A): string | Promise<string>;
}

/** Delays between retries unless a client is given its own. */
export const RETRY_DELAYS_SECONDS: readonly number[] = [1, 2, 5];

/**
 * The retry policy of the command line's one-shot commands (`agl query --url`, `agl export
 * --url`): a server that answers 503 is waited for as by any client, but one that is not there
 * (connection refused) is said at once. Retrying a refusal is for runners and algorithms that
 * outlive a restart; a person at a prompt waited 8 s for the same line.
 */
export const ONE_SHOT_RETRY = { retryDelaysSeconds: RETRY_DELAYS_SECONDS, retryRefused: false } as const;

/** Answers that say the store (or the way to it) is away for now, not that the call is wrong. */
const UNAVAILABLE_STATUSES = new Set([502, 503, 504]);

/**
 * Sends `call` with the retry rules of every agl client: a request the server never answered is
 * sent again after a pause (a call that creates something only when it never reached the server),
 * and so is one the server refused as busy (503, 429). Resolves with a 2xx answer; otherwise
 * throws as the embedded store would: NotFoundError (404), InvalidQueryError (400),
 * StoreUnreachableError when the store is away, StoreAnswerError for its other error answers.
 */
export async function storeRequest<A extends AnswerHead>(call: StoreCall<A>): Promise<A> {
  const delays = call.retry ? call.delaysSeconds : [];
  let failingSince: number | undefined;
  for (let attempt = 0; ; attempt++) {
    let answer: A;
    try {
      answer = await call.send();
    } catch (error) {
      failingSince ??= Date.now();
      // An answer lost after the server acted would create the thing twice: a call that creates
      // something is retried only when it never reached the server.
      const unsent = (error as NodeJS.ErrnoException).code === 'ECONNREFUSED';
      if (attempt >= delays.length || (call.retry === 'unsent' && !unsent) || (unsent && call.retryRefused === false)) {
        throw new StoreUnreachableError(
          `agl store at ${call.base} did not answer ${call.method} ${call.path}: ${(error as Error).message}`,
          undefined,
          { cause: error, tries: attempt + 1, failingSince },
        );
      }
      await sleep(delays[attempt]);
      continue;
    }
    if (answer.status >= 200 && answer.status < 300) return answer;
    const detail = detailOf(await call.text(answer));
    if (answer.status === 404) throw new NotFoundError(detail);
    if (answer.status === 400) throw new InvalidQueryError(detail);
    if (UNAVAILABLE_STATUSES.has(answer.status) || answer.status === 429) failingSince ??= Date.now();
    if ((answer.status === 503 || answer.status === 429) && attempt < delays.length) {
      await sleep(Number(answer.headers['retry-after'] ?? delays[attempt]));
      continue;
    }
    const message = `agl store answered ${answer.status} to ${call.method} ${call.path}: ${detail}`;
    if (UNAVAILABLE_STATUSES.has(answer.status))
      throw new StoreUnreachableError(message, answer.status, { detail, tries: attempt + 1, failingSince });
    throw new StoreAnswerError(message, answer.status, detail);
  }
}

/** The headers of a request to the store: JSON when it has a body, the bearer token when there is one. */
export function storeHeaders(token: string | undefined, hasBody: boolean): Record<string, string> {
  return {
    ...(hasBody ? { 'content-type': 'application/json' } : {}),
    ...(token ? { authorization: `Bearer ${token}` } : {}),
  };
}

const sleep = (seconds: number) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

function detailOf(text: string): string {
  try {
    const detail = (JSON.parse(text) as { detail?: unknown }).detail;
    return typeof detail === 'string' ? detail : JSON.stringify(detail ?? text);
  } catch {
    return text;
  }
}
