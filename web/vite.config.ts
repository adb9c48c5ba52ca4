// Builds the dashboard into dist/dashboard, which the server serves and the package ships.
// JSX goes through Vite's own transformer (Oxc) with Preact's automatic runtime: the Preact
// preset would need Babel, and its hot reload is a development nicety the build does not use.
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url));

export default defineConfig({
  root: here('.'),
  base: '/',
  publicDir: here('public'),
  oxc: { jsx: { runtime: 'automatic', importSource: 'preact' } },
  build: {
    outDir: here('../dist/dashboard'),
    emptyOutDir: true,
    target: 'es2022',
    // One small app: a single script and stylesheet, no preload helper to inline.
    modulePreload: false,
    chunkSizeWarningLimit: 400,
  },
  server: {
    // `npx vite web` during development: the API of an agl serve on the default port.
    proxy: { '/v1': 'http://127.0.0.1:4318' },
  },
});
