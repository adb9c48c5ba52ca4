// `agl/store`: the DuckDB store, the `agl serve` HTTP server and the Trainer that hosts both in one process.
export { DuckDBStore, type StoreOptions, type WriteResult } from './store/store.js';
export type { QueryResult, QueryColumn, ExportFormat } from './store/query.js';
export { startServer, type ServerOptions, type RunningServer } from './collector/server.js';
export { decodeTracesProtobuf, decodeLogsProtobuf } from './collector/otlp-protobuf.js';
export { decodeTracesJson, decodeLogsJson } from './collector/otlp-json.js';
export { Trainer, type TrainerOptions } from './runtime/trainer.js';
export { loadDataset, type Dataset } from './runtime/dataset.js';
