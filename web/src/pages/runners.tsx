/** Runners: every worker the store knows, its status, what it runs, its last heartbeat; polled live. */
import { getWorkers } from '../api.js';
import { ErrorNote, Freshness, Status } from '../components/common.js';
import { formatAgo, oneLine } from '../format.js';
import { useLoaded } from '../poll.js';
import { Link, urlOf } from '../router.js';

export function RunnersPage() {
  const loaded = useLoaded((signal) => getWorkers(signal), [], true);
  const workers = loaded.data?.items ?? [];
  const busy = workers.filter((w) => w.status === 'busy').length;
  return (
    <main id="main" class="page">
      <div class="page-head">
        <h1>Runners</h1>
        <Freshness at={loaded.at} loading={loaded.loading} live={true} />
      </div>
      <ErrorNote error={loaded.error} />
      <p class="summary">
        {workers.length} workers, {busy} busy.
      </p>
      <div class="table-scroll">
        <table class="data">
          <thead>
            <tr>
              <th scope="col">Worker</th>
              <th scope="col">Status</th>
              <th scope="col">Current rollout</th>
              <th scope="col">Last heartbeat</th>
              <th scope="col">Last dequeue</th>
              <th scope="col">Heartbeat stats</th>
            </tr>
          </thead>
          <tbody>
            {workers.map((w) => (
              <tr key={w.worker_id}>
                <td class="mono">{w.worker_id}</td>
                <td>
                  <Status value={w.status} />
                </td>
                <td>
                  {w.current_rollout_id ? (
                    <Link
                      class="mono"
                      href={urlOf(`/rollouts/${encodeURIComponent(w.current_rollout_id)}`, {
                        attempt: w.current_attempt_id ?? undefined,
                      })}
                    >
                      {w.current_rollout_id}
                    </Link>
                  ) : (
                    '—'
                  )}
                </td>
                <td>{formatAgo(w.last_heartbeat_time)}</td>
                <td>{formatAgo(w.last_dequeue_time)}</td>
                <td class="mono">{w.heartbeat_stats ? oneLine(w.heartbeat_stats, 80) : '—'}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {workers.length === 0 && loaded.data ? <p class="empty">No runner has dequeued yet.</p> : null}
      </div>
    </main>
  );
}
