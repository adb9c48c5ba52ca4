// An app that exports OTLP only, as the OpenTelemetry docs set one up: @opentelemetry/sdk-node
// configured by the OTEL_* environment, the official @opentelemetry/instrumentation-openai, no
// agl and no rollout ids. It asks the three questions of argv and prints the answers' ids.
const { NodeSDK } = require('@opentelemetry/sdk-node');
const { OpenAIInstrumentation } = require('@opentelemetry/instrumentation-openai');

const instrumentation = new OpenAIInstrumentation();
const sdk = new NodeSDK({ instrumentations: [instrumentation] });
sdk.start();
// The instrumentation patches openai >=4.19 <7; the project's `openai` is 7, so the app uses
// openai 6, installed as `openai6`. The require hook knows a package by its folder's name, so the
// instrumentation's own patch is applied to it here, as the hook would for a folder `openai`.
const OpenAI = require('openai6');
for (const definition of instrumentation.getModuleDefinitions())
  definition.patch(OpenAI, require('openai6/version').VERSION);

async function main() {
  const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'test-key' });
  const ids = [];
  for (const question of ['first question', 'second question', 'third question']) {
    const answer = await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: question }],
    });
    ids.push(answer.id);
  }
  await sdk.shutdown();
  console.log(JSON.stringify(ids));
}
main();
