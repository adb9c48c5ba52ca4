import type { PromptTemplateResource } from '../../api/types.js';

/** A prompt template a model rewrote: read from its answer, and checked against the seed's placeholders. */

/** The revised template in an editor's answer: between <prompt> tags, else in a code fence, else the whole answer. */
export function extractEdit(answer: string): string {
  const tagged = /<prompt>\n?([\s\S]*?)\n?<\/prompt>/i.exec(answer);
  if (tagged) return tagged[1].trim();
  const fenced = /^\s*```[\w-]*\n([\s\S]*?)\n```\s*$/.exec(answer);
  return (fenced ? fenced[1] : answer).trim();
}

/**
 * The placeholders a template's engine fills, read the way the agent's `format` reads them
 * (src/runner/agent.ts): `{name}` for f-string, `{{ name }}` for jinja; null for an engine
 * agl cannot read (poml), whose candidates are then not checked.
 */
export function placeholdersOf(template: string, engine: PromptTemplateResource['engine']): Set<string> | null {
  const pattern = engine === 'jinja' ? /\{\{\s*([\w.]+)\s*\}\}/g : engine === 'f-string' ? /\{([\w.]+)\}/g : null;
  return pattern ? new Set([...template.matchAll(pattern)].map((m) => m[1])) : null;
}

/** Why a candidate cannot replace the seed: it drops a placeholder the agent fills, or adds one it does not. Null when it can. */
export function placeholderProblem(
  seed: Set<string> | null,
  candidate: string,
  engine: PromptTemplateResource['engine'],
): string | null {
  const names = placeholdersOf(candidate, engine);
  if (seed === null || names === null) return null;
  const mark = (name: string) => (engine === 'jinja' ? `{{ ${name} }}` : `{${name}}`);
  const dropped = [...seed].filter((name) => !names.has(name));
  if (dropped.length) return `drops the placeholder${dropped.length > 1 ? 's' : ''} ${dropped.map(mark).join(', ')}`;
  const added = [...names].filter((name) => !seed.has(name));
  if (added.length)
    return `adds the placeholder${added.length > 1 ? 's' : ''} ${added.map(mark).join(', ')}, which the agent does not fill`;
  return null;
}
