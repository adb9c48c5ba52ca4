import type { LightningStore } from '../api/lightning-store.js';
import { nextSequenceBody, spanBody, spanQuery } from '../api/requests.js';
import type { Route } from './http.js';
import { create, get, post } from './rest-route.js';

/** Spans sent as JSON (Agent Lightning's Span), their queries, and the rollouts' sequence counters. */
export function spanRoutes(store: LightningStore): Route[] {
  return [
    create('/spans', spanBody, async (span) =>
      store.addSpan({
        ...span,
        sequence_id: span.sequence_id ?? (await store.getNextSpanSequenceId(span.rollout_id, span.attempt_id)),
      }),
    ),
    get('/spans', spanQuery, (query) => store.querySpans(query)),
    post('/spans/search', spanQuery, (query) => store.querySpans(query)),
    post('/spans/next', nextSequenceBody, async (body) => ({
      sequence_id: await store.getNextSpanSequenceId(body.rollout_id, body.attempt_id),
    })),
  ];
}
