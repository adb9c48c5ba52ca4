/**
 * The offline EXAMPLE model server of `agl demo` and the examples: an OpenAI-compatible chat
 * endpoint on 127.0.0.1 that is not a language model. Four models answer by rules
 * (example-rules.ts): EXAMPLE_MODEL answers "What is A + B?" (or -, *), in the format and with
 * the care its prompt asks for; EXAMPLE_CRITIC_MODEL and EXAMPLE_EDITOR_MODEL play APO's critic
 * and editor, EXAMPLE_REFLECTOR_MODEL GEPA's reflection model; EXAMPLE_JUDGE_MODEL is an LLM
 * judge that scores right answers higher. It exists so that the demo runs with no network and
 * no key; point OPENAI_BASE_URL at a real model to use one instead.
 */
import { answerQuestion, critique, edit, judgeTranscripts, reflect } from './example-rules.js';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export const EXAMPLE_MODEL = 'agl-example-model-offline';
export const EXAMPLE_CRITIC_MODEL = 'agl-example-critic-offline';
export const EXAMPLE_EDITOR_MODEL = 'agl-example-editor-offline';
export const EXAMPLE_REFLECTOR_MODEL = 'agl-example-reflector-offline';
export const EXAMPLE_JUDGE_MODEL = 'agl-example-judge-offline';

/** The answer of the model a request names; any other name gets the arithmetic model. */
function reply(body: ChatRequest): string {
  const last = String(body.messages.at(-1)?.content ?? '');
  if (body.model === EXAMPLE_CRITIC_MODEL) return critique(last);
  if (body.model === EXAMPLE_EDITOR_MODEL) return edit(last, Number(body.seed ?? 0));
  if (body.model === EXAMPLE_REFLECTOR_MODEL) return reflect(last);
  if (body.model === EXAMPLE_JUDGE_MODEL) return judgeTranscripts(last);
  return answerQuestion(last);
}

const tokens = (text: string) => text.split(/\s+/).filter(Boolean).length;

interface ChatRequest {
  model?: unknown;
  seed?: unknown;
  messages: { content?: unknown }[];
}

/** A chat request's body, or undefined when it is not JSON or has no messages. */
function chatRequestOf(body: Buffer): ChatRequest | undefined {
  try {
    const request: unknown = JSON.parse(body.toString('utf8'));
    if (typeof request !== 'object' || request === null) return undefined;
    const { model, seed, messages } = request as Record<string, unknown>;
    return Array.isArray(messages)
      ? { model, seed, messages: messages.map((m) => (typeof m === 'object' && m !== null ? m : {})) }
      : undefined;
  } catch {
    return undefined;
  }
}

/** A message's content as text ('' when it has none). */
const contentOf = (message: unknown) =>
  String((typeof message === 'object' && message !== null && 'content' in message ? message.content : undefined) ?? '');

export async function startExampleModel(): Promise<{ baseURL: string; close(): Promise<void> }> {
  let calls = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = chatRequestOf(Buffer.concat(chunks));
      if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions') || !body) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            error: {
              message: 'the example model only answers POST /v1/chat/completions',
              type: 'invalid_request_error',
            },
          }),
        );
        return;
      }
      const content = reply(body);
      calls++;
      const prompt = body.messages.map(contentOf).join(' ');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: `chatcmpl-example-${calls}`,
          object: 'chat.completion',
          created: Math.floor(Date.now() / 1000),
          model: typeof body.model === 'string' ? body.model : EXAMPLE_MODEL,
          choices: [{ index: 0, message: { role: 'assistant', content }, finish_reason: 'stop' }],
          usage: {
            prompt_tokens: tokens(prompt),
            completion_tokens: tokens(content),
            total_tokens: tokens(prompt) + tokens(content),
          },
        }),
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
