export interface QueryColumn {
  readonly name: string;
  readonly type: string;
}

/** What `POST /v1/agl/query` answers and `agl query` prints. */
export interface QueryResult<Row = Record<string, unknown>> {
  readonly columns: QueryColumn[];
  readonly rows: Row[];
}

/** COPY's formats for exporting a query's result to a file. */
export type ExportFormat = 'parquet' | 'csv' | 'json' | 'ndjson';
