import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { test } from 'node:test';
import { freePort, runCli, tempDir } from '../support/helpers.js';

// What a person sees when a command goes wrong: one line, `agl: <what and what to do>`, the
// documented exit code (2 for a command line that cannot run, 1 for a condition to fix), and no
// stack trace unless --debug or AGL_DEBUG=1 asks for one.

interface Case {
  readonly args: string[];
  readonly code: 1 | 2;
  readonly says: RegExp;
}

/** Every subcommand with a wrong or missing argument, a missing file, an unreachable server. */
function cases(dir: string, closedPort: number): Case[] {
  const db = join(dir, 'none.duckdb');
  const tasks = join(dir, 'tasks.jsonl');
  const closed = `http://127.0.0.1:${closedPort}`;
  return [
    { args: ['srve'], code: 2, says: /^agl: unknown command "srve"; the commands are demo, serve, .*\(agl --help\)$/ },
    {
      args: ['demo', '--rounds'],
      code: 2,
      says: /^agl: unknown option --rounds \(agl demo --help lists the options\)$/,
    },
    { args: ['serve', '--port'], code: 2, says: /^agl: --port needs a value \(agl serve --help/ },
    { args: ['serve', '--port', 'x'], code: 2, says: /^agl: --port must be an integer from 0 to 65535, not "x"$/ },
    { args: ['store', '--max-body', '12q'], code: 2, says: /^agl: --max-body must be a size/ },
    { args: ['query'], code: 2, says: /^agl: give the SQL as one argument \(in quotes\) \(agl query --help/ },
    { args: ['query', 'SELECT 1', '--db', db], code: 2, says: /^agl: no database at .*none\.duckdb/ },
    { args: ['query', 'SELECT 1', '--url', closed], code: 2, says: /^agl: cannot reach the agl server at / },
    { args: ['query', 'SELECT 1', '--format', 'xml'], code: 2, says: /^agl: --format must be one of / },
    { args: ['export'], code: 2, says: /^agl: say what to export: messages, triplets or trajectories/ },
    { args: ['export', 'tuples', '--out', 'x.jsonl'], code: 2, says: /^agl: agl export knows messages, / },
    { args: ['export', 'messages', '--out', 'x.txt'], code: 2, says: /^agl: --out must end in \.jsonl/ },
    { args: ['export', 'messages', '--out', join(dir, 'x.jsonl'), '--url', closed], code: 2, says: /cannot reach/ },
    { args: ['runner'], code: 2, says: /^agl: give an agent module or --exec "<command>", one of them/ },
    {
      args: ['runner', '--exec', 'true', '--max-store-downtime', 'soon'],
      code: 2,
      says: /^agl: --max-store-downtime must be a duration above 0 such as 90s, 5m or 2h .*not "soon"$/,
    },
    { args: ['runner', '--agent', 'a.mjs'], code: 2, says: /^agl: unknown option --agent \(agl runner --help/ },
    { args: ['runner', join(dir, 'missing.mjs')], code: 1, says: /^agl: cannot find the module .*missing\.mjs$/ },
    { args: ['train'], code: 2, says: /^agl: name the algorithm: agl train apo\|gepa\|sft\|grpo/ },
    { args: ['train', 'ppo'], code: 2, says: /^agl: unknown algorithm "ppo"/ },
    {
      args: ['train', 'apo', '--agent', 'a.mjs', '--train', tasks, '--max-store-downtime', '0'],
      code: 2,
      says: /^agl: invalid apo options: --max-store-downtime must be a number > 0 \(given "0"\)$/,
    },
    {
      args: ['train', 'apo', '--agent', 'a.mjs', '--train', join(dir, 'missing.jsonl'), '--db', join(dir, 't.duckdb')],
      code: 1,
      says: /^agl: cannot open .*missing\.jsonl: no such file or directory$/,
    },
    {
      args: [
        'train',
        'sft',
        '--agent',
        join(dir, 'missing.mjs'),
        '--train',
        tasks,
        '--train-cmd',
        'true',
        '--db',
        join(dir, 's.duckdb'),
      ],
      code: 1,
      says: /^agl: cannot find the module .*missing\.mjs$/,
    },
    {
      args: [
        'train',
        'grpo',
        '--agent',
        'a.mjs',
        '--train',
        tasks,
        '--judge',
        'rubric.md',
        '--db',
        join(dir, 'g.duckdb'),
      ],
      code: 2,
      says: /^agl: judge needs judgeModel \(--judge-model\): the model that scores by the rubric$/,
    },
    { args: ['compact'], code: 2, says: /^agl: --spans-dir DIR is required/ },
    {
      args: ['compact', '--spans-dir', join(dir, 'nowhere')],
      code: 2,
      says: /^agl: --spans-dir .* is not a directory/,
    },
  ];
}

test('every command with bad input says one line, with no stack trace, and exits 2 or 1', async (t) => {
  const dir = await tempDir(t);
  await writeFile(join(dir, 'tasks.jsonl'), '{"question":"1+1"}\n');
  const all = cases(dir, await freePort());
  const results = await Promise.all(all.map(({ args }) => runCli(args, { cwd: dir })));
  for (const [i, { args, code, says }] of all.entries()) {
    const { stderr, code: exited } = results[i];
    const lines = stderr.split('\n').filter((line) => line !== '');
    const what = `agl ${args.join(' ')}: ${stderr}`;
    assert.equal(lines.length, 1, what);
    assert.doesNotMatch(stderr, /\n\s+at /, what);
    assert.match(lines[0], says, what);
    assert.equal(exited, code, what);
  }
});

test('--debug and AGL_DEBUG=1 add the stack trace after the line', async (t) => {
  const dir = await tempDir(t);
  const args = ['runner', join(dir, 'missing.mjs')];
  for (const result of [
    await runCli([...args, '--debug']),
    await runCli(args, { env: { ...process.env, AGL_DEBUG: '1' } }),
  ]) {
    const [first, ...rest] = result.stderr.split('\n');
    assert.match(first, /^agl: cannot find the module .*missing\.mjs$/);
    assert.match(rest.join('\n'), /\n\s+at /);
    assert.equal(result.code, 1);
  }
});

// The retrying client would pause 1 + 2 + 5 s before its line; the one-shot commands say at once
// that nothing listens. What a command takes beyond the CLI's own start (a run that fails on its
// arguments, timed beside it) is the wait a user sees; a single retry would make it over 1 s.
test('agl query --url and agl export --url to a closed port fail within 2 s, naming the URL', async (t) => {
  const dir = await tempDir(t);
  const closed = `http://127.0.0.1:${await freePort()}`;
  const timed = async (args: string[]) => {
    const started = performance.now();
    const result = await runCli(args);
    return { ...result, ms: performance.now() - started };
  };
  const [query, exported, start] = await Promise.all([
    timed(['query', 'SELECT 1', '--url', closed]),
    timed(['export', 'triplets', '--out', join(dir, 'x.jsonl'), '--url', closed]),
    timed(['query', 'SELECT 1', '--url', closed, '--format', 'xml']),
  ]);
  assert.match(start.stderr, /--format must be one of/);
  for (const result of [query, exported]) {
    assert.equal(result.code, 2, result.stderr);
    assert.match(result.stderr.trim(), new RegExp(`^agl: cannot reach the agl server at ${closed}: .*ECONNREFUSED`));
    assert.ok(result.ms - start.ms < 2000, `${Math.round(result.ms)} ms, the CLI's start ${Math.round(start.ms)} ms`);
  }
});
