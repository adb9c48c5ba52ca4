/**
 * Agent Lightning v1's events as its clients read them: `model_request` data made from a row of
 * `llm_calls` (with the span's exact exchange when agl holds it), and v1's `triplet` format,
 * which trims a model request to the token ids and logprobs a trainer needs.
 */

export interface V1Event {
  event_type: string;
  rollout_id: string;
  attempt_id: string;
  timestamp: number;
  data: Record<string, unknown>;
}

type Row = Record<string, unknown>;

const objectOr = (value: unknown): Row | null =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Row) : null;
const numberOr = (value: unknown): number | null =>
  value === null || value === undefined || value === '' || !Number.isFinite(Number(value)) ? null : Number(value);

/**
 * v1's ModelRequestData of a call: the registered server it went to (the proxy's), the request
 * and response bodies as sent and answered (a chat completion made from the row when the call
 * was recorded by another instrumentation), its latency, HTTP status and usage.
 */
export function modelRequestOf(call: Row, request: unknown, response: unknown): Row {
  const version = numberOr(call.server_version);
  const server = {
    model: (call.server_model as string | null) ?? call.model ?? null,
    endpoint: call.server_endpoint ?? null,
    version,
  };
  const httpStatus = numberOr(call.http_status);
  const failed = (httpStatus ?? 200) >= 400 || call.status_code === 'ERROR';
  // agl keeps a refused call's error message (the span's status), not the body it came in.
  const refusal: Row = { error: { message: call.status_message ?? `HTTP ${httpStatus}`, code: httpStatus } };
  const answered = objectOr(response) ?? (failed ? refusal : chatCompletionOf(call));
  const usage =
    objectOr(answered.usage) ??
    (call.input_tokens === null && call.output_tokens === null
      ? null
      : {
          prompt_tokens: numberOr(call.input_tokens),
          completion_tokens: numberOr(call.output_tokens),
          total_tokens: (numberOr(call.input_tokens) ?? 0) + (numberOr(call.output_tokens) ?? 0),
        });
  return {
    model: server.model,
    model_version: version,
    request: objectOr(request) ?? { model: call.model ?? null, messages: call.input_messages ?? [] },
    response: answered,
    server,
    latency_ms: (Number(call.end_us ?? call.start_us) - Number(call.start_us)) / 1000,
    http_status: httpStatus,
    status: failed ? 'error' : 'ok',
    retry_count: 0,
    usage,
    finish_reason: call.finish_reason ?? null,
  };
}

/** A chat completion with token ids, as vLLM answers it, from a row of `llm_calls`. */
function chatCompletionOf(call: Row): Row {
  const [message] = Array.isArray(call.output_messages) ? call.output_messages : [];
  return {
    id: call.response_id ?? null,
    object: 'chat.completion',
    model: call.model ?? null,
    ...(call.prompt_token_ids ? { prompt_token_ids: call.prompt_token_ids } : {}),
    choices: [
      {
        index: 0,
        message: message ?? null,
        finish_reason: call.finish_reason ?? null,
        ...(call.response_token_ids ? { token_ids: call.response_token_ids } : {}),
      },
    ],
  };
}

/** The triplet of a call: its token ids and logprobs as `llm_calls` holds them, whatever the API. */
export function tripletOfCall(call: Row, modelRequest: Row): Row {
  const server = modelRequest.server as Row;
  const error = objectOr(modelRequest.response)?.error;
  return {
    prompt_token_ids: call.prompt_token_ids ?? [],
    response_token_ids: call.response_token_ids ?? [],
    response_log_probs: call.response_logprobs ?? null,
    server: { model: server.model, version: server.version },
    http_status: modelRequest.http_status,
    status: modelRequest.status,
    ...(error === undefined ? {} : { error }),
  };
}

/** v1's `_trim_model_request` of a posted model_request: token ids and logprobs from its response. */
export function trimModelRequest(data: Row): Row {
  const response = data.response;
  let promptTokenIds: unknown = [];
  let responseTokenIds: unknown = [];
  let logProbs: number[] | null = null;
  const answered = objectOr(response);
  if (answered) {
    promptTokenIds = answered.prompt_token_ids ?? [];
    const [choice] = Array.isArray(answered.choices) ? answered.choices.map(objectOr) : [];
    if (choice) {
      if (!Array.isArray(promptTokenIds) || promptTokenIds.length === 0) promptTokenIds = choice.prompt_token_ids ?? [];
      responseTokenIds = choice.token_ids ?? [];
      logProbs = chosenLogProbs(choice);
    }
  } else if (Array.isArray(response)) {
    // Raw stream chunks, which v1's first gateways stored.
    const ids: unknown[] = [];
    for (const chunk of response.map(objectOr)) {
      if (!chunk) continue;
      if ((!Array.isArray(promptTokenIds) || promptTokenIds.length === 0) && Array.isArray(chunk.prompt_token_ids))
        promptTokenIds = chunk.prompt_token_ids;
      const [choice] = Array.isArray(chunk.choices) ? chunk.choices.map(objectOr) : [];
      if (choice && Array.isArray(choice.token_ids)) ids.push(...choice.token_ids);
    }
    responseTokenIds = ids;
  }
  const server = objectOr(data.server) ?? {};
  const trimmed: Row = {
    prompt_token_ids: promptTokenIds,
    response_token_ids: responseTokenIds,
    response_log_probs: logProbs,
    server: { model: server.model ?? null, version: server.version ?? null },
  };
  for (const key of ['http_status', 'status']) if (key in data) trimmed[key] = data[key];
  if (answered && 'error' in answered) trimmed.error = answered.error;
  return trimmed;
}

/** The sampled tokens' logprobs of a choice (chat's `logprobs.content`, completions' `token_logprobs`); null when unusable. */
function chosenLogProbs(choice: Row): number[] | null {
  const logprobs = objectOr(choice.logprobs);
  if (!logprobs) return null;
  let raw: unknown[];
  if (Array.isArray(logprobs.content)) {
    raw = [];
    for (const item of logprobs.content) {
      const entry = objectOr(item);
      if (!entry || !('logprob' in entry)) return null;
      raw.push(entry.logprob);
    }
  } else if (Array.isArray(logprobs.token_logprobs)) {
    raw = logprobs.token_logprobs;
  } else {
    return null;
  }
  const values = raw.map((value) =>
    typeof value === 'number' || typeof value === 'string' ? Number(value) : Number.NaN,
  );
  return values.every(Number.isFinite) ? values : null;
}

/** v1's dedupe: of the model requests with one prompt (a retried call), only the last stays. */
export function dedupeModelRequests(events: V1Event[]): V1Event[] {
  const lastByPrompt = new Map<string, number>();
  events.forEach((event, index) => {
    if (event.event_type !== 'model_request') return;
    const ids = event.data.prompt_token_ids;
    lastByPrompt.set(Array.isArray(ids) ? JSON.stringify(ids) : '[]', index);
  });
  const kept = new Set(lastByPrompt.values());
  return events.filter((event, index) => event.event_type !== 'model_request' || kept.has(index));
}
