/**
 * Runs as a model reading them is shown them: APO's critic and GEPA's reflection model see a
 * rollout's task, its LLM calls, reward and feedback texts, marked with tags (<run>, <call>,
 * <task>, <feedback>) that agl's offline example models parse (src/runtime/example-rules.ts).
 */

/** One rollout as a reading model sees it. */
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

/** One run as a model reading it is shown it. */
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
