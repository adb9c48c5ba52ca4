import type { PromptTemplateResource } from '../../api/types.js';
import type { ChatMessage } from '../shared/chat-model.js';

/**
 * What APO says to its critic and editor models, and how it reads their answers. The parts a
 * model must find are marked with tags (<template>, <run>, <critique>, <prompt>), which real
 * models follow well and which agl's offline example critic and editor parse
 * (src/runtime/example-rules.ts): change the tags in both places.
 */

/** One rollout as the critic sees it. */
export interface RunTranscript {
  readonly status: string;
  readonly reward: number | null;
  readonly task: unknown;
  /** Each LLM call of the rollout, in order: its input messages and the answer (TraceToMessages records). */
  readonly calls: readonly (readonly Record<string, unknown>[])[];
  /** The texts given with its rewards, in order: the agent's explanations, users' comments, judges' reasons. */
  readonly feedback: readonly string[];
}

/** Characters of one run the critic is shown at most: long runs keep their start and end. */
const RUN_CHARS = 6000;
/** Characters of one message at most. */
const MESSAGE_CHARS = 2000;

const CRITIC_SYSTEM = `You review a prompt template. An AI agent fills its placeholders for each task and sends the result to a language model; each run then earns a reward (higher is better).
You get the template and some runs made with it: the task, the conversation, the reward and what was said about it (feedback).
Find what in the template makes runs fail or earn less, and say how to change the template to fix it.
Answer with a short bullet list. Each bullet names one problem you saw in the runs (cite the run) and one concrete change to the template that would fix it (wording, output format, constraints, order, a definition).
Do not rewrite the whole template; another model will apply your critique.`;

/** Two angles on the same runs: the beam gets more varied edits than from one question asked twice. */
const CRITIC_FOCUS = [
  'Focus on the runs with the lowest rewards: what went wrong in each, and which part of the template let it happen.',
  'Compare the runs that earned more with those that earned less: what made the difference, and how can the template make the better behaviour the rule.',
];

const EDITOR_SYSTEM = `You revise a prompt template according to a critique.
Rules:
- Keep every placeholder exactly as written, e.g. {name} or {{ name }}: the agent fills them in. Add no new ones.
- Apply what the critique asks: output format, constraints, steps, definitions.
- Say what to do before how to do it. Keep it as short as the task allows.
Reply with the revised template only, between <prompt> and </prompt>, and nothing else.`;

const EDITOR_STYLE = [
  'Make the smallest change that addresses the critique; keep the rest word for word.',
  'Restructure or rewrite the template freely where the critique calls for it.',
];

/** The number of critic and editor prompt variants; APO picks one per branch with its seeded generator. */
export const CRITIC_VARIANTS = CRITIC_FOCUS.length;
export const EDITOR_VARIANTS = EDITOR_STYLE.length;

/**
 * `component`: the template's resource name, when the agent fills several; the critic and editor
 * then know which of the prompts in the runs the template is.
 */
export function criticMessages(
  template: string,
  runs: readonly RunTranscript[],
  variant: number,
  component?: string,
): ChatMessage[] {
  const shown = runs.map((run, i) => renderRun(run, i + 1)).join('\n\n');
  return [
    { role: 'system', content: CRITIC_SYSTEM },
    {
      role: 'user',
      content: `${naming(component)}<template>\n${template}\n</template>\n\n${shown}\n\n${CRITIC_FOCUS[variant % CRITIC_FOCUS.length]}`,
    },
  ];
}

export function editorMessages(template: string, critique: string, variant: number, component?: string): ChatMessage[] {
  return [
    { role: 'system', content: EDITOR_SYSTEM },
    {
      role: 'user',
      content: `${naming(component)}<template>\n${template}\n</template>\n\n<critique>\n${critique}\n</critique>\n\n${EDITOR_STYLE[variant % EDITOR_STYLE.length]}`,
    },
  ];
}

const naming = (component: string | undefined) =>
  component === undefined ? '' : `The agent fills several templates; this one is "${component}".\n\n`;

/** The revised template in an editor's answer: between <prompt> tags, else in a code fence, else the whole answer. */
export function extractEdit(answer: string): string {
  const tagged = /<prompt>\n?([\s\S]*?)\n?<\/prompt>/i.exec(answer);
  if (tagged) return tagged[1].trim();
  const fenced = /^\s*```[\w-]*\n([\s\S]*?)\n```\s*$/.exec(answer);
  return (fenced ? fenced[1] : answer).trim();
}

/** One run as a model reading it is shown it (also GEPA's reflection, src/algorithms/gepa/reflection.ts). */
export function renderRun(run: RunTranscript, index: number): string {
  const reward = run.reward === null ? 'none' : String(run.reward);
  const calls = run.calls.map(
    (messages, i) => `<call index="${i + 1}">\n${messages.map(renderMessage).join('\n')}\n</call>`,
  );
  const body = clipMiddle(
    [
      `<task>${clip(JSON.stringify(run.task) ?? 'null', MESSAGE_CHARS)}</task>`,
      ...(calls.length ? calls : ['(no LLM call was recorded)']),
      ...run.feedback.map((text) => `<feedback>${clip(text, MESSAGE_CHARS)}</feedback>`),
    ].join('\n'),
    RUN_CHARS,
  );
  return `<run index="${index}" status="${run.status}" reward="${reward}">\n${body}\n</run>`;
}

function renderMessage(message: Record<string, unknown>): string {
  const parts: string[] = [];
  const text = contentText(message.content);
  if (text) parts.push(text);
  if (Array.isArray(message.tool_calls)) {
    for (const call of message.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
      parts.push(`(calls tool ${String(call.function?.name)} with ${String(call.function?.arguments)})`);
    }
  }
  return `[${String(message.role)}] ${clip(parts.join(' '), MESSAGE_CHARS)}`;
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content.map((part) => (typeof part?.text === 'string' ? part.text : `(${String(part?.type)})`)).join(' ');
  return '';
}

function clip(text: string, chars: number): string {
  return text.length <= chars ? text : `${text.slice(0, chars)}… (${text.length - chars} more characters)`;
}

function clipMiddle(text: string, chars: number): string {
  if (text.length <= chars) return text;
  const half = Math.floor(chars / 2);
  return `${text.slice(0, half)}\n… (${text.length - 2 * half} characters left out) …\n${text.slice(-half)}`;
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
