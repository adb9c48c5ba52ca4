/** The text reports' diff of a prompt against its seed (APO's and GEPA's reports, the demo). */

/** Word pieces of a text, the whitespace after each word kept with it, so that joining them gives the text back. */
const pieces = (text: string): string[] => text.match(/\s+|\S+\s*/g) ?? [];

/** Words longer than this on both sides are compared line by line instead (the table is n*m). */
const MAX_DIFF_CELLS = 4_000_000;

/**
 * `after` against `before` as git's word diff shows it: removed words as [-...-], added ones as
 * {+...+}, the rest as it is.
 */
export function wordDiff(before: string, after: string): string {
  let a = pieces(before);
  let b = pieces(after);
  if (a.length * b.length > MAX_DIFF_CELLS) {
    a = before.split(/(?<=\n)/);
    b = after.split(/(?<=\n)/);
  }
  const ops = diff(a, b);
  let out = '';
  for (let i = 0; i < ops.length; ) {
    const kind = ops[i].kind;
    let text = '';
    while (i < ops.length && ops[i].kind === kind) text += ops[i++].text;
    if (kind === '=') out += text;
    else
      out +=
        kind === '-'
          ? `[-${text.trimEnd()}-]${text.slice(text.trimEnd().length)}`
          : `{+${text.trimEnd()}+}${text.slice(text.trimEnd().length)}`;
  }
  return out;
}

/** The longest common subsequence of two piece lists, as kept (=), removed (-) and added (+) pieces. */
function diff(a: string[], b: string[]): { kind: '=' | '-' | '+'; text: string }[] {
  const m = a.length;
  const n = b.length;
  // lengths[i][j]: the LCS length of a[i..] and b[j..], one row of n + 1 per i.
  const lengths = new Uint32Array((m + 1) * (n + 1));
  for (let i = m - 1; i >= 0; i--) {
    for (let j = n - 1; j >= 0; j--) {
      lengths[i * (n + 1) + j] =
        a[i].trim() === b[j].trim()
          ? lengths[(i + 1) * (n + 1) + j + 1] + 1
          : Math.max(lengths[(i + 1) * (n + 1) + j], lengths[i * (n + 1) + j + 1]);
    }
  }
  const ops: { kind: '=' | '-' | '+'; text: string }[] = [];
  let i = 0;
  let j = 0;
  while (i < m && j < n) {
    if (a[i].trim() === b[j].trim()) {
      ops.push({ kind: '=', text: b[j] });
      i++;
      j++;
    } else if (lengths[(i + 1) * (n + 1) + j] >= lengths[i * (n + 1) + j + 1]) ops.push({ kind: '-', text: a[i++] });
    else ops.push({ kind: '+', text: b[j++] });
  }
  while (i < m) ops.push({ kind: '-', text: a[i++] });
  while (j < n) ops.push({ kind: '+', text: b[j++] });
  return ops;
}
