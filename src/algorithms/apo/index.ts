// APO: automatic prompt optimization, a beam search over a prompt template driven by critiques.
export { APO, type APOExtras } from './apo.js';
export { APO_OPTIONS, parseApoOptions, type APOOptionsInput, type APOSettings } from './options.js';
export type { APOResult } from './search.js';
export type { StopKind } from '../shared/search.js';
export type { Candidate, Cost } from './record.js';
export { formatApoReport } from './report.js';
export { wordDiff } from '../shared/word-diff.js';
export { APO_COMMAND } from './command.js';
