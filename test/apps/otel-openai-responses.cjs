// An app on the official @opentelemetry/instrumentation-openai with the newest GenAI conventions
// (OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental): for OpenAI's Responses API it
// records the system instructions on the span and the messages as
// gen_ai.client.inference.operation.details log records, structured values, tied to the span by
// trace and span id. No agl in the process. Prints the answers' ids.
const { NodeSDK } = require('@opentelemetry/sdk-node');
const { OpenAIInstrumentation } = require('@opentelemetry/instrumentation-openai');

const instrumentation = new OpenAIInstrumentation();
const sdk = new NodeSDK({ instrumentations: [instrumentation] });
sdk.start();
// openai 6, patched by hand: see otel-openai-chat.cjs.
const OpenAI = require('openai6');
for (const definition of instrumentation.getModuleDefinitions())
  definition.patch(OpenAI, require('openai6/version').VERSION);

async function main() {
  const client = new OpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: 'test-key' });
  const answer = await client.responses.create({
    model: 'test-model',
    instructions: 'Answer in one word.',
    input: [{ role: 'user', content: 'What colour is the sky?' }],
    temperature: 0.25,
    max_output_tokens: 40,
  });
  await sdk.shutdown();
  console.log(JSON.stringify([answer.id]));
}
main();
