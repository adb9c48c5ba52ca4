/**
 * The records the algorithms' runs write on the run's own rollout, declared once. SFT and GRPO
 * write one span per iteration or step: each field's span attribute (semconv.ts) and each column
 * of its SQL view (`sft_iterations`, `training_steps`) are made from these lists, in this order.
 * APO's and GEPA's spans and attributes are named here too (APO_RUN, GEPA_RUN), for their records and view.
 */

/** The SQL type a view gives a field. */
export type ColumnType = 'INTEGER' | 'BIGINT' | 'DOUBLE' | 'VARCHAR' | 'JSON';

/** A field that is one number per item of `each`: columns `<field>_<item>`, attributes `<field>.<item>`. */
interface ColumnFamily {
  readonly type: ColumnType;
  readonly each: readonly string[];
}

/** A view column: its name, the span attribute it reads and its SQL type. */
type RecordColumn = readonly [name: string, attribute: string, type: ColumnType];

interface RunRecord<F extends string> {
  /** The name of the record's span. */
  readonly span: string;
  /** Each field's attribute key; a family's is the prefix of its items' keys. */
  readonly attributes: { readonly [K in F]: string };
  readonly columns: readonly RecordColumn[];
}

/** iterationId -> iteration_id */
const snake = (key: string) => key.replace(/[A-Z]/g, (letter) => `_${letter.toLowerCase()}`);

function runRecord<const F extends Record<string, ColumnType | ColumnFamily>>(
  namespace: string,
  span: string,
  fields: F,
): RunRecord<Extract<keyof F, string>> {
  const attributes: Record<string, string> = {};
  const columns: RecordColumn[] = [];
  for (const [field, spec] of Object.entries(fields)) {
    const name = snake(field);
    if (typeof spec === 'string') {
      attributes[field] = `${namespace}.${name}`;
      columns.push([name, attributes[field], spec]);
    } else {
      attributes[field] = `${namespace}.${name}.`;
      for (const item of spec.each) columns.push([`${name}_${item}`, `${attributes[field]}${item}`, spec.type]);
    }
  }
  return { span, attributes: attributes as RunRecord<Extract<keyof F, string>>['attributes'], columns };
}

/** Why a rollout is left out of a GRPO batch (docs/training.md, "Data quality"). */
export const GRPO_DROP_REASONS = ['failed', 'stale', 'no_token_ids', 'no_reward', 'no_calls', 'overlong'] as const;

/** An SFT iteration: what it selected, exported, ran and published. */
export const SFT_ITERATION = runRecord('agl.sft', 'agl.sft.iteration', {
  iteration: 'INTEGER',
  status: 'VARCHAR',
  usedResourcesId: 'VARCHAR',
  rollouts: 'INTEGER',
  succeeded: 'INTEGER',
  meanReward: 'DOUBLE',
  valMeanReward: 'DOUBLE',
  keptRollouts: 'INTEGER',
  keptRolloutIds: 'JSON',
  dataset: 'VARCHAR',
  format: 'VARCHAR',
  records: 'INTEGER',
  duplicates: 'INTEGER',
  skipped: 'INTEGER',
  command: 'VARCHAR',
  exitCode: 'INTEGER',
  exitSignal: 'VARCHAR',
  outputTail: 'VARCHAR',
  log: 'VARCHAR',
  resourcesId: 'VARCHAR',
  model: 'VARCHAR',
  endpoint: 'VARCHAR',
  error: 'VARCHAR',
});

/** A GRPO training step: the batch, its data quality, its rewards and where the time went. */
export const GRPO_STEP = runRecord('agl.grpo', 'agl.grpo.step', {
  step: 'INTEGER',
  status: 'VARCHAR',
  batchId: 'VARCHAR',
  modelVersion: 'VARCHAR',
  resourcesId: 'VARCHAR',
  nextModelVersion: 'VARCHAR',
  nextResourcesId: 'VARCHAR',
  rollouts: 'INTEGER',
  keptRollouts: 'INTEGER',
  groups: 'INTEGER',
  topUps: 'INTEGER',
  rows: 'INTEGER',
  tokens: 'BIGINT',
  trainedTokens: 'BIGINT',
  rewardMean: 'DOUBLE',
  rewardStd: 'DOUBLE',
  rewardMin: 'DOUBLE',
  rewardMax: 'DOUBLE',
  singleSampleGroups: 'INTEGER',
  zeroVarianceGroups: 'INTEGER',
  dropped: { type: 'INTEGER', each: GRPO_DROP_REASONS },
  truncated: 'INTEGER',
  filledRewards: 'INTEGER',
  rolloutSeconds: 'DOUBLE',
  buildSeconds: 'DOUBLE',
  trainerSeconds: 'DOUBLE',
  /** The trainer's metrics, as JSON text. */
  metrics: 'JSON',
  error: 'VARCHAR',
});

