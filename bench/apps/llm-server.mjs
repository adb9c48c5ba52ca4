// The OpenAI-compatible test server in a process of its own, for benchmarks: prints its base URL.
import { startOpenAITestServer } from '../../dist/test/support/openai-server.js';

const server = await startOpenAITestServer();
console.log(server.baseURL);
process.on('SIGTERM', () => server.close().then(() => process.exit(0)));
