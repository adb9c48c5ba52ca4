/**
 * One line of progress on stderr for long exports, redrawn in place; nothing when stderr is not a
 * terminal (logs and pipes get the closing summary only).
 */
interface Progress {
  /** The share done, from 0 to 1. */
  fraction(done: number): void;
  /** Records written so far. */
  count(records: number): void;
  /** Any status text. */
  text(text: string): void;
  done(): void;
}

export function progressLine(label: string, stream: NodeJS.WriteStream = process.stderr): Progress {
  if (!stream.isTTY) return { fraction: () => {}, count: () => {}, text: () => {}, done: () => {} };
  const started = Date.now();
  let shown = false;
  const draw = (text: string) => {
    if (Date.now() - started < 500) return; // short exports print no bar at all
    stream.write(`\r\x1b[2K${label}: ${text}`);
    shown = true;
  };
  return {
    fraction: (done) => {
      const width = 30;
      const filled = Math.round(Math.min(1, Math.max(0, done)) * width);
      draw(`[${'#'.repeat(filled)}${' '.repeat(width - filled)}] ${Math.round(done * 100)}%`);
    },
    text: draw,
    count: (records) =>
      draw(
        `${records.toLocaleString('en')} records (${Math.round(records / ((Date.now() - started) / 1000)).toLocaleString('en')}/s)`,
      ),
    done: () => {
      if (shown) stream.write('\r\x1b[2K');
    },
  };
}
