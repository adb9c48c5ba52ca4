/**
 * Evaluations (`agl eval`, `agl train --eval`): a run's variants side by side with their 95%
 * intervals drawn as bars on one scale, each one's paired difference against the baseline, and
 * the tasks sorted by how much they changed, each linking to its rollouts.
 */
import { sql } from '../api.js';
import { ErrorNote, Section } from '../components/common.js';
import { formatNumber, oneLine } from '../format.js';
import { useLoaded } from '../poll.js';
import { EVALUATIONS_SQL, evaluationTasksSql } from '../queries.js';
import { Link, navigate, type Place, urlOf } from '../router.js';

interface VariantRow {
  readonly run_id: string;
  readonly variant: string;
  readonly position: number;
  readonly tasks: number;
  readonly samples: number;
  readonly rollouts: number;
  readonly failed: number;
  readonly mean: number | null;
  readonly mean_low: number | null;
  readonly mean_high: number | null;
  readonly success_rate: number | null;
  readonly baseline: string | null;
  readonly difference: number | null;
  readonly difference_low: number | null;
  readonly difference_high: number | null;
  readonly p_value: number | null;
  readonly tasks_needed: number | null;
}

interface TaskRow {
  readonly variant: string;
  readonly task: number;
  readonly input: string;
  readonly mean: number | null;
  readonly baseline_mean: number | null;
  readonly change: number | null;
  readonly failed: number;
  readonly rollout_ids: string;
}

async function load(runId: string | null, signal: AbortSignal) {
  const variants = (await sql<VariantRow>(EVALUATIONS_SQL, signal)).rows;
  const run = runId ?? variants[0]?.run_id;
  const tasks = run ? (await sql<TaskRow>(evaluationTasksSql(run), signal)).rows : [];
  return { variants, run, tasks };
}

export function EvaluationsPage({ place }: { place: Place }) {
  const wanted = place.query.get('run');
  const loaded = useLoaded((signal) => load(wanted, signal), [wanted]);
  const data = loaded.data;
  const runs = data ? [...new Set(data.variants.map((v) => v.run_id))] : [];
  const variants = data?.variants.filter((v) => v.run_id === data.run) ?? [];
  return (
    <main id="main" class="page">
      <div class="page-head">
        <h1>Evaluations</h1>
        {runs.length > 1 ? (
          <label class="inline">
            Run
            <select value={data?.run} onChange={(e) => navigate(urlOf('/evaluations', { run: e.currentTarget.value }))}>
              {runs.map((run) => (
                <option key={run} value={run}>
                  {run}
                </option>
              ))}
            </select>
          </label>
        ) : null}
      </div>
      <ErrorNote error={loaded.error} />
      {data && variants.length === 0 ? (
        <p>No evaluation yet: run agl eval, or agl train sft|grpo --eval FILE.</p>
      ) : null}
      {variants.length > 0 ? (
        <>
          <Section title={`Variants of ${data?.run}: mean reward, 95% interval`} id="variants">
            <Variants variants={variants} />
          </Section>
          <Section title="Paired differences against the baseline (same tasks)" id="differences">
            <Differences variants={variants} />
          </Section>
          <Section title="Tasks, largest change first" id="tasks">
            <Tasks tasks={data?.tasks ?? []} baseline={variants[0].variant} />
          </Section>
        </>
      ) : null}
    </main>
  );
}

/** A bar from low to high with a tick at the mean, on a scale from `min` to `max`. */
function IntervalBar(props: {
  low: number | null;
  mean: number | null;
  high: number | null;
  min: number;
  max: number;
}) {
  const { low, mean, high, min, max } = props;
  if (low === null || mean === null || high === null) return <span>—</span>;
  const at = (x: number) => `${(100 * (Math.min(max, Math.max(min, x)) - min)) / (max - min || 1)}%`;
  const zero = min < 0 && max > 0 ? <span class="interval-zero" style={{ left: at(0) }} /> : null;
  return (
    <span
      class="interval"
      role="img"
      aria-label={`${formatNumber(mean)} [${formatNumber(low)}, ${formatNumber(high)}]`}
    >
      {zero}
      <span class="interval-bar" style={{ left: at(low), width: `calc(${at(high)} - ${at(low)})` }} />
      <span class="interval-mean" style={{ left: at(mean) }} />
    </span>
  );
}

