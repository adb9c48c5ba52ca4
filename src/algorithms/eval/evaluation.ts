import { finalRewards } from '../../adapters/final-rewards.js';
import { allRows, type QuerySource } from '../../adapters/source.js';
import type { LightningStore } from '../../api/lightning-store.js';
import type { LlmResource, NamedResources, Rollout } from '../../api/types.js';
import { sqlText } from '../../sql/literals.js';
import { type Algorithm, type AlgorithmContext, waitUntilFinished } from '../algorithm.js';
import { AlgorithmRun } from '../shared/algorithm-run.js';
import { runClock } from '../shared/cost-clock.js';
import { OptionsError } from '../shared/options.js';
import { Random, streamSeed } from '../shared/random.js';
import { type EvalOptionsInput, type EvalSettings, type EvalVariant, parseEvalOptions } from './options.js';
import { recordEvaluation } from './record.js';
import { type EvalResult, type RolloutScore, summarize } from './summary.js';

/**
 * `agl eval`: every variant runs every task `samples` times. The runs are enqueued interleaved (per
 * sample and task, the variants in a seeded order), so that load and time fall on all variants
 * alike, and each (task, sample) carries one seed whatever the variant. A rollout that fails or
 * gives no reward is counted as a failure of its variant, never scored as 0.
 */
export class Evaluation implements Algorithm<unknown, EvalResult> {
  readonly settings: EvalSettings;

  constructor(
    options: EvalOptionsInput,
    private readonly log: (line: string) => void = () => {},
  ) {
    this.settings = parseEvalOptions(options);
  }

  async run(context: AlgorithmContext<unknown>): Promise<EvalResult> {
    const tasks = context.train;
    if (tasks.length === 0) throw new TypeError('the evaluation has no tasks: the task file is empty');
    const { variants, samples, maxRollouts } = this.settings;
    const needed = tasks.length * samples * variants.length;
    if (maxRollouts !== undefined && needed > maxRollouts)
      throw new OptionsError(
        undefined,
        [
          {
            key: 'maxRollouts',
            words: (option) =>
              `${option.name} ${String(option.given)} is too small: ${tasks.length} tasks x ${samples} samples x ${variants.length} variants take ${needed} rollouts`,
          },
        ],
        { maxRollouts },
      );
    const source = context.source;
    if (!source) throw new TypeError('an evaluation reads rewards with SQL: give it a source (the Trainer does)');
    const resourcesIds = await resolveVariants(context.store, source, variants);
    const run = await AlgorithmRun.start(context.store, 'eval', {
      ...this.settings,
      tasks: tasks.length,
      resources_ids: resourcesIds,
    });
    this.log(`eval: run ${run.runId}: ${variants.length} variants x ${tasks.length} tasks x ${samples} samples`);
    const clock = runClock();
    try {
      const scores = await this.runAll(context, run.runId, resourcesIds);
      const result = {
        ...summarize(run.runId, this.settings, tasks, resourcesIds, scores),
        cost: await clock.spent(source, `(metadata->'agl_eval'->>'run_id') = ${sqlText(run.runId)}`),
      };
      await recordEvaluation(run, result);
      await run.end('succeeded');
      return result;
    } catch (error) {
      await run.end(context.signal.aborted ? 'cancelled' : 'failed');
      throw error;
    }
  }

  /** Enqueues every run interleaved, waits for them and reads each one's reward, tokens and time. */
  private async runAll(
    context: AlgorithmContext<unknown>,
    runId: string,
    resourcesIds: readonly string[],
  ): Promise<RolloutScore[]> {
    const { samples, seed, rolloutTimeoutSeconds, variants } = this.settings;
    const order = new Random(streamSeed(seed, 'order'));
    const planned: { variant: number; task: number; sample: number }[] = [];
    for (let sample = 0; sample < samples; sample++)
      for (const task of order.shuffle(context.train.map((_, i) => i)))
        for (const variant of order.shuffle(variants.map((_, i) => i))) planned.push({ variant, task, sample });
    const queued = await context.store.enqueueManyRollouts(
      planned.map(({ variant, task, sample }) => ({
        input: context.train[task],
        mode: 'test',
        resources_id: resourcesIds[variant],
        config: { timeout_seconds: rolloutTimeoutSeconds },
        metadata: {
          agl_eval: { run_id: runId, variant: variants[variant].name, task, sample },
          seed: streamSeed(seed, 'sample', task, sample),
        },
      })),
    );
    const finished = await waitUntilFinished(
      context.store,
      queued.map((r) => r.rollout_id),
      context.signal,
    );
    if (finished.size < queued.length)
      throw new Error(`the evaluation was stopped with ${queued.length - finished.size} rollouts unfinished`);
    const rollouts = queued.map((r) => finished.get(r.rollout_id) as Rollout);
    const ids = rollouts.map((r) => r.rollout_id);
    const [rewards, tokens] = await Promise.all([
      finalRewards(context.source as QuerySource, ids),
      tokensOf(context.source as QuerySource, ids),
    ]);
    return planned.map((plan, i) => {
      const rollout = rollouts[i];
      const reward = rewards.get(rollout.rollout_id);
      return {
        ...plan,
        rolloutId: rollout.rollout_id,
        status: rollout.status,
        reward: rollout.status === 'succeeded' && reward !== undefined ? reward : null,
        tokens: tokens.get(rollout.rollout_id) ?? 0,
        seconds: rollout.end_time === null ? null : rollout.end_time - rollout.start_time,
      };
    });
  }
}

