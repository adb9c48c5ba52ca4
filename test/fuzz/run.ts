import fc from 'fast-check';
import { jsonBytes } from './otlp-model.js';
import { jsonRequests, loadSeeds, protobufRequests } from './otlp-cases.js';
import { IdPool, restCases, restRequest, type RestCase } from './rest-cases.js';
import {
  anthropicCases,
  anthropicRequest,
  type AnthropicCase,
  type CallIds,
  feedbackCases,
  feedbackRequest,
  type FeedbackCase,
} from './call-cases.js';
import { FuzzServer, InvariantBroken, type FuzzRequest } from './server.js';
import { sqlCases, type SqlCase } from './sql-cases.js';

// In this order: the calls the Anthropic target records are what feedback cases name.
export const TARGETS = ['otlp-protobuf', 'otlp-json', 'rest', 'sql', 'anthropic', 'feedback'] as const;
export type TargetName = (typeof TARGETS)[number];

export interface FuzzOptions {
  /** Cases in all, shared evenly by the targets. */
  readonly runs: number;
  readonly seed: number;
  /** fast-check's path of a failure, to replay it (with the seed and one target). */
  readonly path?: string;
  readonly targets?: readonly TargetName[];
  /**
   * Cases between two full read checks (1: after each case). With more, a failed check
   * replays the cases since the last good one, each on a fresh database, to find the one to blame.
   * Left out: at least every AUTO_CHECK_MIN cases, and no more often than keeps the checks
   * to a tenth of the time (they read the whole database, which grows as the run goes on).
   */
  readonly checkEvery?: number;
  /** Cases tried while shrinking a failure before the smallest so far is reported. */
  readonly maxShrinks?: number;
  /**
   * Go on after a failure (on a fresh database) and report each kind of failure once, with the
   * smallest case seen; no shrinking. For surveying a store with known bugs.
   */
  readonly keepGoing?: boolean;
  /** Told each target's report as soon as the target is done. */
  readonly onReport?: (report: TargetReport) => void;
  /** Told the running target's report so far, every `progressEveryMs` (default 10 s). */
  readonly onProgress?: (report: TargetReport) => void;
  readonly progressEveryMs?: number;
}

export interface Failure {
  readonly message: string;
  readonly example: string;
  /** Whether the case fast-check reports is the one to blame (so that its path replays the failure). */
  readonly replayable: boolean;
}

export interface TargetReport {
  readonly target: TargetName;
  /** Cases sent (shrinking not counted). */
  tried: number;
  /** Cases the server refused with a 4xx. */
  rejected: number;
  /** Cases that broke an invariant. */
  broken: number;
  seconds: number;
  /** The (shrunk) counterexample and how to replay it; with keepGoing, one per kind of failure. */
  failures: (Failure & { readonly seed: number; readonly path?: string; readonly runs: number })[];
}

interface Target<Case> {
  readonly cases: fc.Arbitrary<Case>;
  describe(testCase: Case): string;
  /** Sends the case and checks what the answer itself must satisfy; returns the status. */
  run(server: FuzzServer, testCase: Case): Promise<number>;
}

/** 2xx or 4xx: anything else (5xx, no answer) breaks the invariant. */
function assertAnswered(request: FuzzRequest, status: number, text: string): void {
  if (status >= 500 || status < 200 || (status >= 300 && status < 400)) {
    throw new InvariantBroken(`${request.method} ${request.path} answered ${status}: ${text.slice(0, 500)}`);
  }
}

function otlpTarget(
  cases: fc.Arbitrary<FuzzRequest & { describe(): string }>,
): Target<FuzzRequest & { describe(): string }> {
  return {
    cases,
    describe: (request) => request.describe(),
    run: async (server, request) => {
      const answer = await server.send(request);
      assertAnswered(request, answer.status, answer.text);
      return answer.status;
    },
  };
}

