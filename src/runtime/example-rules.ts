/**
 * The rules the offline EXAMPLE models follow (example-model.ts). None is a language model: each
 * is a few lines of string matching, deterministic, made so that the demo's loop is real: the
 * agent's model follows the instructions in its prompt, so a better prompt scores higher; the
 * critic names what went wrong in the runs it is shown; the editor applies the critique.
 *
 * The critic and editor read APO's prompts by their tags (<template>, <run>, <critique>; see
 * src/algorithms/apo/prompts.ts and shared/transcripts.ts) and answer the way APO reads answers
 * (<prompt>, shared/templates.ts); the reflector
 * reads GEPA's (<component>, <template>, <feedback>; src/algorithms/gepa/reflection.ts).
 */

const WORDS: Record<string, string> = { '+': 'plus', '-': 'minus', '*': 'times' };
const ARITHMETIC = /(-?\d+)\s*([+\-*])\s*(-?\d+)/;

const NUMBER_ONLY = /number only|just the number|only the number|only with the number/i;
const CAREFUL = /careful|double-check|check your|verify/i;

/** The instructions the example editor knows how to write, and what in a critique asks for each. */
const FIXES = [
  { asks: /number only/i, instruction: 'Answer with the number only.' },
  { asks: /double-check/i, instruction: 'Work carefully and double-check your arithmetic.' },
];

function compute(a: number, op: string, b: number): number {
  return op === '+' ? a + b : op === '-' ? a - b : a * b;
}

/** The questions the example model gets wrong when it is not asked to be careful (about one in three). */
function slips(a: number, op: string, b: number): boolean {
  return (a * 7 + b * 13 + op.charCodeAt(0)) % 3 === 0;
}

/**
 * The agent's model: answers "What is A + B?" (or -, *). Like a real model it keeps to the point
 * only when the prompt asks for the number only, and it is careless (off by one on some
 * questions) unless the prompt asks it to work carefully.
 */
export function answerQuestion(prompt: string): string {
  const match = ARITHMETIC.exec(prompt);
  if (!match) return `I can only do arithmetic (offline example model): ${prompt}`;
  const [a, op, b] = [Number(match[1]), match[2], Number(match[3])];
  const result = compute(a, op, b) + (!CAREFUL.test(prompt) && slips(a, op, b) ? 1 : 0);
  return NUMBER_ONLY.test(prompt) ? String(result) : `Well, ${a} ${WORDS[op]} ${b} makes ${result}.`;
}

/**
 * The critic: reads the runs in APO's critic prompt, finds the failures it knows (an answer in a
 * sentence where a number was wanted; a wrong number) and asks to fix the most frequent one.
 */
export function critique(prompt: string): string {
  const failures = { format: [] as string[], care: [] as string[] };
  let example = { format: '', care: '' };
  for (const run of prompt.matchAll(/<run index="(\d+)"[^>]*reward="([^"]*)">([\s\S]*?)<\/run>/g)) {
    const [, index, reward, body] = run;
    if (reward === '1') continue;
    const question = ARITHMETIC.exec(/\[user\] (.*)/.exec(body)?.[1] ?? '');
    const said = (/\[assistant\] (.*)/.exec(body)?.[1] ?? '').trim();
    if (!question) continue;
    const right = compute(Number(question[1]), question[2], Number(question[3]));
    if (!/^-?\d+$/.test(said)) {
      failures.format.push(index);
      example = { ...example, format: example.format || said };
    } else if (Number(said) !== right) {
      failures.care.push(index);
      example = { ...example, care: example.care || `${question[0]} was answered ${said}; it is ${right}` };
    }
  }
  const label = '[offline example critic: rules, not a language model]';
  if (failures.format.length && failures.format.length >= failures.care.length) {
    return `${label}\n- Runs ${failures.format.join(', ')} answered in a sentence (${JSON.stringify(example.format)}), and the reward reads the first number of the answer. Change: ask for the number only, with no words around it.`;
  }
  if (failures.care.length) {
    return `${label}\n- Runs ${failures.care.join(', ')} gave a wrong number (${example.care}). Change: ask the model to work carefully and double-check its arithmetic.`;
  }
  return `${label}\n- Every run earned its reward; the template needs no change.`;
}

