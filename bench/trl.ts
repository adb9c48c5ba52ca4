import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter, once } from 'node:events';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { CLI, fileRows, freePort, newTempDir, removeDir, ROOT } from '../test/support/helpers.js';
import { percentile, sized, type Benchmark, type Figure, type Size } from './figures.js';

// One GRPO step of examples/trl-grpo (TRL's GRPOTrainer with LoRA, the policy server in its
// process) against the same step of examples/grpo-trainer's own loop (train.py, full fine-tune,
// weights saved and reloaded by model_server.py), both fed by `agl train grpo` over HTTP with
// the same agent, tasks, sizes and tiny model. The trainers report their step's timing as
// metrics of the acknowledgement (agl_trainer's agl/wait_seconds, agl/decode_seconds,
// agl/update_seconds); agl's step record (training_steps) has the rest.

const PYTHON = join(ROOT, '.venv', 'bin', 'python');
const EXAMPLES = join(ROOT, 'examples');
const AGENT = join(EXAMPLES, 'grpo-trainer', 'agent.mjs');
const TASKS = join(EXAMPLES, 'grpo-trainer', 'train.jsonl');
const LOOPS = ['trl', 'own'] as const;
/** A run of a loop that takes longer than this is stuck (a full one takes about a minute). */
const RUN_SECONDS = 600;
type Loop = (typeof LOOPS)[number];

interface Sizes {
  readonly batchSize: number;
  readonly groupSize: number;
  /** Steps per run; the first is a warm-up, left out. */
  readonly steps: number;
  /** Runs of each loop, taking turns (TRL, own, TRL, own ...). */
  readonly runs: number;
}

/** One measured step, in seconds. */
interface Step {
  readonly step: number;
  readonly rollouts: number;
  readonly handoff: number;
  readonly update: number;
  readonly other: number;
  readonly total: number;
  /** Parts of the hand-off: agl building the batch, the transfer, the trainer's tensors. */
  readonly build: number;
  readonly transfer: number;
  readonly decode: number;
}

/** A child process whose output is kept, for the lines it prints and for the error when it fails. */
class Child {
  private output = '';
  private ended = false;
  /** Emits `change` on output and on exit. */
  private readonly changes = new EventEmitter();
  readonly exited: Promise<number | null>;

  private constructor(
    readonly name: string,
    private readonly process: ChildProcess,
  ) {
    const keep = (chunk: Buffer) => {
      this.output = (this.output + chunk.toString()).slice(-200_000);
      this.changes.emit('change');
    };
    process.stdout?.on('data', keep);
    process.stderr?.on('data', keep);
    this.exited = new Promise((resolve) =>
      process.once('exit', (code) => {
        this.ended = true;
        this.changes.emit('change');
        resolve(code);
      }),
    );
  }

  static start(name: string, command: string, args: string[]): Child {
    // PYTHONPATH: the checkout's agl_trainer, whichever checkout made the virtual environment.
    // One torch thread a process: with two on the shared cores, a step of the tiny model waited
    // on its other thread most of the time (the own loop's update took 0.05-1.8 s from step to step).
    const env = {
      ...process.env,
      PYTHONPATH: join(ROOT, 'python', 'src'),
      PYTHONUNBUFFERED: '1',
      OMP_NUM_THREADS: '1',
    };
    return new Child(name, spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] }));
  }

  /** The rest of the first line that holds `text`, once printed; fails when the process ends first. */
  async after(text: string): Promise<string> {
    for (;;) {
      const at = this.output.indexOf(text);
      if (at >= 0)
        return this.output
          .slice(at + text.length)
          .split('\n')[0]
          .trim();
      if (this.ended) throw new Error(`${this.name} ended before it printed "${text}":\n${this.tail()}`);
      await once(this.changes, 'change');
    }
  }

  /** Waits for the process to end; fails unless it ends with 0. */
  async succeeded(): Promise<void> {
    const code = await this.exited;
    if (code !== 0) throw new Error(`${this.name} exited with ${code}:\n${this.tail()}`);
  }

  stop(): void {
    if (this.process.exitCode === null && this.process.signalCode === null) this.process.kill('SIGKILL');
  }

  tail(): string {
    return this.output.slice(-4000);
  }
}

