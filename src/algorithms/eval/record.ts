import { EVAL } from '../../api/semconv.js';
import type { AlgorithmRun } from '../shared/algorithm-run.js';
import type { EvalResult } from './summary.js';

/**
 * An evaluation's result as spans of its run: one per variant (the `evaluations` view), with its
 * paired difference against the first variant, and one per variant and task (`evaluation_tasks`).
 */
export async function recordEvaluation(run: AlgorithmRun, result: EvalResult): Promise<void> {
  const [baseline] = result.variants;
  const V = EVAL.variant;
  const T = EVAL.task;
  for (const [position, variant] of result.variants.entries()) {
    const pair = position === 0 ? undefined : result.pairs.find((p) => p.a === baseline.name && p.b === variant.name);
    await run.record(EVAL.variantSpan, {
      [V.variant]: variant.name,
      [V.position]: position,
      [V.resourcesId]: variant.resourcesId,
      [V.tasks]: result.tasks,
      [V.samples]: result.samples,
      [V.rollouts]: variant.rollouts,
      [V.scored]: variant.scored,
      [V.failed]: variant.failed,
      [V.mean]: variant.mean?.mean,
      [V.meanLow]: variant.mean?.low,
      [V.meanHigh]: variant.mean?.high,
      [V.successRate]: variant.success?.rate,
      [V.successLow]: variant.success?.low,
      [V.successHigh]: variant.success?.high,
      [V.tokensPerTask]: variant.tokensPerTask,
      [V.secondsPerRollout]: variant.secondsPerRollout,
      [V.baseline]: position === 0 ? undefined : baseline.name,
      [V.difference]: pair?.difference?.mean,
      [V.differenceLow]: pair?.difference?.low,
      [V.differenceHigh]: pair?.difference?.high,
      [V.pValue]: pair?.difference?.pValue,
      [V.tasksNeeded]: pair?.difference?.tasksNeeded,
      [V.seed]: result.seed,
    });
    for (const task of variant.tasks)
      await run.record(EVAL.taskSpan, {
        [T.variant]: variant.name,
        [T.task]: task.task,
        [T.input]: JSON.stringify(result.inputs[task.task] ?? null),
        [T.rollouts]: task.rollouts,
        [T.scored]: task.scored,
        [T.failed]: task.failed,
        [T.mean]: task.mean,
        [T.baselineMean]: baseline.tasks[task.task].mean,
        [T.tokens]: task.tokens,
        [T.seconds]: task.seconds,
        [T.rolloutIds]: JSON.stringify(task.rolloutIds),
      });
  }
}
