/**
 * Agent Lightning v1's proxy settings: the `default_proxy` of its `config/server.yaml`. The
 * proxy sends every call to the served model, with the sampling parameters of the rollout's
 * mode in place of the agent's own (v1 forces only `temperature`; agl forces whatever a mode
 * lists), and asks for token ids always and for logprobs on train calls.
 */
export interface V1ProxySettings {
  /** `default_proxy.model_name`: the registered model whose endpoints serve every call. */
  readonly modelName: string;
  /** `default_proxy.include_log_probs`: ask for the sampled tokens' logprobs on train calls. */
  readonly includeLogprobs: boolean;
  /** `default_proxy.train` and `.val`: the parameters each mode's calls are sent with. */
  readonly train: Readonly<Record<string, unknown>>;
  readonly val: Readonly<Record<string, unknown>>;
}

/** v1's own defaults (its config/server.yaml). */
export const DEFAULT_V1_PROXY: V1ProxySettings = Object.freeze({
  modelName: 'Qwen/Qwen2.5-7B-Instruct',
  includeLogprobs: true,
  train: Object.freeze({ temperature: 1 }),
  val: Object.freeze({ temperature: 0.7 }),
});
