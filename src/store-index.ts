// `agl/store`: the DuckDB store and the `agl serve` HTTP server, for programs that host them.
export { DuckDBStore, type StoreOptions, type WriteResult } from './store/store.js';
export type { QueryResult, QueryColumn, ExportFormat } from './store/query.js';
export { startServer, type ServerOptions, type RunningServer } from './collector/server.js';
export { decodeTracesProtobuf, decodeLogsProtobuf } from './collector/otlp-protobuf.js';
export { decodeTracesJson, decodeLogsJson } from './collector/otlp-json.js';
