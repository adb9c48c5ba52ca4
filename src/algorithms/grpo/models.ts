import { InvalidQueryError } from '../../api/errors.js';
import type { LightningStore } from '../../api/lightning-store.js';
import type { LlmResource, NamedResources, ResourcesUpdate } from '../../api/types.js';
import type { GrpoOptions } from './options.js';

/**
 * The model versions of a GRPO run. A version is a name (the starting one `modelVersion`,
 * default "0"; then each the trainer gives, by default "1", "2" ...) carried by the `llm`
 * resource as its `model_version` field: each version is a resources version of its own, and a
 * rollout's `resources_id` says which model it ran with (the gateway routes its calls there).
 * Versions are ordered as they were published; staleness counts positions in that order.
 */

/** The field of the `llm` resource that names its model version. */
const MODEL_VERSION_FIELD = 'model_version';

export interface ModelVersion {
  readonly version: string;
  /** Its place in the run: 0 for the starting model. */
  readonly index: number;
  readonly resourcesId: string;
  readonly resources: NamedResources;
  /** The name of the `llm` resource among them. */
  readonly llmName: string;
}

export const llmOf = (model: ModelVersion) => model.resources[model.llmName] as LlmResource;

export class ModelVersions {
  private readonly list: ModelVersion[];
  /** Publishing is one at a time: two dones never race for the next version. */
  private publishing: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly store: LightningStore,
    first: ModelVersion,
  ) {
    this.list = [first];
  }

  get current(): ModelVersion {
    return this.list[this.list.length - 1];
  }

  get all(): readonly ModelVersion[] {
    return this.list;
  }

  /**
   * The starting model: the resources given (else the store's latest) with the `llm` option when
   * given, asking for token ids (and logprobs) and carrying the starting version.
   */
  static async start(
    store: LightningStore,
    options: Pick<GrpoOptions, 'llm' | 'logprobs' | 'modelVersion'>,
    given?: NamedResources,
  ): Promise<ModelVersions> {
    const latest: ResourcesUpdate | null = given ? null : await store.getLatestResources();
    const resources: NamedResources = { ...(given ?? latest?.resources) };
    let llmName = Object.keys(resources).find((name) => ['llm', 'proxy_llm'].includes(resources[name].resource_type));
    if (options.llm) {
      llmName ??= 'llm';
      resources[llmName] = {
        resource_type: 'llm',
        endpoint: options.llm.endpoint,
        model: options.llm.model,
        api_key: options.llm.apiKey,
        sampling_parameters: options.llm.samplingParameters,
      };
    }
    if (llmName === undefined)
      throw new TypeError(
        'GRPO needs a starting model: give the `llm` option (endpoint and model) or resources with an `llm` (agl train: --llm-model and --llm-endpoint, or either in the config file), or publish resources with an `llm` to the store first',
      );
    const llm = resources[llmName] as LlmResource;
    const asked = { return_token_ids: true, ...(options.logprobs ? { logprobs: true } : {}) };
    resources[llmName] = {
      ...llm,
      sampling_parameters: { ...asked, ...llm.sampling_parameters },
      [MODEL_VERSION_FIELD]: options.modelVersion,
    };
    const added = await store.addResources(resources);
    return new ModelVersions(store, {
      version: options.modelVersion,
      index: 0,
      resourcesId: added.resources_id,
      resources,
      llmName,
    });
  }

  /**
   * Publishes the trainer's model as the next version: the current resources with the `llm`
   * served at `endpoint` as `model` (its key and sampling parameters kept). A version used
   * before is refused (InvalidQueryError).
   */
  publish(trained: { endpoint: string; model: string; version?: string }): Promise<ModelVersion> {
    const next = this.publishing.then(async () => {
      const version = trained.version ?? String(this.list.length);
      if (this.list.some((v) => v.version === version))
        throw new InvalidQueryError(
          `model.version "${version}" was published before in this run; each new model needs a new version`,
        );
      const { current } = this;
      const llm = {
        ...llmOf(current),
        endpoint: trained.endpoint,
        model: trained.model,
        [MODEL_VERSION_FIELD]: version,
      };
      const resources = { ...current.resources, [current.llmName]: llm };
      const added = await this.store.addResources(resources);
      const published = {
        version,
        index: this.list.length,
        resourcesId: added.resources_id,
        resources,
        llmName: current.llmName,
      };
      this.list.push(published);
      return published;
    });
    this.publishing = next.catch(() => {});
    return next;
  }
}