/** Each rollout's LLM tokens (input and output), from llm_calls. */
async function tokensOf(source: QuerySource, ids: readonly string[]): Promise<Map<string, number>> {
  const rows = await allRows(
    source,
    `SELECT rollout_id, sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0))::DOUBLE AS tokens
     FROM llm_calls WHERE rollout_id IN (${ids.map(sqlText).join(', ')}) GROUP BY rollout_id`,
  );
  return new Map(rows.map((row) => [String(row.rollout_id), Number(row.tokens)]));
}

/** The resources id each variant runs with: a stored version, with its prompt and llm overridden as new resources. */
async function resolveVariants(
  store: LightningStore,
  source: QuerySource,
  variants: readonly EvalVariant[],
): Promise<string[]> {
  const bases = [];
  for (const variant of variants) bases.push(await baseOf(store, source, variant));
  const ids: string[] = [];
  for (const [i, variant] of variants.entries()) {
    const base = bases[i];
    const overridden =
      variant.prompt !== undefined || variant.llmModel !== undefined || variant.llmEndpoint !== undefined;
    if (!overridden && base) ids.push(base.id);
    else ids.push((await store.addResources(override(variant, base?.resources ?? {}))).resources_id);
  }
  return ids;
}

async function baseOf(
  store: LightningStore,
  source: QuerySource,
  variant: EvalVariant,
): Promise<{ id: string; resources: NamedResources } | null> {
  const wanted = variant.resources ?? 'latest';
  const id = wanted === 'best' ? await bestOfLatestApo(source) : wanted;
  const found = id === 'latest' ? await store.getLatestResources() : await store.getResourcesById(id);
  if (found) return { id: found.resources_id, resources: found.resources };
  if (variant.resources === undefined) return null;
  throw new TypeError(
    `variant "${variant.name}": ${id === 'latest' ? 'the store holds no resources yet' : `no resources "${id}" in the store`}`,
  );
}

async function bestOfLatestApo(source: QuerySource): Promise<string> {
  const rows = await allRows(
    source,
    `SELECT resources_id FROM prompt_versions WHERE is_best AND run_id = (
       SELECT rollout_id FROM rollouts WHERE (metadata->>'agl_algorithm') = 'apo' ORDER BY start_time DESC LIMIT 1)`,
  );
  if (!rows.length || rows[0].resources_id === null)
    throw new TypeError('resources "best": the store holds no APO run with a best prompt');
  return String(rows[0].resources_id);
}

const nameOf = (resources: NamedResources, types: string[]) =>
  Object.keys(resources).find((name) => types.includes(resources[name].resource_type));

/** `base` with the variant's prompt and llm set on its prompt_template and llm resources (added when it has none). */
function override(variant: EvalVariant, base: NamedResources): NamedResources {
  const resources = { ...base };
  if (variant.prompt !== undefined) {
    const name = nameOf(resources, ['prompt_template']) ?? 'prompt';
    const engine = resources[name]?.resource_type === 'prompt_template' ? resources[name].engine : 'f-string';
    resources[name] = { resource_type: 'prompt_template', template: variant.prompt, engine };
  }
  if (variant.llmModel !== undefined || variant.llmEndpoint !== undefined) {
    const name = nameOf(resources, ['llm', 'proxy_llm']) ?? 'llm';
    const llm = resources[name] as LlmResource | undefined;
    const model = variant.llmModel ?? llm?.model;
    if (model === undefined)
      throw new TypeError(`variant "${variant.name}": an llm endpoint needs a model (its resources have no llm)`);
    resources[name] = {
      resource_type: llm?.resource_type ?? 'llm',
      endpoint: variant.llmEndpoint ?? llm?.endpoint ?? process.env.OPENAI_BASE_URL ?? 'https://api.openai.com/v1',
      model,
      api_key: llm?.api_key ?? process.env.OPENAI_API_KEY ?? null,
      sampling_parameters: llm?.sampling_parameters ?? {},
    };
  }
  return resources;
}
