export interface QueryColumn {
  readonly name: string;
  readonly type: string;
}

/** What `POST /v1/agl/query` answers and `agl query` prints. */
export interface QueryResult {
  readonly columns: QueryColumn[];
  readonly rows: Record<string, unknown>[];
}

/** COPY's formats for exporting a query's result to a file. */
export type ExportFormat = 'parquet' | 'csv' | 'json' | 'ndjson';
