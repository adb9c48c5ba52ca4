// SFT: rejection-sampling fine-tuning with the user's own training command.
export { SFT, SftError, sftFromOptions, type SftExtras, type SftResult } from './sft.js';
export {
  SFT_OPTIONS,
  parseSftOptions,
  SFT_PLACEHOLDERS,
  type SftOptions,
  type SftOptionsInput,
} from './options.js';
export type { IterationRecord, IterationStatus } from './record.js';
export { formatSftReport } from './report.js';
export { SFT_COMMAND } from './command.js';
