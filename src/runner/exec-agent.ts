import { spawn } from 'node:child_process';
import { gatewayBaseUrl } from '../client/gateway-url.js';
import { rollout, type Agent } from './agent.js';

/**
 * An agent in any language: a shell command run once per rollout. It finds its task and where
 * to send things in its environment (AGL_TASK as JSON, AGL_ROLLOUT_ID, AGL_ATTEMPT_ID,
 * AGL_ENDPOINT, OPENAI_BASE_URL on the gateway route of the attempt, OPENAI_API_KEY). Exit code 0
 * is success; its reward is the number on a last stdout line `agl-reward: <number>`, or what it
 * emitted as spans itself.
 */
export function execAgent(command: string, serverUrl: string, token?: string): Agent<unknown> {
  if (typeof command !== 'string' || command.trim() === '') throw new TypeError('--exec needs a command');
  return rollout(async (task, ctx) => {
    const env = {
      ...process.env,
      AGL_TASK: JSON.stringify(task ?? null),
      AGL_ROLLOUT_ID: ctx.rolloutId,
      AGL_ATTEMPT_ID: ctx.attemptId,
      AGL_ENDPOINT: serverUrl,
      // Through the gateway always (it forwards to the rollout's llm or to --upstream); with a
      // token on the server, that token is the key the gateway wants.
      OPENAI_BASE_URL: gatewayBaseUrl(serverUrl, ctx.rolloutId, ctx.attemptId),
      OPENAI_API_KEY: token ?? ctx.llm?.apiKey ?? 'agl',
    };
    const child = spawn(command, { shell: true, env, stdio: ['ignore', 'pipe', 'pipe'], signal: ctx.signal });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout = (stdout + chunk.toString()).slice(-65_536)));
    child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-65_536)));
    const code = await new Promise<number | null>((resolve, reject) => {
      child.once('error', reject);
      child.once('close', (exitCode) => resolve(exitCode));
    });
    if (code !== 0) {
      const tail = stderr.trim().split('\n').slice(-5).join('\n');
      throw new Error(`the command exited with ${code ?? 'a signal'}${tail ? `: ${tail}` : ''}`);
    }
    const last = stdout.trim().split('\n').at(-1) ?? '';
    const match = /^agl-reward:\s*(\S+)\s*$/.exec(last);
    if (!match) return undefined;
    const reward = Number(match[1]);
    if (!Number.isFinite(reward)) throw new Error(`the command printed a reward that is not a number: "${last}"`);
    return reward;
  });
}
