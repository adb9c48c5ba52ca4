import { renderRun, type RunTranscript } from '../shared/transcripts.js';
import type { ChatMessage } from '../shared/chat-model.js';

/**
 * What GEPA asks its reflection model: one component's template, the other components for
 * context, and a minibatch's runs (task, every LLM call, reward and feedback texts). The tags are
 * those APO's critic reads, plus <component>; agl's offline reflector parses them
 * (src/runtime/example-rules.ts `reflect`): change the tags in both places.
 */

const REFLECTION_SYSTEM = `You improve one prompt template of an AI agent that uses several. The agent fills each template's placeholders for a task and sends it to a language model; each run earns a reward (higher is better), often with feedback that says what went wrong and at which step.
You get the template to improve, the agent's other templates, and some runs: the task, each model call, the reward and the feedback.
Read the runs, find what the template to improve makes go wrong (only what concerns it; the others are improved in turn), and write an improved template.
Rules:
- Keep every placeholder exactly as written, e.g. {name} or {{ name }}: the agent fills them in. Add no new ones.
- Put what you learned from the runs into the template: the output format, constraints, steps, the facts the model missed.
Reply with the improved template only, between <prompt> and </prompt>, and nothing else.`;

export function reflectionMessages(
  component: string,
  templates: Readonly<Record<string, string>>,
  runs: readonly RunTranscript[],
): ChatMessage[] {
  const others = Object.entries(templates)
    .filter(([name]) => name !== component)
    .map(([name, template]) => `<other name="${name}">\n${template}\n</other>`);
  return [
    { role: 'system', content: REFLECTION_SYSTEM },
    {
      role: 'user',
      content: [
        `<component name="${component}">\n<template>\n${templates[component]}\n</template>\n</component>`,
        ...others,
        runs.map((run, i) => renderRun(run, i + 1)).join('\n\n'),
        `Write the improved "${component}" template.`,
      ].join('\n\n'),
    },
  ];
}

/**
 * The component to blame for a minibatch's shortfall: the one the feedback of runs that did not
 * earn full reward names most (by name), null when none is named.
 */
export function blamedComponent(components: readonly string[], runs: readonly RunTranscript[]): string | null {
  const counts = components.map((name) => ({
    name,
    count: runs
      .filter((run) => (run.reward ?? 0) < 1)
      .reduce(
        (n, run) => n + run.feedback.flatMap((text) => text.split('\n')).filter((line) => line.includes(name)).length,
        0,
      ),
  }));
  const top = counts.reduce((best, c) => (c.count > best.count ? c : best), { name: '', count: 0 });
  return top.count > 0 ? top.name : null;
}
