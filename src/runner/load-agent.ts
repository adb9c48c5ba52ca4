import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Agent } from './agent.js';

/** A module that loads but exports no agent made with rollout(). */
export class AgentModuleError extends Error {
  constructor(module: string) {
    super(`${module} exports no agent: export default rollout(async (task, ctx) => ...)`);
    this.name = 'AgentModuleError';
  }
}

/** The agent a module exports, as its default export or as `agent`. */
export async function loadAgent(module: string): Promise<Agent> {
  const loaded = (await import(pathToFileURL(resolve(module)).href)) as { default?: unknown; agent?: unknown };
  const agent = (loaded.default ?? loaded.agent) as Agent | undefined;
  if (typeof agent?.run !== 'function') throw new AgentModuleError(module);
  return agent;
}
