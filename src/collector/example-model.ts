/**
 * The offline EXAMPLE model server of `agl demo` and the examples: an OpenAI-compatible chat
 * endpoint on 127.0.0.1 that is not a language model. Three models answer by rules
 * (example-rules.ts): EXAMPLE_MODEL answers "What is A + B?" (or -, *), in the format and with
 * the care its prompt asks for; EXAMPLE_CRITIC_MODEL and EXAMPLE_EDITOR_MODEL play APO's critic
 * and editor. It exists so that the demo runs with no network and no key; point
 * OPENAI_BASE_URL at a real model to use one instead.
 */
import { answerQuestion, critique, edit } from './example-rules.js';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export const EXAMPLE_MODEL = 'agl-example-model-offline';
export const EXAMPLE_CRITIC_MODEL = 'agl-example-critic-offline';
export const EXAMPLE_EDITOR_MODEL = 'agl-example-editor-offline';

/** The answer of the model a request names; any other name gets the arithmetic model. */
function reply(body: { model?: unknown; seed?: unknown; messages: { content?: unknown }[] }): string {
  const last = String(body.messages.at(-1)?.content ?? '');
  if (body.model === EXAMPLE_CRITIC_MODEL) return critique(last);
  if (body.model === EXAMPLE_EDITOR_MODEL) return edit(last, Number(body.seed ?? 0));
  return answerQuestion(last);
}

const tokens = (text: string) => text.split(/\s+/).filter(Boolean).length;

export async function startExampleModel(): Promise<{ baseURL: string; close(): Promise<void> }> {
  let calls = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      let body: any;
      try {
        body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch {
        body = undefined;
      }
      if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions') || !Array.isArray(body?.messages)) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'the example model only answers POST /v1/chat/completions', type: 'invalid_request_error' } }));
        return;
      }
      const content = reply(body);
      calls++;
      const prompt = body.messages.map((m: { content?: unknown }) => String(m.content ?? '')).join(' ');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        id: `chatcmpl-example-${calls}`, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model: typeof body.model === 'string' ? body.model : EXAMPLE_MODEL,
        choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
        usage: { prompt_tokens: tokens(prompt), completion_tokens: tokens(content), total_tokens: tokens(prompt) + tokens(content) },
      }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
