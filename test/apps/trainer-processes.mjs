// A Trainer with the processes strategy, as a user's script: node trainer-processes.mjs DB AGENT TASKS.jsonl
import { Baseline } from 'agl/algorithms';
import { Trainer } from 'agl/trainer';

const [db, agent, tasks] = process.argv.slice(2);
const trainer = new Trainer({ algorithm: new Baseline(), strategy: 'processes', nRunners: 2, db, graceSeconds: 2 });
console.log('fitting');
const result = await trainer.fit(agent, { train: tasks });
console.log(`done ${JSON.stringify({ total: result.total, succeeded: result.succeeded })}`);
