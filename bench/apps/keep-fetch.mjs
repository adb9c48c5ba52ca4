// Imported before agl/register: keeps the fetch that agl then wraps, for same-process-ab.mjs.
globalThis.__aglBenchOriginalFetch = globalThis.fetch;
