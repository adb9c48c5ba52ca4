// The reward of examples/grpo-trainer: how close an answer is to the target, from 0 to 1.
// Kept apart from agent.mjs (it imports nothing), so it can be checked without agl built.

/** Edit distance between two strings: insertions, deletions and substitutions of characters. */
export function editDistance(a, b) {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current.push(Math.min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1)));
    }
    previous = current;
  }
  return previous[b.length];
}

/**
 * 1 for the target exactly, 0 for nothing in common: 1 - distance / the longer length. Every
 * character the tiny tokenizer spells is one token (but two merged pairs), so this is close to a
 * token-level match, and partial answers earn partial credit: a signal from the first step on.
 */
export function similarity(answer, target) {
  const longer = Math.max(answer.length, target.length, 1);
  return 1 - editDistance(answer, target) / longer;
}
