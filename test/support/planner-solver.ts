import type { NamedResources } from '../../src/api/types.js';

/**
 * The offline task set where two prompts matter (test/apps/planner-solver-agent.mjs, on the
 * EXAMPLE model): the seed prompts ask for nothing, so the planner slips on some sums and the
 * solver answers in sentences; the better pair asks the planner to be careful and the solver
 * for the number only, worked carefully.
 */
export interface PlannerSolverTask {
  readonly a: number;
  readonly b: number;
  readonly c: number;
}

/** `count` tasks, different for each `offset` (train and validation sets apart). */
export function plannerSolverTasks(count: number, offset = 0): PlannerSolverTask[] {
  return Array.from({ length: count }, (_, i) => {
    const n = i + offset;
    return { a: 3 + ((n * 7) % 40), b: 2 + ((n * 11) % 30), c: 2 + (n % 7) };
  });
}

export const PLANNER_SEED = 'Work out the first step. {question}';
export const SOLVER_SEED = 'Now finish it: {step} {rest}';

export function plannerSolverResources(endpoint: string, model: string): NamedResources {
  return {
    llm: { resource_type: 'llm', endpoint, model, api_key: null, sampling_parameters: {} },
    planner: { resource_type: 'prompt_template', template: PLANNER_SEED, engine: 'f-string' },
    solver: { resource_type: 'prompt_template', template: SOLVER_SEED, engine: 'f-string' },
  };
}
