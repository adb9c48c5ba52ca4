import type { Algorithm, AlgorithmContext } from '../algorithms/algorithm.js';
import { Evaluation, type EvalResult, formatEvalReport } from '../algorithms/eval/index.js';

/** A training run's result and, unless the run was stopped, the evaluation that followed it. */
export interface EvaluatedRun<R> {
  readonly trained: R;
  readonly evaluation: EvalResult | null;
}

/**
 * `agl train sft|grpo --eval FILE`: the algorithm, then an evaluation of its first and last model
 * on the tasks of FILE, as `agl eval` runs one (stored as an eval run, the `evaluations` views).
 * Both run in one Trainer fit: the same store, server and runners.
 */
export class EvaluatedAfter<R> implements Algorithm<unknown, EvaluatedRun<R>> {
  constructor(
    private readonly algorithm: Algorithm<unknown, R>,
    private readonly tasks: readonly unknown[],
    private readonly models: (result: R) => { readonly first: string; readonly last: string },
    private readonly rolloutTimeoutSeconds: number | undefined,
    private readonly log: (line: string) => void,
  ) {}

  get trainingBatches() {
    return this.algorithm.trainingBatches;
  }

  async run(context: AlgorithmContext<unknown>): Promise<EvaluatedRun<R>> {
    const trained = await this.algorithm.run(context);
    if (context.signal.aborted) return { trained, evaluation: null };
    const { first, last } = this.models(trained);
    const evaluation = new Evaluation(
      {
        variants: [
          { name: 'first', resources: first },
          { name: 'last', resources: last },
        ],
        ...(this.rolloutTimeoutSeconds === undefined ? {} : { rolloutTimeoutSeconds: this.rolloutTimeoutSeconds }),
      },
      this.log,
    );
    return { trained, evaluation: await evaluation.run({ ...context, train: this.tasks, val: [] }) };
  }
}

/** The training report, then the evaluation's. */
export function formatEvaluatedRun<R>(run: EvaluatedRun<R>, report: (result: R) => string): string {
  return run.evaluation ? `${report(run.trained)}\n${formatEvalReport(run.evaluation)}` : report(run.trained);
}
