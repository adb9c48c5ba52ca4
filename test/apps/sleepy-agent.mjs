// An agent module for runner fault tests: sleeps task.ms (or AGENT_SLEEP_MS), hangs forever on
// task.hang (ignoring its abort signal), throws on task.fail; its reward is 1.
import { rollout } from 'agl';

export default rollout(async (task) => {
  console.error(`sleepy-agent: ${JSON.stringify(task)}`);
  if (task.hang) await new Promise(() => {});
  if (task.fail) throw new Error(`cannot do ${task.fail}`);
  await new Promise((resolve) => setTimeout(resolve, task.ms ?? Number(process.env.AGENT_SLEEP_MS ?? 0)));
  return 1;
});
