/**
 * Training: final reward over time and per resources version (every algorithm), APO's prompt
 * versions, GRPO's training steps when the store has that view, SFT's iterations when there are
 * any. Each section is one or two SQL queries over the store's views.
 */
import { useState } from 'preact/hooks';
import type { QueryColumn } from '../../../src/api/query.js';
import { sql } from '../api.js';
import { Chart } from '../components/chart.js';
import { ErrorNote, Freshness, ResultTable, Section } from '../components/common.js';
import { formatNumber, formatTime } from '../format.js';
import { useLoaded } from '../poll.js';
import {
  PROMPT_VERSIONS_SQL,
  REWARD_BY_VERSION_SQL,
  REWARD_OVER_TIME_SQL,
  SFT_ITERATIONS_SQL,
  trainingStepsSql,
  viewColumnsSql,
} from '../queries.js';
import { type PromptVersion, PromptVersions } from './prompt-versions.js';
import { stepColumns, TrainingSteps } from './training-steps.js';

interface RewardPoint {
  readonly mode: string;
  readonly time: number;
  readonly reward: number;
  readonly rollouts: number;
}
interface VersionReward {
  readonly resources_id: string;
  readonly first_used: number;
  readonly rollouts: number;
  readonly train: number;
  readonly val: number;
  readonly mean_reward: number | null;
  readonly val_reward: number | null;
}

interface TrainingData {
  readonly overTime: RewardPoint[];
  readonly byVersion: VersionReward[];
  readonly versions: PromptVersion[];
  readonly steps?: { columns: QueryColumn[]; rows: Record<string, unknown>[] };
  readonly sft: { columns: QueryColumn[]; rows: Record<string, unknown>[] };
}

async function loadTraining(signal: AbortSignal): Promise<TrainingData> {
  const [overTime, byVersion, versions, stepView, sft] = await Promise.all([
    sql<RewardPoint>(REWARD_OVER_TIME_SQL, signal),
    sql<VersionReward>(REWARD_BY_VERSION_SQL, signal),
    sql<PromptVersion>(PROMPT_VERSIONS_SQL, signal),
    sql<QueryColumn>(viewColumnsSql('training_steps'), signal),
    sql(SFT_ITERATIONS_SQL, signal),
  ]);
  // GRPO's view, from other work: read only when the store has it, ordered by the step column it has.
  const step = stepColumns(stepView.rows)?.step;
  const steps =
    stepView.rows.length > 0 ? await sql(trainingStepsSql(step ?? stepView.rows[0].name), signal) : undefined;
  return { overTime: overTime.rows, byVersion: byVersion.rows, versions: versions.rows, steps, sft };
}

export function TrainingPage() {
  const [live, setLive] = useState(false);
  const loaded = useLoaded(loadTraining, [], live);
  const data = loaded.data;
  return (
    <main id="main" class="page">
      <div class="page-head">
        <h1>Training</h1>
        <Freshness at={loaded.at} loading={loaded.loading} live={live} />
        <label class="inline">
          <input type="checkbox" checked={live} onChange={(e) => setLive(e.currentTarget.checked)} /> Live updates
        </label>
      </div>
      <ErrorNote error={loaded.error} />
      {data ? (
        <>
          <Section title="Final reward over time" id="reward-time">
            <RewardOverTime points={data.overTime} />
          </Section>
          <Section title="Final reward per resources version" id="reward-version">
            <RewardByVersion versions={data.byVersion} />
          </Section>
          {data.versions.length > 0 ? (
            <Section title="APO: prompt versions" id="prompt-versions">
              <PromptVersions versions={data.versions} />
            </Section>
          ) : null}
          {data.steps && data.steps.rows.length > 0 ? (
            <Section title="GRPO: training steps" id="training-steps">
              <TrainingSteps columns={data.steps.columns} rows={data.steps.rows} />
            </Section>
          ) : null}
          {data.sft.rows.length > 0 ? (
            <Section title="SFT: iterations" id="sft-iterations">
              <ResultTable columns={data.sft.columns} rows={data.sft.rows} />
            </Section>
          ) : null}
        </>
      ) : null}
    </main>
  );
}

function RewardOverTime({ points }: { points: RewardPoint[] }) {
  if (points.length === 0) return <p class="empty">No rollout with a mode has a reward yet.</p>;
  const x = [...new Set(points.map((p) => p.time))].sort((a, b) => a - b);
  const modes = [...new Set(points.map((p) => p.mode))].sort();
  const series = modes.map((mode) => {
    const at = new Map(points.filter((p) => p.mode === mode).map((p) => [p.time, p.reward]));
    return { label: `${mode} mean reward`, values: x.map((t) => at.get(t) ?? null) };
  });
  return <Chart title="Final reward over time" x={x} xKind="time" xLabel="time" series={series} />;
}

function RewardByVersion({ versions }: { versions: VersionReward[] }) {
  if (versions.length === 0) return <p class="empty">No rollout with a resources version has a reward yet.</p>;
  const x = versions.map((_, i) => i + 1);
  return (
    <>
      <Chart
        title="Final reward per resources version"
        x={x}
        xKind="number"
        xLabel="resources version, in order of first use"
        xText={(i) => versions[i - 1]?.resources_id ?? ''}
        integerX
        series={[
          { label: 'mean reward', values: versions.map((v) => v.mean_reward) },
          { label: 'val mean reward', values: versions.map((v) => v.val_reward) },
        ]}
      />
      <div class="table-scroll">
        <table class="data">
          <thead>
            <tr>
              <th scope="col">#</th>
              <th scope="col">Resources</th>
              <th scope="col">First used</th>
              <th scope="col" class="num">
                Rollouts (train / val)
              </th>
              <th scope="col">Mean reward</th>
              <th scope="col" class="num">
                Val mean
              </th>
            </tr>
          </thead>
          <tbody>
            {versions.map((v, i) => (
              <tr key={v.resources_id}>
                <td>{i + 1}</td>
                <td class="mono">{v.resources_id}</td>
                <td class="nowrap">{formatTime(v.first_used)}</td>
                <td class="num">
                  {v.rollouts} ({v.train} / {v.val})
                </td>
                <td>
                  <span class="bar" aria-hidden="true">
                    <span style={{ width: `${Math.max(0, Math.min(1, v.mean_reward ?? 0)) * 100}%` }} />
                  </span>{' '}
                  {formatNumber(v.mean_reward)}
                </td>
                <td class="num">{formatNumber(v.val_reward)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </>
  );
}
