/**
 * An attempt's rewards in one place, whoever gave them: the agent (emitReward), a user's late
 * feedback (POST /v1/agl/feedback) or an LLM judge; each with its comment or the judge's reason.
 */
import { formatNumber, formatTime } from '../format.js';
import type { RewardRow } from '../attempt-rows.js';

export function Rewards({ rewards }: { rewards: RewardRow[] }) {
  return (
    <section class="panel" aria-labelledby="rewards-title">
      <h2 id="rewards-title">Rewards</h2>
      {rewards.length === 0 ? (
        <p class="empty">No reward yet: not from the agent, nor feedback, nor a judge.</p>
      ) : (
        <table class="rewards">
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col" class="num">
                Value
              </th>
              <th scope="col">Source</th>
              <th scope="col">Comment or reason</th>
              <th scope="col">Time</th>
            </tr>
          </thead>
          <tbody>
            {rewards.map((r) => (
              <tr key={`${r.span_id}:${r.name}`} class={r.is_primary ? 'primary' : undefined}>
                <td>{r.name}</td>
                <td class="num">{formatNumber(r.value)}</td>
                <td>
                  <span class={`source ${r.source}`}>{r.source}</span>
                </td>
                <td class="feedback">{r.feedback ?? '—'}</td>
                <td class="nowrap">{formatTime(r.time)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
