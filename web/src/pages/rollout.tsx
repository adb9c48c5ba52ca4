/**
 * One rollout: its fields and attempts; for the chosen attempt (?attempt=, else the latest) the
 * waterfall of its spans with rewards marked, its rewards with who gave them and why, its LLM
 * calls as chat, each span's JSON on demand.
 * Polled live while the rollout is not finished.
 */
import { useState } from 'preact/hooks';
import type { Attempt, AttemptedRollout, Rollout, Span } from '../../../src/api/types.js';
import { getAttempts, getRollout, getSpans, sql } from '../api.js';
import { ErrorNote, Freshness, Status } from '../components/common.js';
import { formatAgo, formatDuration, formatTime, prettyJson } from '../format.js';
import { useLoaded } from '../poll.js';
import { attemptCallsSql, attemptRewardsSql } from '../queries.js';
import { Link, type Place, urlOf } from '../router.js';
import type { CallRow, RewardRow } from '../attempt-rows.js';
import { Calls } from './chat.js';
import { Rewards } from './rewards.js';
import { Waterfall } from './waterfall.js';

/** Spans an attempt's waterfall shows at most (the REST API pages them). */
const SPAN_LIMIT = 2000;
const FINISHED = new Set(['succeeded', 'failed', 'cancelled']);

export function RolloutPage({ id, place }: { id: string; place: Place }) {
  // Polled until the rollout is finished (then once more, as the poll stops).
  const [finished, setFinished] = useState(false);
  const loaded = useLoaded(
    async (signal) => {
      const [rollout, attempts] = await Promise.all([getRollout(id, signal), getAttempts(id, signal)]);
      setFinished(rollout !== null && FINISHED.has(rollout.status));
      return { rollout, attempts: attempts.items };
    },
    [id],
    !finished,
  );
  const rollout = loaded.data?.rollout;
  const attempts = loaded.data?.attempts ?? [];
  const chosenId = place.query.get('attempt');
  const attempt = attempts.find((a) => a.attempt_id === chosenId) ?? attempts.at(-1);
  return (
    <main id="main" class="page">
      <p class="crumbs">
        <Link href="/">Rollouts</Link> / <span class="mono">{id}</span>
      </p>
      <div class="page-head">
        <h1>
          Rollout <span class="mono">{id}</span>
        </h1>
        {rollout ? <Status value={rollout.status} /> : null}
        <Freshness at={loaded.at} loading={loaded.loading} live={!finished} />
      </div>
      <ErrorNote error={loaded.error} />
      {loaded.data && rollout === null ? <p class="empty">No rollout {id} in this store.</p> : null}
      {rollout ? <RolloutFacts rollout={rollout} /> : null}
      {attempts.length > 0 ? <AttemptList rolloutId={id} attempts={attempts} chosen={attempt} /> : null}
      {rollout && attempt ? <AttemptView key={attempt.attempt_id} rollout={rollout} attempt={attempt} /> : null}
    </main>
  );
}

function RolloutFacts({ rollout }: { rollout: Rollout | AttemptedRollout }) {
  const end = rollout.end_time ?? (FINISHED.has(rollout.status) ? null : Date.now() / 1000);
  return (
    <section class="panel facts" aria-label="Rollout">
      <dl>
        <dt>Mode</dt>
        <dd>{rollout.mode ?? '—'}</dd>
        <dt>Resources</dt>
        <dd class="mono">{rollout.resources_id ?? 'latest at each call'}</dd>
        <dt>Started</dt>
        <dd>{formatTime(rollout.start_time)}</dd>
        <dt>Duration</dt>
        <dd>{end === null ? '—' : formatDuration(end - rollout.start_time)}</dd>
        <dt>Max attempts</dt>
        <dd>{rollout.config.max_attempts}</dd>
      </dl>
      <details>
        <summary>Input</summary>
        <pre class="json">{prettyJson(rollout.input)}</pre>
      </details>
      {rollout.metadata && Object.keys(rollout.metadata).length > 0 ? (
        <details>
          <summary>Metadata</summary>
          <pre class="json">{prettyJson(rollout.metadata)}</pre>
        </details>
      ) : null}
    </section>
  );
}

function AttemptList({ rolloutId, attempts, chosen }: { rolloutId: string; attempts: Attempt[]; chosen?: Attempt }) {
  return (
    <section class="panel" aria-labelledby="attempts-title">
      <h2 id="attempts-title">Attempts</h2>
      <table class="data">
        <thead>
          <tr>
            <th scope="col">#</th>
            <th scope="col">Attempt</th>
            <th scope="col">Status</th>
            <th scope="col">Worker</th>
            <th scope="col">Started</th>
            <th scope="col" class="num">
              Duration
            </th>
            <th scope="col">Last heartbeat</th>
          </tr>
        </thead>
        <tbody>
          {attempts.map((a) => (
            <tr key={a.attempt_id} class={a === chosen ? 'chosen' : undefined}>
              <td>{a.sequence_id}</td>
              <td>
                <Link
                  class="mono"
                  href={urlOf(`/rollouts/${encodeURIComponent(rolloutId)}`, { attempt: a.attempt_id })}
                  aria-current={a === chosen ? 'true' : undefined}
                >
                  {a.attempt_id}
                </Link>
              </td>
              <td>
                <Status value={a.status} />
              </td>
              <td class="mono">{a.worker_id ?? '—'}</td>
              <td class="nowrap">{formatTime(a.start_time)}</td>
              <td class="num">{formatDuration((a.end_time ?? Date.now() / 1000) - a.start_time)}</td>
              <td>{formatAgo(a.last_heartbeat_time)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

interface AttemptData {
  readonly spans: Span[];
  readonly spanTotal: number;
  readonly calls: CallRow[];
  readonly rewards: RewardRow[];
}

function AttemptView({ rollout, attempt }: { rollout: Rollout; attempt: Attempt }) {
  const running = attempt.end_time === null;
  const loaded = useLoaded<AttemptData>(
    async (signal) => {
      const [spans, calls, rewards] = await Promise.all([
        getSpans(rollout.rollout_id, attempt.attempt_id, SPAN_LIMIT, signal),
        sql<CallRow>(attemptCallsSql(rollout.rollout_id, attempt.attempt_id), signal),
        sql<RewardRow>(attemptRewardsSql(rollout.rollout_id, attempt.attempt_id), signal),
      ]);
      return { spans: spans.items, spanTotal: spans.total, calls: calls.rows, rewards: rewards.rows };
    },
    [rollout.rollout_id, attempt.attempt_id],
    running,
  );
  const data = loaded.data;
  return (
    <>
      <ErrorNote error={loaded.error} />
      {data ? (
        <>
          <Waterfall spans={data.spans} total={data.spanTotal} calls={data.calls} rewards={data.rewards} />
          <Rewards rewards={data.rewards} />
          <Calls calls={data.calls} rewards={data.rewards} />
        </>
      ) : loaded.loading ? (
        <p class="empty">Loading the attempt's spans…</p>
      ) : null}
    </>
  );
}