/**
 * An APO run's spans and their attributes. Its record is not one row a span: the
 * `prompt_versions` view joins candidates with the scores and rounds that name them, so the
 * view's SQL is written out and takes these names from here, as the record does.
 */
export const APO_RUN = {
  spans: {
    candidate: 'agl.apo.candidate',
    scores: 'agl.apo.scores',
    skipped: 'agl.apo.skipped',
    round: 'agl.apo.round',
    best: 'agl.apo.best',
  },
  attributes: {
    version: 'agl.apo.version',
    resourcesId: 'agl.apo.resources_id',
    promptResource: 'agl.apo.prompt_resource',
    parent: 'agl.apo.parent',
    round: 'agl.apo.round',
    template: 'agl.apo.template',
    /** Every component's template, as a JSON object. */
    templates: 'agl.apo.templates',
    critique: 'agl.apo.critique',
    gradientScore: 'agl.apo.gradient_score',
    status: 'agl.apo.status',
    reason: 'agl.apo.reason',
    split: 'agl.apo.split',
    scores: 'agl.apo.scores',
    best: 'agl.apo.best',
    beam: 'agl.apo.beam',
    state: 'agl.apo.state',
    cost: 'agl.apo.cost',
    score: 'agl.apo.score',
    stopped: 'agl.apo.stopped',
  },
} as const;

/**
 * A GEPA run's spans and their attributes, read by its record, a resumed run and the
 * `prompt_versions` view (which shows APO's and GEPA's candidates alike).
 */
export const GEPA_RUN = {
  spans: {
    candidate: 'agl.gepa.candidate',
    scores: 'agl.gepa.scores',
    skipped: 'agl.gepa.skipped',
    iteration: 'agl.gepa.iteration',
    best: 'agl.gepa.best',
  },
  attributes: {
    version: 'agl.gepa.version',
    resourcesId: 'agl.gepa.resources_id',
    /** How it was made: seed, mutation or merge. */
    kind: 'agl.gepa.kind',
    /** The components it changed (a merge: against its parents' common ancestor), comma-separated. */
    component: 'agl.gepa.component',
    parents: 'agl.gepa.parents',
    iteration: 'agl.gepa.iteration',
    /** Every component's template, as a JSON object. */
    templates: 'agl.gepa.templates',
    reflection: 'agl.gepa.reflection',
    parentBatchScore: 'agl.gepa.parent_batch_score',
    batchScore: 'agl.gepa.batch_score',
    status: 'agl.gepa.status',
    reason: 'agl.gepa.reason',
    split: 'agl.gepa.split',
    scores: 'agl.gepa.scores',
    best: 'agl.gepa.best',
    frontier: 'agl.gepa.frontier',
    state: 'agl.gepa.state',
    cost: 'agl.gepa.cost',
    score: 'agl.gepa.score',
    stopped: 'agl.gepa.stopped',
  },
} as const;

/**
 * One variant of an `agl eval` run (or of an algorithm's closing evaluation): its scores with
 * their 95% intervals, and its paired difference against the run's first variant, the baseline.
 */
export const EVAL_VARIANT = runRecord('agl.eval', 'agl.eval.variant', {
  variant: 'VARCHAR',
  position: 'INTEGER',
  resourcesId: 'VARCHAR',
  tasks: 'INTEGER',
  samples: 'INTEGER',
  rollouts: 'INTEGER',
  scored: 'INTEGER',
  failed: 'INTEGER',
  mean: 'DOUBLE',
  meanLow: 'DOUBLE',
  meanHigh: 'DOUBLE',
  successRate: 'DOUBLE',
  successLow: 'DOUBLE',
  successHigh: 'DOUBLE',
  tokensPerTask: 'DOUBLE',
  secondsPerRollout: 'DOUBLE',
  baseline: 'VARCHAR',
  difference: 'DOUBLE',
  differenceLow: 'DOUBLE',
  differenceHigh: 'DOUBLE',
  pValue: 'DOUBLE',
  tasksNeeded: 'INTEGER',
  seed: 'INTEGER',
});

/** One task of one variant of an evaluation: its samples' mean score and what they cost. */
export const EVAL_TASK = runRecord('agl.eval', 'agl.eval.task', {
  variant: 'VARCHAR',
  task: 'INTEGER',
  input: 'JSON',
  rollouts: 'INTEGER',
  scored: 'INTEGER',
  failed: 'INTEGER',
  mean: 'DOUBLE',
  baselineMean: 'DOUBLE',
  tokens: 'BIGINT',
  seconds: 'DOUBLE',
  rolloutIds: 'JSON',
});
