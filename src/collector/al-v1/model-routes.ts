import * as z from 'zod';
import { mustBe, numberIn, requiredText } from '../../api/schema-fields.js';
import { readJson, sendJson, type Route } from '../http.js';
import { checkNesting, parseRequest } from '../validate.js';
import type { ModelRegistry } from './model-registry.js';

const BODY_LIMIT = 1024 * 1024;

const httpUrl = z.string().refine(
  (value) => {
    try {
      return ['http:', 'https:'].includes(new URL(value).protocol);
    } catch {
      return false;
    }
  },
  { error: mustBe('an http(s) URL such as http://127.0.0.1:8000/v1') },
);

/** POST /api/models: a list of v1's `Model` (its other fields are dropped, as pydantic drops them). */
const modelServers = z.array(
  z.object({
    model: requiredText,
    endpoint: httpUrl,
    version: numberIn({ integer: true, min: 0 }).default(0),
  }),
);

/**
 * Agent Lightning v1's model registry: its trainer registers the inference servers of the model
 * it trains (`POST /api/models`, upserted by model and endpoint, 201 with what was registered)
 * and clears them when it stops (`DELETE /api/models`); the proxy routes calls to them.
 */
export function modelRoutes(registry: ModelRegistry): Route[] {
  return [
    {
      method: 'POST',
      path: '/api/models',
      handle: async (request, response) => {
        const body = await readJson(request, BODY_LIMIT);
        checkNesting(body);
        const servers = parseRequest(modelServers, body);
        await registry.register(servers);
        sendJson(response, 201, servers);
      },
    },
    {
      method: 'DELETE',
      path: '/api/models',
      handle: async (_request, response) => {
        await registry.clear();
        sendJson(response, 200, { status: 'ok' });
      },
    },
  ];
}
