import type { LlmResource, NamedResources, PromptTemplateResource, RolloutMode } from '../api/types.js';

/** What an agent gets for one rollout, besides its task. */
export interface RolloutContext {
  readonly rolloutId: string;
  readonly attemptId: string;
  readonly mode: RolloutMode | null;
  /** Every named resource of the rollout, as stored. */
  readonly resources: NamedResources;
  /** The rollout's `llm` resource, its base URL already the gateway route of this attempt when the runner has one. */
  readonly llm?: { baseURL: string; model: string; apiKey: string; samplingParameters: Record<string, unknown> };
  /** The rollout's prompt template, ready to fill. */
  readonly promptTemplate?: { template: string; format(values: Record<string, unknown>): string };
  /** Aborted when the runner stops or the attempt is abandoned. */
  readonly signal: AbortSignal;
}

/**
 * An agent: runs one task and returns its reward (a number, recorded as the final reward),
 * nothing (rewards were emitted with `emitReward`), or throws (the attempt failed).
 */
export interface Agent<T = unknown> {
  // biome-ignore lint/suspicious/noConfusingVoidType: an async function that returns nothing is Promise<void>, which Promise<number | undefined> refuses
  run(task: T, context: RolloutContext): Promise<number | void> | number | void;
}

/** Defines an agent from one function. */
export function rollout<T = unknown>(run: Agent<T>['run']): Agent<T> {
  if (typeof run !== 'function') throw new TypeError('rollout() needs the function that runs one task');
  return { run };
}

/** Fills `{name}` (f-string) or `{{ name }}` (jinja) placeholders; a missing value is an error that names it. */
export function formatTemplate(resource: PromptTemplateResource, values: Record<string, unknown>): string {
  const pattern =
    resource.engine === 'jinja'
      ? /\{\{\s*([\w.]+)\s*\}\}/g
      : resource.engine === 'f-string'
        ? /\{([\w.]+)\}/g
        : undefined;
  if (!pattern)
    throw new TypeError(
      `prompt templates of engine "${resource.engine}" cannot be filled by agl yet (f-string and jinja can)`,
    );
  return resource.template.replace(pattern, (_match, name: string) => {
    if (!(name in values)) throw new TypeError(`the prompt template needs a value for "${name}"`);
    return String(values[name]);
  });
}

/** The context of one attempt, from the rollout's resources. */
export function rolloutContext(
  ids: { rolloutId: string; attemptId: string; mode: RolloutMode | null },
  resources: NamedResources,
  signal: AbortSignal,
  /** Where the agent's llm calls go instead of the resource's endpoint, and the key they carry there. */
  gateway?: { readonly baseURL: string; readonly apiKey?: string },
): RolloutContext {
  const llm = Object.values(resources).find(
    (r): r is LlmResource => r.resource_type === 'llm' || r.resource_type === 'proxy_llm',
  );
  const template = Object.values(resources).find(
    (r): r is PromptTemplateResource => r.resource_type === 'prompt_template',
  );
  return {
    ...ids,
    resources,
    signal,
    ...(llm
      ? {
          llm: {
            baseURL: gateway?.baseURL ?? llm.endpoint,
            model: llm.model,
            apiKey: gateway?.apiKey ?? llm.api_key ?? 'agl',
            samplingParameters: llm.sampling_parameters ?? {},
          },
        }
      : {}),
    ...(template
      ? {
          promptTemplate: {
            template: template.template,
            format: (values: Record<string, unknown>) => formatTemplate(template, values),
          },
        }
      : {}),
  };
}
