// `agl/adapters`: recorded spans to training records, from TypeScript. A source streams the rows
// of a query: `{ stream: (sql) => store.streamQuery(sql) }` for the embedded store (`agl/store`).
export {
  traceToTriplets,
  streamTriplets,
  tripletsSql,
  tripletsQuery,
  type Triplet,
  type TripletOptions,
  type Credit,
  type RewardMatch,
} from './adapters/triplets.js';
export {
  traceToMessages,
  invalidReason,
  type ChatRecord,
  type MessagesOptions,
  type SkippedRecord,
} from './adapters/messages.js';
export {
  traceToTrajectories,
  type TrajectoryOptions,
  type TrajectoryRow,
  type TrajectoryStats,
} from './adapters/trajectories.js';
export type { Adapter, Adapted, AdapterReport } from './adapters/adapter.js';
export { MESSAGES_ADAPTER, type MessagesStats } from './adapters/messages.js';
export { TRIPLETS_ADAPTER } from './adapters/triplets.js';
export { TRAJECTORIES_ADAPTER } from './adapters/trajectories.js';
export { arrowTableOf, recordBatchOf, type RecordKind } from './adapters/arrow.js';
export type { QuerySource } from './adapters/source.js';
