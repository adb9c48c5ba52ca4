import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { APO, type APOResult } from '../src/algorithms/apo/index.js';
import { Trainer } from '../src/runtime/trainer.js';
import { newTempDir, removeDir } from '../test/support/helpers.js';
import { startOpenAITestServer } from '../test/support/openai-server.js';
import { sized, type Benchmark, type Figure, type Size } from './figures.js';

const ROUNDS = Number(process.env.AGL_BENCH_APO_ROUNDS ?? 2);
const AGENT = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'apps', 'trivial-agent.mjs');

/**
 * APO's own cost per candidate: a search with instant models (the test server answers the agent,
 * the critic, and an editor that writes a new prompt every time), its wall time less the time
 * spent waiting for rollouts and for critic and editor answers. What is left is APO's work:
 * resources versions, the queue, reading rewards and transcripts with SQL, building the
 * prompts, recording the run.
 */
export const apo: Benchmark = {
  name: 'apo',
  description: `APO, ${ROUNDS} rounds of beam 4 x branch 4 with instant models: its own time per candidate`,
  async run(size: Size): Promise<Figure[]> {
    const shape = sized(
      size,
      { rounds: ROUNDS, beamWidth: 4, branchFactor: 4 },
      { rounds: 1, beamWidth: 2, branchFactor: 2 },
    );
    let edits = 0;
    const models = await startOpenAITestServer({
      chat: (body) => {
        if (body.model === 'critic')
          return { content: '- Runs 1 and 2 answered at length. Change: ask for a short answer.' };
        if (body.model === 'editor')
          return { content: `<prompt>Answer briefly (variant ${++edits}). {question}</prompt>` };
        return undefined;
      },
    });
    const dir = await newTempDir();
    try {
      const result = await search(models.baseURL, join(dir, 'apo.duckdb'), shape);
      const candidates = result.candidates.filter((c) => c.parent !== null && c.rejected === null).length;
      const { seconds, rolloutSeconds, modelSeconds, rollouts } = result.cost.total;
      const own = seconds - rolloutSeconds - modelSeconds;
      return [
        {
          name: 'apo.candidates',
          value: candidates,
          unit: 'candidates',
          target: `>= ${shape.beamWidth * shape.branchFactor * shape.rounds}`,
        },
        { name: 'apo.rollouts', value: rollouts, unit: 'rollouts', target: '' },
        { name: 'apo.own_ms_per_candidate', value: Math.round((1000 * own) / candidates), unit: 'ms', target: '' },
        {
          name: 'apo.rollout_wait_ms_per_candidate',
          value: Math.round((1000 * rolloutSeconds) / candidates),
          unit: 'ms',
          target: '',
        },
        { name: 'apo.own_share', value: Number((own / seconds).toFixed(3)), unit: 'ratio', target: '' },
      ];
    } finally {
      await models.close();
      await removeDir(dir);
    }
  },
};

interface SearchShape {
  readonly rounds: number;
  readonly beamWidth: number;
  readonly branchFactor: number;
}

function search(baseURL: string, db: string, shape: SearchShape): Promise<APOResult> {
  const llm = {
    resource_type: 'llm' as const,
    endpoint: baseURL,
    model: 'agent',
    api_key: null,
    sampling_parameters: {},
  };
  const prompt = {
    resource_type: 'prompt_template' as const,
    template: 'Answer: {question}',
    engine: 'f-string' as const,
  };
  const algorithm = new APO({
    resources: { llm, prompt },
    ...shape,
    gradientBatchSize: 2,
    valBatchSize: 8,
    criticModel: 'critic',
    editorModel: 'editor',
    baseURL,
    apiKey: 'bench',
    log: () => {},
  });
  const tasks = (n: number, from: number) =>
    Array.from({ length: n }, (_, i) => ({ i: from + i, question: `q${from + i}` }));
  return new Trainer({ algorithm, nRunners: 16, db, progress: false }).fit(AGENT, {
    train: tasks(32, 0),
    val: tasks(16, 100),
  });
}
