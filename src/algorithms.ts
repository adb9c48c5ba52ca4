// `agl/algorithms`: what improves an agent, and the Trainer that runs an algorithm with a store,
// a server and runners in one process.
export { finalRewards, type Algorithm, type AlgorithmContext, type RolloutOutcome } from './algorithms/algorithm.js';
export { Baseline, type BaselineResult } from './algorithms/baseline.js';
export { Trainer, type TrainerOptions } from './runtime/trainer.js';
export { loadDataset, type Dataset } from './runtime/dataset.js';
export { SFT, SftError, sftFromOptions, type SftResult } from './algorithms/sft.js';
export { sftOptionsSchema, parseSftOptions, SFT_PLACEHOLDERS, type SftOptions, type SftOptionsInput } from './algorithms/sft-options.js';
export type { IterationRecord, IterationStatus } from './algorithms/sft-record.js';
