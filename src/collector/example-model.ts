import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * The offline EXAMPLE model server of `agl demo` and the examples: an OpenAI-compatible chat
 * endpoint on 127.0.0.1 that is not a language model. It answers "What is A + B?" (or -, *) by
 * computing it, wrong on purpose now and then so that rewards differ, in a sentence unless the
 * prompt asks for the number only. It exists
 * so that the demo runs with no network and no key; point OPENAI_BASE_URL at a real model to
 * use one instead.
 */
export const EXAMPLE_MODEL = 'agl-example-model-offline';

const WORDS: Record<string, string> = { '+': 'plus', '-': 'minus', '*': 'times' };

function answer(prompt: string, seed: number): string {
  const match = /(-?\d+)\s*([+\-*])\s*(-?\d+)/.exec(prompt);
  if (!match) return `I can only do arithmetic (offline example model): ${prompt}`;
  const [a, op, b] = [Number(match[1]), match[2], Number(match[3])];
  const exact = op === '+' ? a + b : op === '-' ? a - b : a * b;
  const result = seed % 4 === 3 ? exact + 1 : exact; // one answer in four is off by one
  // Like a real model, it keeps to the point only when the prompt asks it to: prompts matter.
  return /number only|just the number/i.test(prompt) ? String(result) : `Well, ${a} ${WORDS[op]} ${b} makes ${result}.`;
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
      const question = String(body.messages.at(-1)?.content ?? '');
      const content = answer(question, calls++);
      const prompt = body.messages.map((m: { content?: unknown }) => String(m.content ?? '')).join(' ');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        id: `chatcmpl-example-${calls}`, object: 'chat.completion', created: Math.floor(Date.now() / 1000), model: EXAMPLE_MODEL,
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