function restTarget(ids: IdPool): Target<RestCase> {
  return {
    cases: restCases,
    describe: (testCase) => describeValue(testCase),
    run: async (server, testCase) => {
      const request = restRequest(testCase, ids);
      const before = await server.stateCounts();
      const answer = await server.send(request);
      assertAnswered(request, answer.status, answer.text);
      ids.collect(answer.text);
      if (answer.status >= 400) {
        const after = await server.stateCounts();
        if (after !== before) {
          throw new InvariantBroken(
            `${request.method} ${request.path} was refused (${answer.status}: ${answer.text.slice(0, 300)}) yet changed the store: ${before} -> ${after}`,
          );
        }
      }
      return answer.status;
    },
  };
}

const sqlTarget: Target<SqlCase> = {
  cases: sqlCases,
  describe: (testCase) => describeValue(testCase),
  run: async (server, { sql, format, forbidden }) => {
    const request: FuzzRequest = {
      method: 'POST',
      path: '/v1/agl/query',
      headers: { 'content-type': 'application/json' },
      body: Buffer.from(JSON.stringify({ sql, format })),
    };
    await server.derive(); // the deriver writes derived rows: done first, so that only the query could change the store
    const before = await server.storeStamp();
    const answer = await server.send(request);
    assertAnswered(request, answer.status, answer.text);
    if (forbidden && answer.status < 300)
      throw new InvariantBroken(`a statement that writes or reads outside the store was run (${answer.status})`);
    if ((await server.storeStamp()) !== before)
      throw new InvariantBroken(
        `the query changed the store (answered ${answer.status}: ${answer.text.slice(0, 300)})`,
      );
    return answer.status;
  },
};

/** Ids for the call targets, read from the store again every 100 cases (it grows as they run). */
function callIdsOf(server: FuzzServer): () => Promise<CallIds> {
  let ids: CallIds | undefined;
  let uses = 0;
  return async () => {
    if (ids === undefined || ++uses % 100 === 0) ids = await server.callIds();
    return ids;
  };
}

function anthropicTarget(server: FuzzServer): Target<AnthropicCase> {
  const ids = callIdsOf(server);
  return {
    cases: anthropicCases,
    describe: (testCase) => describeValue(testCase),
    run: async (server, testCase) => {
      const request = anthropicRequest(testCase, await ids());
      const answer = await server.send(request);
      server.forgetModelRequests();
      assertAnswered(request, answer.status, answer.text);
      return answer.status;
    },
  };
}

function feedbackTarget(server: FuzzServer): Target<FeedbackCase> {
  const ids = callIdsOf(server);
  // Run alone, the target finds no span to name (the Anthropic target records calls), and the
  // server refuses every case: it records a few calls first.
  let recorded: Promise<void> | undefined;
  return {
    cases: feedbackCases,
    describe: (testCase) => describeValue(testCase),
    run: async (server, testCase) => {
      recorded ??= server.callIds().then((found) => (found.spans.length > 0 ? undefined : server.recordCalls(8)));
      await recorded;
      const request = feedbackRequest(testCase, await ids());
      // A stat of the files, not a count of the annotations: any commit changes them, and the
      // count, a query per case, held the target to 27 cases/s.
      const before = await server.storeStamp();
      const answer = await server.send(request);
      assertAnswered(request, answer.status, answer.text);
      if (answer.status >= 400 && (await server.storeStamp()) !== before)
        throw new InvariantBroken(`feedback was refused (${answer.status}: ${answer.text.slice(0, 300)}) yet stored`);
      return answer.status;
    },
  };
}

