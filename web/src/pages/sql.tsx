/**
 * SQL: one read-only query at a time (the server refuses anything else), its result as a table,
 * the whole result as CSV or Parquet, and saved examples. Ctrl+Enter (Cmd+Enter) runs it.
 */
import { useState } from 'preact/hooks';
import type { QueryResult } from '../../../src/api/query.js';
import { sql, sqlFile } from '../api.js';
import { ErrorNote, ResultTable } from '../components/common.js';
import { EXAMPLE_QUERIES } from '../queries.js';

/** Rows the page shows; downloads hold them all. */
const SHOWN_ROWS = 1000;

export function SqlPage() {
  const [text, setText] = useState(EXAMPLE_QUERIES[0].sql);
  const [result, setResult] = useState<(QueryResult & { ms: number }) | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);
  const [download, setDownload] = useState<{ url: string; name: string; rows: number } | undefined>(undefined);

  const run = async () => {
    setBusy(true);
    setError(undefined);
    const start = performance.now();
    try {
      const answer = await sql(text);
      setResult({ ...answer, ms: performance.now() - start });
    } catch (e) {
      setResult(undefined);
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const save = async (format: 'csv' | 'parquet') => {
    setBusy(true);
    setError(undefined);
    try {
      const { blob, rows } = await sqlFile(text, format);
      if (download) URL.revokeObjectURL(download.url);
      const file = { url: URL.createObjectURL(blob), name: `agl-query.${format}`, rows };
      setDownload(file);
      // The browser saves it at once; the link stays for another copy.
      const link = document.createElement('a');
      link.href = file.url;
      link.download = file.name;
      link.click();
    } catch (e) {
      setError((e as Error).message);
    } finally {
      setBusy(false);
    }
  };
  const onKeyDown = (event: KeyboardEvent) => {
    if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      void run();
    }
  };
  return (
    <main id="main" class="page">
      <div class="page-head">
        <h1>SQL</h1>
      </div>
      <div class="sql-layout">
        <div class="sql-editor">
          <label for="sql-text">Read-only query (Ctrl+Enter runs it)</label>
          <textarea
            id="sql-text"
            spellcheck={false}
            rows={9}
            value={text}
            onInput={(e) => setText(e.currentTarget.value)}
            onKeyDown={onKeyDown}
          />
          <div class="buttons">
            <button type="button" class="primary" onClick={run} disabled={busy}>
              Run
            </button>
            <button type="button" onClick={() => save('csv')} disabled={busy}>
              Download CSV
            </button>
            <button type="button" onClick={() => save('parquet')} disabled={busy}>
              Download Parquet
            </button>
            {download ? (
              <a href={download.url} download={download.name}>
                {download.name} ({download.rows.toLocaleString()} rows)
              </a>
            ) : null}
          </div>
        </div>
        <nav class="examples" aria-label="Example queries">
          <h2>Examples</h2>
          <ul class="example-list">
            {EXAMPLE_QUERIES.map((q) => (
              <li key={q.title} class="example">
                <button type="button" class="link" onClick={() => setText(q.sql)}>
                  {q.title}
                </button>
              </li>
            ))}
          </ul>
          <p class="muted">
            Views: rollouts, attempts, resources, workers, spans, logs, llm_calls, rewards, prompt_versions,
            sft_iterations (docs/sql.md).
          </p>
        </nav>
      </div>
      <ErrorNote error={error} />
      {result ? (
        <section aria-label="Result">
          <p class="summary" aria-live="polite">
            {result.rows.length.toLocaleString()} {result.rows.length === 1 ? 'row' : 'rows'} in {Math.round(result.ms)}{' '}
            ms
            {result.rows.length > SHOWN_ROWS ? `; the first ${SHOWN_ROWS} shown, downloads hold all` : ''}.
          </p>
          <ResultTable columns={result.columns} rows={result.rows} max={SHOWN_ROWS} />
        </section>
      ) : null}
    </main>
  );
}
