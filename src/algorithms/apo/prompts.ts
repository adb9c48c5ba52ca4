import type { ChatMessage } from '../shared/chat-model.js';
import { renderRun, type RunTranscript } from '../shared/transcripts.js';

/**
 * What APO says to its critic and editor models, and how it reads their answers. The parts a
 * model must find are marked with tags (<template>, <run>, <critique>, <prompt>), which real
 * models follow well and which agl's offline example critic and editor parse
 * (src/runtime/example-rules.ts): change the tags in both places.
 */

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