/** Runs the targets one after the other against one in-process agl server; never throws for a broken invariant. */
export async function runFuzz(options: FuzzOptions): Promise<TargetReport[]> {
  const seeds = await loadSeeds();
  // Each target has a case type of its own: a target is kept as the run it makes.
  const runOf =
    <Case>(make: (server: FuzzServer) => Target<Case>) =>
    (name: TargetName, server: FuzzServer, runOptions: FuzzOptions) =>
      runTarget(name, make(server), server, runOptions);
  const targets: Record<TargetName, ReturnType<typeof runOf>> = {
    'otlp-protobuf': runOf(() => otlpTarget(protobufRequests(seeds))),
    'otlp-json': runOf(() => otlpTarget(jsonRequests(seeds))),
    rest: runOf(() => restTarget(new IdPool())),
    sql: runOf(() => sqlTarget),
    anthropic: runOf(anthropicTarget),
    feedback: runOf(feedbackTarget),
  };
  const names = options.targets ?? TARGETS;
  const server = await FuzzServer.start();
  const reports: TargetReport[] = [];
  try {
    for (const name of names) {
      const report = await targets[name](name, server, { ...options, runs: Math.ceil(options.runs / names.length) });
      options.onReport?.(report);
      reports.push(report);
    }
  } finally {
    await server.close();
  }
  return reports;
}

/** The fewest cases between two checks when checkEvery is left out. */
const AUTO_CHECK_MIN = 50;
/** Time spent on cases for each unit of time spent checking, when checkEvery is left out. */
const AUTO_CHECK_RATIO = 9;

async function runTarget<Case>(
  name: TargetName,
  target: Target<Case>,
  server: FuzzServer,
  options: FuzzOptions,
): Promise<TargetReport> {
  const fixedEvery = options.path !== undefined ? 1 : options.checkEvery;
  let casesSince = Date.now();
  const checkDue = (pending: number) =>
    fixedEvery !== undefined
      ? pending >= Math.max(1, fixedEvery)
      : pending >= AUTO_CHECK_MIN && Date.now() - casesSince >= AUTO_CHECK_RATIO * server.lastCheckMs;
  const maxShrinks = options.maxShrinks ?? 200;
  const report: TargetReport = { target: name, tried: 0, rejected: 0, broken: 0, seconds: 0, failures: [] };
  const kinds = new Map<string, Failure>();
  let pending: Case[] = [];
  let lastFailure: Failure | undefined;
  let shrinkRuns = 0;
  const started = Date.now();
  // A timer, not a count of cases: a slow case or check is when a word of progress matters most.
  const progress = setInterval(() => {
    report.seconds = (Date.now() - started) / 1000;
    options.onProgress?.(report);
  }, options.progressEveryMs ?? 10_000);

  const property = fc.asyncProperty(target.cases, async (testCase) => {
    if (lastFailure !== undefined && ++shrinkRuns > maxShrinks) return;
    const shrinking = lastFailure !== undefined;
    if (!shrinking) report.tried++;
    pending.push(testCase);
    try {
      const status = await target.run(server, testCase);
      if (status >= 400 && !shrinking) report.rejected++;
      if (shrinking || checkDue(pending.length) || report.tried === options.runs) {
        await server.checkReads();
        casesSince = Date.now();
        pending = [];
      }
    } catch (error) {
      if (!(error instanceof InvariantBroken)) throw error;
      if (!shrinking) report.broken++;
      const failure =
        pending.length > 1
          ? await blame(target, server, pending, error)
          : { message: error.message, example: target.describe(testCase), replayable: true };
      pending = [];
      await server.restart();
      if (options.keepGoing) {
        const kind = failureKind(failure.message);
        const known = kinds.get(kind);
        if (!known || failure.example.length < known.example.length) kinds.set(kind, failure);
        return;
      }
      lastFailure = failure;
      throw error;
    }
  });

  const result = await fc
    .check(property, { numRuns: options.runs, seed: options.seed, path: options.path, endOnFailure: maxShrinks === 0 })
    .finally(() => clearInterval(progress));
  if (result.errorInstance && !(result.errorInstance instanceof InvariantBroken)) throw result.errorInstance;
  if (result.failed && lastFailure)
    report.failures.push({
      ...lastFailure,
      seed: result.seed,
      path: result.counterexamplePath ?? undefined,
      runs: options.runs,
    });
  for (const failure of kinds.values()) report.failures.push({ ...failure, seed: options.seed, runs: options.runs });
  report.seconds = (Date.now() - started) / 1000;
  return report;
}