/** Makes .venv when missing (TRL and the versions tested); a failure names the script. */
async function pythonEnvironment(): Promise<void> {
  const script = Child.start('scripts/python-env.sh --install', 'bash', [
    join(ROOT, 'scripts', 'python-env.sh'),
    '--install',
  ]);
  try {
    await script.succeeded();
  } catch (error) {
    throw new Error(`the TRL benchmark needs .venv: ${(error as Error).message}`);
  }
}

/** Sizes both loops share: agl's and the trainer's. */
const sizeArgs = (sizes: Sizes) => [
  '--steps',
  String(sizes.steps),
  '--batch-size',
  String(sizes.batchSize),
  '--group-size',
  String(sizes.groupSize),
];

/** `agl train grpo` over HTTP on `port`, its rollouts on the model at `endpoint`. */
function startAgl(dir: string, port: number, endpoint: string, sizes: Sizes): Child {
  return Child.start('agl train grpo', process.execPath, [
    CLI,
    ...['train', 'grpo', '--agent', AGENT, '--train', TASKS, '--llm-model', 'tiny', '--llm-endpoint', endpoint],
    ...['--db', join(dir, 'agl.duckdb'), '--port', String(port), '--aggregation', 'trajectory'],
    ...['--runners', String(Math.min(8, sizes.batchSize * sizes.groupSize)), ...sizeArgs(sizes)],
  ]);
}

/** One run of a loop to its end, its processes stopped after it, or when it fails or is stuck. */
async function runLoop(loop: Loop, dir: string, sizes: Sizes): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const stuck = new Promise<never>((_, reject) => {
    const error = new Error(`the ${loop} loop did not end within ${RUN_SECONDS} s`);
    timer = setTimeout(() => reject(error), RUN_SECONDS * 1000);
  });
  const unlessStuck = <T>(waiting: Promise<T>) => Promise.race([waiting, stuck]);
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const children: Child[] = [];
  const start = (child: Child) => {
    children.push(child);
    return child;
  };
  try {
    if (loop === 'trl') {
      const trainer = start(
        Child.start('examples/trl-grpo/train.py', PYTHON, [
          join(EXAMPLES, 'trl-grpo', 'train.py'),
          ...['--url', url, '--port', '0', '--out', join(dir, 'trl-checkpoints'), '--idle-timeout', '300'],
          ...sizeArgs(sizes),
        ]),
      );
      const endpoint = await unlessStuck(trainer.after('policy server: tiny at '));
      const agl = start(startAgl(dir, port, endpoint, sizes));
      await unlessStuck(Promise.all([trainer.succeeded(), agl.succeeded()]));
    } else {
      const server = start(
        Child.start('examples/grpo-trainer/model_server.py', PYTHON, [
          join(EXAMPLES, 'grpo-trainer', 'model_server.py'),
          ...['--port', '0'],
        ]),
      );
      const endpoint = await unlessStuck(server.after('model server: tiny (version 0) at '));
      const agl = start(startAgl(dir, port, endpoint, sizes));
      await unlessStuck(agl.after(`${url}/v1/agl/training/batches/next`));
      const trainer = start(
        Child.start('examples/grpo-trainer/train.py', PYTHON, [
          join(EXAMPLES, 'grpo-trainer', 'train.py'),
          ...['--url', url, '--model-server', endpoint.replace(/\/v1$/, ''), '--steps', String(sizes.steps)],
          ...['--out', join(dir, 'checkpoints'), '--idle-timeout', '300'],
        ]),
      );
      await unlessStuck(Promise.all([trainer.succeeded(), agl.succeeded()]));
    }
  } finally {
    clearTimeout(timer);
    for (const child of children.reverse()) child.stop();
    await Promise.all(children.map((child) => child.exited));
  }
}

const seconds = (metrics: Record<string, unknown>, key: string): number => {
  const value = metrics[key];
  if (typeof value !== 'number')
    throw new Error(`the trainer's acknowledgement has no ${key}: ${JSON.stringify(metrics)}`);
  return value;
};

/**
 * The steps of a run after the warm-up, from agl's step records. The trainer's wait for a batch
 * began as agl's step did (both right after the previous acknowledgement): what of it is not
 * agl's rollouts and build is the transfer (Arrow serialization, HTTP, pyarrow, and agl's record
 * of the step before).
 */
