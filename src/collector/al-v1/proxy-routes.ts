import { createHash } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import * as z from 'zod';
import type { LightningStore } from '../../api/lightning-store.js';
import { V1_PROXY_ATTR } from '../../api/semconv.js';
import { numberIn } from '../../api/schema-fields.js';
import type { LlmApi } from '../../otlp/llm-exchange.js';
import type { Gateway, Upstream } from '../gateway.js';
import { readJsonObject, sendJson, type Route } from '../http.js';
import { parseRequest } from '../validate.js';
import type { ModelRegistry, ModelServer } from './model-registry.js';
import { liveRollout } from './rollout-routes.js';
import type { V1ProxySettings } from './proxy-settings.js';

/**
 * Agent Lightning v1's LLM proxy, on agl's gateway: an agent's OpenAI base URL is
 * `/proxy/rollout/{id}/attempt/{aid}/mode/{train|val}/openai/v1`. Each call goes to a registered
 * server of the served model with the mode's parameters, and is recorded as every gateway call
 * is (a span of the rollout and attempt, a row of `llm_calls`). A pause turns new calls away
 * while those in flight finish, so that the trainer can update the weights.
 */

/** The API paths an agent's OpenAI (or, with the base URL without `/v1`, Anthropic) client calls. */
const APIS: [path: string, api: LlmApi][] = [
  ['chat/completions', 'chat'],
  ['completions', 'text_completion'],
  ['responses', 'responses'],
  ['messages', 'messages'],
];

const MODES = ['train', 'val'] as const;
type Mode = (typeof MODES)[number];

/** The pause of v1's gateway, and the calls it forwards right now (streams until their last byte). */
export class ProxyState {
  paused = false;
  retryAfterSeconds = 5;
  reason: string | null = null;
  inflight = 0;

  answer() {
    return {
      paused: this.paused,
      retry_after_seconds: this.retryAfterSeconds,
      reason: this.reason,
      inflight: this.inflight,
    };
  }
}

const pauseRequest = z.object({
  retry_after_seconds: numberIn({ integer: true, min: 0, max: 86_400 }).default(5),
  reason: z
    .string()
    .nullish()
    .transform((value) => value ?? null),
});

/**
 * Which server of `servers` (sorted by endpoint) a rollout's calls go to: the first 8 bytes of
 * the SHA-256 of its id, modulo their count, as v1 picks, so that a rollout stays on one server
 * (its prefix cache) while the registry does not change.
 */
export function serverFor(rolloutId: string, servers: readonly ModelServer[]): ModelServer {
  const digest = createHash('sha256').update(rolloutId, 'utf8').digest();
  return servers[Number(digest.readBigUInt64BE(0) % BigInt(servers.length))];
}

/** What a call of `mode` is sent with: v1's `ProxyRouter.prepare_body`, as an upstream of the gateway. */
function upstreamOf(server: ModelServer, settings: V1ProxySettings, mode: Mode): Upstream {
  return {
    base: server.endpoint,
    model: settings.modelName,
    sampling: {},
    forced: mode === 'train' ? settings.train : settings.val,
    tokenIds: true,
    logprobs: mode === 'train' && settings.includeLogprobs,
    attributes: {
      [V1_PROXY_ATTR.mode]: mode,
      [V1_PROXY_ATTR.serverModel]: server.model,
      [V1_PROXY_ATTR.serverEndpoint]: server.endpoint,
      [V1_PROXY_ATTR.serverVersion]: server.version,
    },
  };
}

/** v1 answers its own refusals as FastAPI does: `{"detail": ...}`. */
const refuse = (response: ServerResponse, status: number, detail: string) => sendJson(response, status, { detail });

export function proxyRoutes(
  store: LightningStore,
  gateway: Gateway,
  registry: ModelRegistry,
  settings: V1ProxySettings,
  state: ProxyState,
): Route[] {
  const forward =
    (api: LlmApi, path: string): Route['handle'] =>
    async (request, response, [rolloutId, attemptId, mode]) => {
      if (!(MODES as readonly string[]).includes(mode))
        return refuse(response, 404, `Unsupported proxy mode: ${mode} (train or val)`);
      await liveRollout(store, rolloutId);
      const servers = await registry.serversOf(settings.modelName);
      if (servers.length === 0)
        return refuse(response, 503, `No servers available for model '${settings.modelName}' (POST /api/models)`);
      if (state.paused) {
        sendJson(
          response,
          429,
          { error: 'gateway paused', reason: state.reason },
          { 'retry-after': String(state.retryAfterSeconds), 'x-agl-paused': 'true' },
        );
        return;
      }
      // Counted from here to the exchange's end, whatever ends it (an answer, an error, the agent leaving).
      state.inflight += 1;
      try {
        const upstream = upstreamOf(serverFor(rolloutId, servers), settings, mode as Mode);
        await gateway.forward(api, path, { rolloutId, attemptId }, upstream, request, response);
      } finally {
        state.inflight -= 1;
      }
    };
  const prefix = '/proxy/rollout/{rollout_id}/attempt/{attempt_id}/mode/{mode}/openai/v1';
  return [
    ...APIS.map(([path, api]): Route => ({ method: 'POST', path: `${prefix}/${path}`, handle: forward(api, path) })),
    {
      method: 'POST',
      path: '/proxy/pause',
      handle: async (request, response) => {
        const body = parseRequest(pauseRequest, await readJsonObject(request, 64 * 1024, { orEmpty: true }));
        state.paused = true;
        state.retryAfterSeconds = body.retry_after_seconds;
        state.reason = body.reason;
        sendJson(response, 200, state.answer());
      },
    },
    {
      method: 'POST',
      path: '/proxy/resume',
      handle: async (_request, response) => {
        state.paused = false;
        state.reason = null;
        sendJson(response, 200, state.answer());
      },
    },
    {
      method: 'GET',
      path: '/proxy/state',
      handle: async (_request, response) => sendJson(response, 200, state.answer()),
    },
  ];
}