/**
 * The editor: writes the instructions the critique asks for into the template. Two behaviours,
 * picked by the request's seed as sampling would vary a real model's answers: a careful edit adds
 * them in front of the template; a hasty one keeps only them and the placeholders (and so may
 * lose what the template asked before).
 */
export function edit(prompt: string, seed: number): string {
  const template = /<template>\n([\s\S]*?)\n<\/template>/.exec(prompt)?.[1] ?? '';
  const critiqueText = /<critique>\n([\s\S]*?)\n<\/critique>/.exec(prompt)?.[1] ?? '';
  const wanted = FIXES.filter((fix) => fix.asks.test(critiqueText) && !template.includes(fix.instruction)).map(
    (fix) => fix.instruction,
  );
  if (wanted.length === 0) return `<prompt>${template}</prompt>`;
  const placeholders = template.match(/\{\{\s*[\w.]+\s*\}\}|\{[\w.]+\}/g) ?? [];
  const revised = seed % 2 === 0 ? `${wanted.join(' ')} ${template}` : `${wanted.join(' ')} ${placeholders.join(' ')}`;
  return `<prompt>${revised.trim()}</prompt>`;
}

/**
 * GEPA's reflection model: reads the feedback texts of the runs it is shown, keeps those that
 * name the component it is asked to improve (a real model would judge which feedback concerns
 * that prompt), and adds the instructions they ask for in front of the template.
 */
export function reflect(prompt: string): string {
  const component = /<component name="([^"]*)">/.exec(prompt)?.[1] ?? '';
  const template = /<template>\n([\s\S]*?)\n<\/template>/.exec(prompt)?.[1] ?? '';
  const feedback = [...prompt.matchAll(/<feedback>([\s\S]*?)<\/feedback>/g)]
    .flatMap((m) => m[1].split('\n'))
    .filter((line) => line.startsWith(`${component}:`))
    .join('\n');
  const wanted = FIXES.filter((fix) => fix.asks.test(feedback) && !template.includes(fix.instruction)).map(
    (fix) => fix.instruction,
  );
  return `<prompt>${[...wanted, template].join(' ').trim()}</prompt>`;
}

/**
 * The judge: reads the transcripts of a judge prompt (src/algorithms/judge/judge.ts) and scores
 * each answer to "What is A + B?": the right number alone 1, the right number in a sentence 0.7,
 * a wrong number 0.2, no number 0. One transcript gets `{"score", "reason"}`; several (a group)
 * get `{"scores": [...]}`, as the judge prompt asks.
 */
export function judgeTranscripts(prompt: string): string {
  const transcripts = [...prompt.matchAll(/<transcript(?: index="(\d+)")?>\n([\s\S]*?)\n<\/transcript>/g)];
  const verdicts = transcripts.map(([, index, body]) => ({ transcript: Number(index ?? 1), ...scoreAnswer(body) }));
  if (transcripts.length === 1 && transcripts[0][1] === undefined) {
    const { score, reason } = verdicts[0];
    return JSON.stringify({ score, reason });
  }
  return JSON.stringify({ scores: verdicts });
}

function scoreAnswer(transcript: string): { score: number; reason: string } {
  const question = ARITHMETIC.exec(/\[user\] (.*)/.exec(transcript)?.[1] ?? '');
  const said = ([...transcript.matchAll(/\[assistant\] (.*)/g)].at(-1)?.[1] ?? '').trim();
  if (!question) return { score: 0, reason: 'no arithmetic question in the transcript' };
  const right = compute(Number(question[1]), question[2], Number(question[3]));
  const number = /-?\d+(?!.*\d)/.exec(said)?.[0];
  if (number === undefined) return { score: 0, reason: `no number in the answer to ${question[0]}` };
  if (Number(number) !== right) return { score: 0.2, reason: `${question[0]} is ${right}, not ${number}` };
  return /^-?\d+$/.test(said)
    ? { score: 1, reason: `${question[0]} = ${right}, the number alone` }
    : { score: 0.7, reason: `${question[0]} = ${right} is right, but said in a sentence` };
}
