/**
 * GRPO's `training_steps`, when the store has that view: reward mean and spread per step, tokens,
 * rows dropped or truncated by reason, and where each step's time went. Its columns are found by
 * name (stepColumns), so that a column added, renamed or missing costs a chart, not the page.
 */
import { ResultTable } from '../components/common.js';
import { Chart } from '../components/chart.js';
import type { QueryColumn } from '../../../src/api/query.js';

const NUMERIC =
  /^(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT|FLOAT|DOUBLE|REAL|DECIMAL)/i;

export interface StepColumns {
  readonly step: string;
  readonly rewardMean?: string;
  readonly rewardStd?: string;
  readonly rewardMin?: string;
  readonly rewardMax?: string;
  readonly tokens: string[];
  readonly dropped: string[];
  readonly times: string[];
}

/** Which column is which, by name; undefined when there is no step column to plot against. */
export function stepColumns(columns: QueryColumn[]): StepColumns | undefined {
  const numeric = columns.filter((c) => NUMERIC.test(c.type)).map((c) => c.name);
  const find = (...patterns: RegExp[]) => {
    for (const pattern of patterns) {
      const found = numeric.find((name) => pattern.test(name));
      if (found) return found;
    }
    return undefined;
  };
  const step = find(/^step$/i, /^(training_|global_)?step$/i, /step/i, /^iteration$/i);
  if (!step) return undefined;
  const others = numeric.filter((name) => name !== step);
  const rewardMean = find(/^reward_mean$/i, /^mean_reward$/i, /reward.*mean|mean.*reward/i);
  const rewardStd = find(/^reward_std$/i, /reward.*std|std.*reward/i);
  const rewardMin = find(/^reward_min$/i, /reward.*min|min.*reward/i);
  const rewardMax = find(/^reward_max$/i, /reward.*max|max.*reward/i);
  return {
    step,
    rewardMean,
    rewardStd,
    rewardMin,
    rewardMax,
    tokens: others.filter((name) => /token/i.test(name) && !/(dropped|truncat)/i.test(name)),
    dropped: others.filter((name) => /(dropped|truncat|filtered|skipped)/i.test(name)),
    times: others.filter(
      (name) => /(seconds|_secs?$|_s$|_ms$|duration|wait)/i.test(name) && !/^(start|end)_/i.test(name),
    ),
  };
}

const valuesOf = (rows: Record<string, unknown>[], column: string) =>
  rows.map((r) =>
    typeof r[column] === 'number' ? (r[column] as number) : r[column] === null ? null : Number(r[column]),
  );

export function TrainingSteps({ columns, rows }: { columns: QueryColumn[]; rows: Record<string, unknown>[] }) {
  const found = stepColumns(columns);
  if (!found) return <ResultTable columns={columns} rows={rows} caption="training_steps" />;
  const x = valuesOf(rows, found.step).map((v) => v ?? 0);
  const mean = found.rewardMean ? valuesOf(rows, found.rewardMean) : undefined;
  const std = found.rewardStd ? valuesOf(rows, found.rewardStd) : undefined;
  const rewardSeries = [
    ...(mean ? [{ label: found.rewardMean as string, values: mean }] : []),
    ...(mean && std
      ? [
          {
            label: 'mean − std',
            values: mean.map((m, i) => (m === null || std[i] === null ? null : m - (std[i] as number))),
            dashed: true,
          },
          {
            label: 'mean + std',
            values: mean.map((m, i) => (m === null || std[i] === null ? null : m + (std[i] as number))),
            dashed: true,
          },
        ]
      : []),
    ...[found.rewardMin, found.rewardMax]
      .filter((c): c is string => c !== undefined)
      .map((c) => ({ label: c, values: valuesOf(rows, c), dashed: true })),
  ];
  const chart = (title: string, names: string[]) =>
    names.length > 0 ? (
      <div class="chart-block">
        <h3>{title}</h3>
        <Chart
          title={title}
          x={x}
          xKind="number"
          integerX
          xLabel={found.step}
          series={names.map((n) => ({ label: n, values: valuesOf(rows, n) }))}
        />
      </div>
    ) : null;
  return (
    <>
      {rewardSeries.length > 0 ? (
        <div class="chart-block">
          <h3>Reward per step</h3>
          <Chart title="Reward per step" x={x} xKind="number" integerX xLabel={found.step} series={rewardSeries} />
        </div>
      ) : null}
      {chart('Tokens per step', found.tokens)}
      {chart('Rows dropped or truncated, by reason', found.dropped)}
      {chart('Where the time went: rollouts, batch building, the trainer', found.times)}
      <details>
        <summary>All columns of training_steps</summary>
        <ResultTable columns={columns} rows={rows} caption="training_steps" />
      </details>
    </>
  );
}
