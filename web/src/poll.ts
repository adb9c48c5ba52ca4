/**
 * Live data without a reload: a loader run again while the tab is visible, every 2 s while its
 * answer changes, backing off to 15 s while it does not (or while the server fails), at once when
 * the tab becomes visible again. Only agl's own API is asked: no private route, no open stream.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError } from './api.js';

const FIRST_DELAY_MS = 2000;
const MAX_DELAY_MS = 15_000;

export interface Loaded<T> {
  readonly data: T | undefined;
  readonly error: string | undefined;
  readonly loading: boolean;
  /** When the data was last read (ms since the epoch). */
  readonly at: number | undefined;
  readonly reload: () => void;
}

/**
 * `load`'s answer, read again when `deps` change and, with `live`, polled with backoff. The
 * signal aborts a read whose answer is no longer wanted.
 */
export function useLoaded<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[], live = false): Loaded<T> {
  const [state, setState] = useState<Omit<Loaded<T>, 'reload'>>({
    data: undefined,
    error: undefined,
    loading: true,
    at: undefined,
  });
  const [round, setRound] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;

  // biome-ignore lint/correctness/useExhaustiveDependencies: deps are the caller's, round asks for a reload
  useEffect(() => {
    const controller = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    let delay = FIRST_DELAY_MS;
    let last: string | undefined;
    let stopped = false;
    const run = async () => {
      clearTimeout(timer);
      setState((s) => ({ ...s, loading: true }));
      try {
        const data = await loadRef.current(controller.signal);
        if (stopped) return;
        const text = JSON.stringify(data);
        delay = text === last ? Math.min(delay * 2, MAX_DELAY_MS) : FIRST_DELAY_MS;
        last = text;
        setState({ data, error: undefined, loading: false, at: Date.now() });
      } catch (error) {
        if (stopped) return;
        delay = Math.min(delay * 2, MAX_DELAY_MS);
        setState((s) => ({ ...s, error: (error as Error).message, loading: false }));
        if (error instanceof ApiError && error.status === 401) return;
      }
      if (live && !document.hidden) timer = setTimeout(run, delay);
    };
    const onVisible = () => {
      if (!document.hidden && live) {
        delay = FIRST_DELAY_MS;
        void run();
      }
    };
    document.addEventListener('visibilitychange', onVisible);
    void run();
    return () => {
      stopped = true;
      clearTimeout(timer);
      controller.abort();
      document.removeEventListener('visibilitychange', onVisible);
    };
  }, [...deps, live, round]);
  return { ...state, reload: () => setRound((r) => r + 1) };
}