/**
 * The first of `cases` after which the store is broken, replayed in order on fresh databases
 * (bisection: each round replays a prefix and checks once).
 */
async function blame<Case>(
  target: Target<Case>,
  server: FuzzServer,
  cases: Case[],
  error: InvariantBroken,
): Promise<Failure> {
  /** The invariant `list` breaks, replayed on a fresh database; undefined when it breaks none. */
  const brokenBy = async (list: Case[]): Promise<InvariantBroken | undefined> => {
    await server.restart();
    try {
      for (const testCase of list) await target.run(server, testCase);
      await server.checkReads();
      return undefined;
    } catch (caseError) {
      if (!(caseError instanceof InvariantBroken)) throw caseError;
      return caseError;
    }
  };
  let failure: InvariantBroken | undefined;
  let low = 0;
  let high = cases.length - 1;
  while (low < high) {
    const middle = (low + high) >> 1;
    const broken = await brokenBy(cases.slice(0, middle + 1));
    if (broken) {
      failure = broken;
      high = middle;
    } else {
      low = middle + 1;
    }
  }
  // No prefix but the whole list was tried: the whole list must break too.
  if (low === cases.length - 1) failure = await brokenBy(cases);
  if (!failure) {
    return {
      message: `${error.message} (replayed on a fresh database, the last ${cases.length} cases break nothing)`,
      example: cases.map(target.describe).join('\n'),
      replayable: false,
    };
  }
  const culprit = cases[low];
  const alone = low > 0 ? await brokenBy([culprit]) : failure;
  if (!alone) {
    return {
      message: `${failure.message} (only after the ${low} case(s) before it since the last good check)`,
      example: cases
        .slice(0, low + 1)
        .map(target.describe)
        .join('\n'),
      replayable: false,
    };
  }
  return { message: alone.message, example: target.describe(culprit), replayable: culprit === cases.at(-1) };
}

/** A failure message without its ids, numbers and quoted values: failures of one kind read alike. */
function failureKind(message: string): string {
  return message
    .split('\n')[0]
    .replace(/\/v1\/agl\/[^ ]*/g, (path) => path.replace(/\/[^/?]*[0-9a-f]{6,}[^/?]*|\?.*/g, '/ID'))
    .replace(/"[^"]*"/g, '"…"')
    .replace(/\d+/g, 'N')
    .slice(0, 160);
}

/** JSON of a case, long strings cut, and only the start and end of a long text (deep values are long). */
function describeValue(value: unknown): string {
  const text = jsonBytes(value, (item) => {
    if (typeof item === 'string' && item.length > 200) return `${item.slice(0, 20)}... (${item.length} chars)`;
    if (item instanceof Uint8Array)
      return `bytes ${JSON.stringify(Buffer.from(item).subarray(0, 300).toString('latin1'))} (${item.length} bytes)`;
    return item;
  }).toString('utf8');
  return text.length > 3000 ? `${text.slice(0, 2000)} ...(${text.length} chars in all)... ${text.slice(-500)}` : text;
}

/** The lines that tell what a run found and how to replay a failure. */
export function formatReport(reports: readonly TargetReport[]): string {
  const lines: string[] = [];
  for (const r of reports) {
    lines.push(
      `${r.target}: tried ${r.tried}, rejected (4xx) ${r.rejected}, broke an invariant ${r.broken} (${r.seconds.toFixed(1)} s, ${(r.tried / Math.max(r.seconds, 0.001)).toFixed(1)} cases/s)`,
    );
    for (const failure of r.failures) {
      lines.push(`  FAILED: ${failure.message}`, `  case: ${failure.example}`);
      lines.push(
        failure.replayable && failure.path !== undefined
          ? `  replay: npm run fuzz -- --target ${r.target} --seed ${failure.seed} --path ${failure.path}`
          : `  replay: npm run fuzz -- --target ${r.target} --seed ${failure.seed} --runs ${failure.runs} --check-every 1`,
      );
    }
  }
  return lines.join('\n');
}
