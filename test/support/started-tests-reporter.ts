/**
 * A node:test reporter that writes a line per test as it starts and ends (`start <nesting>
 * <name>`, `end <nesting> <name>`, names as JSON), for run-test-files.ts: when a file runs past its time, the
 * tests started and not ended say what it was doing.
 */
interface TestEvent {
  readonly type: string;
  readonly data: { readonly name?: string; readonly nesting?: number };
}

export default async function* startedTestsReporter(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  for await (const event of source) {
    const { name, nesting = 0 } = event.data;
    // dequeue and complete come as tests run; start, pass and fail come in the order tests are defined, later.
    if (event.type === 'test:dequeue') yield `start ${nesting} ${JSON.stringify(name)}\n`;
    else if (event.type === 'test:complete') yield `end ${nesting} ${JSON.stringify(name)}\n`;
  }
}
