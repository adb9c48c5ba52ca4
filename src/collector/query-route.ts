import { createReadStream } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { ExportFormat } from '../api/query.js';
import { QueryBusyError, QueryTimeoutError } from '../store/query.js';
import { QueryRefusedError } from '../store/read-only-sql.js';
import type { DuckDBStore } from '../store/store.js';
import { HttpError, readJsonObject, sendJson } from './http.js';

const FILE_FORMATS: Record<string, { format: ExportFormat; contentType: string }> = {
  parquet: { format: 'parquet', contentType: 'application/vnd.apache.parquet' },
  csv: { format: 'csv', contentType: 'text/csv' },
  ndjson: { format: 'ndjson', contentType: 'application/x-ndjson' },
};

/**
 * POST /v1/agl/query {"sql": "...", "format"?: "json" | "csv" | "parquet" | "ndjson"}: one read-only
 * query. JSON answers {columns: [{name, type}], rows: [row objects]}; the others answer the file
 * DuckDB's COPY wrote, so exports keep their types and have no row limit.
 */
export async function handleQuery(
  request: IncomingMessage,
  response: ServerResponse,
  store: Pick<DuckDBStore, 'query' | 'exportQuery'>,
): Promise<void> {
  const body = await readJsonObject(request, 1024 * 1024);
  const { sql, format = 'json' } = body;
  if (typeof sql !== 'string') throw new HttpError(400, 'the body needs "sql": a string with one read-only query');
  if (typeof format !== 'string' || (format !== 'json' && !(format in FILE_FORMATS))) {
    throw new HttpError(400, `"format" must be "json", "csv", "parquet" or "ndjson", not ${JSON.stringify(format)}`);
  }
  try {
    if (format === 'json') {
      sendJson(response, 200, await store.query(sql));
      return;
    }
    const { format: fileFormat, contentType } = FILE_FORMATS[format];
    const dir = await mkdtemp(join(tmpdir(), 'agl-query-'));
    try {
      const path = join(dir, `result.${format}`);
      const rows = await store.exportQuery(sql, path, fileFormat);
      response.writeHead(200, { 'content-type': contentType, 'x-agl-rows': String(rows) });
      await pipeline(createReadStream(path), response);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  } catch (error) {
    if (error instanceof QueryRefusedError) throw new HttpError(400, error.message);
    if (error instanceof QueryTimeoutError)
      throw new HttpError(408, `${error.message} (the server's limit: agl serve --query-timeout)`);
    if (error instanceof QueryBusyError) throw new HttpError(503, error.message);
    // Errors DuckDB raises for the query itself (unknown column, bad cast, ...) are the
    // client's to fix; they never concern the store's state.
    if (error instanceof Error && /(Error|Exception):/.test(error.message)) throw new HttpError(400, error.message);
    throw error;
  }
}