async function measuredSteps(db: string, sizes: Sizes): Promise<Step[]> {
  const rows = await fileRows(
    db,
    `SELECT step, status, rollout_seconds, build_seconds, metrics::VARCHAR AS metrics,
       date_diff('microsecond', start_time, end_time) / 1e6 AS total FROM training_steps ORDER BY step`,
  );
  if (rows.length !== sizes.steps || rows.some((row) => row.status !== 'trained'))
    throw new Error(
      `expected ${sizes.steps} trained steps, found ${JSON.stringify(rows.map((r) => [r.step, r.status]))}`,
    );
  return rows.slice(1).map((row) => {
    const metrics = JSON.parse(String(row.metrics)) as Record<string, unknown>;
    const rollouts = Number(row.rollout_seconds);
    const build = Number(row.build_seconds);
    const decode = seconds(metrics, 'agl/decode_seconds');
    const update = seconds(metrics, 'agl/update_seconds');
    const transfer = Math.max(0, seconds(metrics, 'agl/wait_seconds') - rollouts - build);
    const total = Number(row.total);
    const handoff = build + transfer + decode;
    return {
      step: Number(row.step),
      rollouts,
      handoff,
      update,
      other: total - rollouts - handoff - update,
      total,
      build,
      transfer,
      decode,
    };
  });
}

const PARTS = ['rollouts', 'handoff', 'update', 'other', 'total'] as const;
const LABELS: Record<(typeof PARTS)[number], string> = {
  rollouts: 'rollouts',
  handoff: 'batch hand-off',
  update: 'update',
  other: 'other (checkpoint or weight reload, logging, acknowledgement)',
  total: 'whole step',
};

export const trl: Benchmark = {
  name: 'trl',
  description:
    'one GRPO step (2 tasks x 8 rollouts, the tiny model) through TRL with LoRA against the own loop of examples/grpo-trainer: rollouts, hand-off, update',
  async run(size: Size): Promise<Figure[]> {
    const sizes = sized<Sizes>(
      size,
      { batchSize: 2, groupSize: 8, steps: 5, runs: 3 },
      { batchSize: 1, groupSize: 2, steps: 2, runs: 1 },
    );
    await pythonEnvironment();
    const dir = await newTempDir();
    const steps: Record<Loop, Step[]> = { trl: [], own: [] };
    try {
      for (let run = 0; run < sizes.runs; run++)
        for (const loop of LOOPS) {
          const runDir = join(dir, `${loop}-${run}`);
          await mkdir(runDir);
          await runLoop(loop, runDir, sizes);
          const measured = await measuredSteps(join(runDir, 'agl.duckdb'), sizes);
          console.error(
            `  ${loop} run ${run + 1}, steps 2-${sizes.steps} (rollouts/hand-off/update/other s): ${measured.map((s) => [s.rollouts, s.handoff, s.update, s.other].map((v) => v.toFixed(2)).join('/')).join(', ')}`,
          );
          steps[loop].push(...measured);
        }
    } finally {
      await removeDir(dir);
    }
    const medians = (loop: Loop, part: keyof Step) =>
      percentile(
        steps[loop].map((step) => step[part]).sort((a, b) => a - b),
        50,
      );
    for (const loop of LOOPS)
      console.error(
        `  ${loop}: ${steps[loop].length} steps; median s: ${PARTS.map((part) => `${part} ${medians(loop, part).toFixed(3)}`).join(', ')}; hand-off = build ${medians(loop, 'build').toFixed(3)} + transfer ${medians(loop, 'transfer').toFixed(3)} + decode ${medians(loop, 'decode').toFixed(3)}`,
      );
    const figure = (name: string, value: number, unit: string): Figure => ({
      name,
      value: Number(value.toFixed(unit === 'ratio' ? 2 : 3)),
      unit,
      target: '',
    });
    // "other" is a remainder near 0 on either side: a ratio of it says nothing.
    return PARTS.flatMap((part) => [
      figure(`trl step: ${LABELS[part]}`, medians('trl', part), 's'),
      figure(`own loop step: ${LABELS[part]}`, medians('own', part), 's'),
      ...(part === 'other'
        ? []
        : [figure(`trl / own: ${LABELS[part]}`, medians('trl', part) / medians('own', part), 'ratio')]),
    ]);
  },
};
