// `agl/store`: the embedded DuckDB store (spans, rollouts, resources) and its SQL.
export { DuckDBStore, type StoreOptions, type WriteResult } from './store/store.js';
export type { QueryResult, QueryColumn, ExportFormat } from './api/query.js';
