import { readFile } from 'node:fs/promises';
import { extname } from 'node:path';
import { DuckDBInstance } from '@duckdb/node-api';
import { sqlText } from '../sql/literals.js';

/** Tasks given as an array, or as the path of a JSONL (one task per line), JSON (an array) or Parquet (one task per row) file. */
export type Dataset<T> = readonly T[] | string;

export async function loadDataset<T = unknown>(dataset: Dataset<T>): Promise<T[]> {
  if (typeof dataset !== 'string') {
    if (!Array.isArray(dataset))
      throw new TypeError('a dataset is an array of tasks or the path of a .jsonl, .json or .parquet file');
    return [...dataset];
  }
  const type = extname(dataset).toLowerCase();
  if (!['.parquet', '.json', '.jsonl', '.ndjson'].includes(type))
    throw new TypeError(`${dataset}: a dataset file ends in .jsonl, .ndjson, .json or .parquet`);
  if (type === '.parquet') return parquetRows(dataset) as Promise<T[]>;
  const text = await readFile(dataset, 'utf8');
  if (type === '.json') {
    const tasks: unknown = parse(text, dataset);
    if (!Array.isArray(tasks)) throw new TypeError(`${dataset} holds no JSON array of tasks`);
    return tasks as T[];
  }
  return text
    .split('\n')
    .flatMap((line, i) => (line.trim() === '' ? [] : [parse(line, `${dataset} line ${i + 1}`) as T]));
}

function parse(text: string, where: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new TypeError(`${where} is not valid JSON: ${(error as Error).message}`);
  }
}

/** Each row as an object of its columns (nested types as JSON values), through DuckDB. */
async function parquetRows(path: string): Promise<unknown[]> {
  const instance = await DuckDBInstance.create(':memory:');
  try {
    const connection = await instance.connect();
    const reader = await connection.runAndReadAll(
      `SELECT to_json(t)::VARCHAR AS task FROM read_parquet(${sqlText(path)}) t`,
    );
    connection.closeSync();
    return reader.getRows().map(([task]) => JSON.parse(String(task)));
  } finally {
    instance.closeSync();
  }
}
