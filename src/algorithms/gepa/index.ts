// GEPA: reflective prompt evolution over every prompt template, with a Pareto frontier and merges.
export { GEPA, type GEPAExtras } from './gepa.js';
export { GEPA_OPTIONS, parseGepaOptions, type GEPAOptionsInput, type GEPASettings } from './options.js';
export type { GEPAResult, GepaStopKind } from './search.js';
export type { GepaCandidate, GepaCost } from './record.js';
export { paretoFrontier, planMerge, sampleFrontier, type MergePlan, type PoolEntry } from './pareto.js';
export { formatGepaReport } from './report.js';
export { GEPA_COMMAND } from './command.js';