function Variants({ variants }: { variants: VariantRow[] }) {
  const ends = variants.flatMap((v) => [v.mean_low, v.mean_high]).filter((x): x is number => x !== null);
  const [min, max] = [Math.min(0, ...ends), Math.max(1, ...ends)];
  return (
    <table class="evaluation">
      <thead>
        <tr>
          <th>variant</th>
          <th>mean</th>
          <th>95% interval</th>
          <th class="interval-cell">
            on a scale {formatNumber(min, 2)} to {formatNumber(max, 2)}
          </th>
          <th>success</th>
          <th>failed</th>
        </tr>
      </thead>
      <tbody>
        {variants.map((v) => (
          <tr key={v.variant}>
            <td>{v.variant}</td>
            <td>{formatNumber(v.mean)}</td>
            <td>
              [{formatNumber(v.mean_low)}, {formatNumber(v.mean_high)}]
            </td>
            <td class="interval-cell">
              <IntervalBar low={v.mean_low} mean={v.mean} high={v.mean_high} min={min} max={max} />
            </td>
            <td>{v.success_rate === null ? '—' : `${Math.round(100 * v.success_rate)}%`}</td>
            <td>
              {v.failed}/{v.rollouts}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function verdict(v: VariantRow): string {
  if (v.difference_low === null || v.difference_high === null || v.difference === null) return 'no task both scored';
  if (v.difference_low <= 0 && v.difference_high >= 0)
    return `no detectable difference at this sample size${v.tasks_needed ? `; about ${v.tasks_needed} tasks would detect it` : ''}`;
  if ((v.p_value ?? 1) >= 0.05) return 'not established: the interval excludes 0 but the paired test does not';
  return `${v.difference > 0 ? v.variant : v.baseline} is better`;
}

function Differences({ variants }: { variants: VariantRow[] }) {
  const others = variants.filter((v) => v.baseline !== null);
  if (others.length === 0) return <p>One variant: nothing to compare.</p>;
  const ends = others.flatMap((v) => [v.difference_low, v.difference_high]).filter((x): x is number => x !== null);
  const reach = Math.max(0.1, ...ends.map(Math.abs));
  return (
    <table class="evaluation">
      <thead>
        <tr>
          <th>pair</th>
          <th>difference</th>
          <th>95% interval</th>
          <th class="interval-cell">around 0</th>
          <th>p</th>
          <th>verdict</th>
        </tr>
      </thead>
      <tbody>
        {others.map((v) => (
          <tr key={v.variant}>
            <td>
              {v.variant} − {v.baseline}
            </td>
            <td>{formatNumber(v.difference)}</td>
            <td>
              [{formatNumber(v.difference_low)}, {formatNumber(v.difference_high)}]
            </td>
            <td class="interval-cell">
              <IntervalBar
                low={v.difference_low}
                mean={v.difference}
                high={v.difference_high}
                min={-reach}
                max={reach}
              />
            </td>
            <td>{formatNumber(v.p_value)}</td>
            <td>{verdict(v)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function Tasks({ tasks, baseline }: { tasks: TaskRow[]; baseline: string }) {
  const baselineRollouts = new Map(tasks.filter((t) => t.variant === baseline).map((t) => [t.task, t.rollout_ids]));
  const changes = tasks.filter((t) => t.variant !== baseline);
  const ids = (json: string | undefined) => (json ? (JSON.parse(json) as string[]) : []);
  return (
    <table class="evaluation tasks">
      <thead>
        <tr>
          <th>task</th>
          <th>variant</th>
          <th>{baseline}</th>
          <th>variant's</th>
          <th>change</th>
          <th>input</th>
          <th>rollouts</th>
        </tr>
      </thead>
      <tbody>
        {changes.map((t) => (
          <tr key={`${t.variant}-${t.task}`}>
            <td>{t.task}</td>
            <td>{t.variant}</td>
            <td>{formatNumber(t.baseline_mean)}</td>
            <td>{formatNumber(t.mean)}</td>
            <td class={t.change === null || t.change === 0 ? '' : t.change > 0 ? 'gain' : 'loss'}>
              {t.change === null ? '—' : `${t.change > 0 ? '+' : ''}${formatNumber(t.change)}`}
            </td>
            <td class="input-cell">{oneLine(t.input, 80)}</td>
            <td class="rollout-links">
              {[
                ...ids(baselineRollouts.get(t.task)).map((id) => [baseline, id]),
                ...ids(t.rollout_ids).map((id) => [t.variant, id]),
              ].map(([variant, id]) => (
                <Link key={id} href={`/rollouts/${encodeURIComponent(id)}`} title={`${variant}: ${id}`}>
                  {variant}
                </Link>
              ))}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
