import type { LightningStore } from '../../api/lightning-store.js';
import type { LlmResource, NamedResources } from '../../api/types.js';

/** One model server as Agent Lightning v1 registers it: keyed by (model, endpoint). */
export interface ModelServer {
  readonly model: string;
  /** Its OpenAI base URL, with the `/v1`. */
  readonly endpoint: string;
  /** The training step of the weights it serves. */
  readonly version: number;
}

/**
 * The resources that hold the registry: every change is a new version of them, kept in the
 * store, so a restart (or another server on the same --state) sees the same servers.
 */
export const MODEL_REGISTRY_ID = 'agl-v1-models';

const nameOf = (server: ModelServer) => `${server.model} ${server.endpoint}`;

const asResource = (server: ModelServer): LlmResource => ({
  resource_type: 'llm',
  endpoint: server.endpoint,
  model: server.model,
  api_key: null,
  sampling_parameters: {},
  model_version: server.version,
});

function serverOf(resource: NamedResources[string]): ModelServer | undefined {
  if (resource.resource_type !== 'llm') return undefined;
  const version = (resource as { model_version?: unknown }).model_version;
  return { model: resource.model, endpoint: resource.endpoint, version: typeof version === 'number' ? version : 0 };
}

/** v1's model registry (POST and DELETE /api/models) as versioned resources of agl's store. */
export class ModelRegistry {
  /** Changes one after another: each reads the registry the one before wrote. */
  private changing: Promise<unknown> = Promise.resolve();

  constructor(private readonly store: LightningStore) {}

  /** Adds `servers`, replacing those registered before with the same model and endpoint. */
  register(servers: readonly ModelServer[]): Promise<void> {
    return this.change(async () => {
      const resources = { ...((await this.store.getResourcesById(MODEL_REGISTRY_ID))?.resources ?? {}) };
      for (const server of servers) resources[nameOf(server)] = asResource(server);
      await this.store.updateResources(MODEL_REGISTRY_ID, resources);
    });
  }

  /** Removes every server (a new, empty version of the registry). */
  clear(): Promise<void> {
    return this.change(async () => {
      if (await this.store.getResourcesById(MODEL_REGISTRY_ID)) await this.store.updateResources(MODEL_REGISTRY_ID, {});
    });
  }

  /** The servers of `model`, in the order of their endpoints. */
  async serversOf(model: string): Promise<ModelServer[]> {
    const registry = await this.store.getResourcesById(MODEL_REGISTRY_ID);
    return Object.values(registry?.resources ?? {})
      .map(serverOf)
      .filter((server): server is ModelServer => server?.model === model)
      .sort((a, b) => (a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : 0));
  }

  private change(update: () => Promise<void>): Promise<void> {
    const next = this.changing.then(update);
    this.changing = next.catch(() => undefined);
    return next;
  }
}
