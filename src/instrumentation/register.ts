/**
 * `node --import agl/register app.js`: records the app's LLM calls, HTTP calls, LangChain runs
 * and emitted rewards as OpenTelemetry spans and sends them to `agl serve`, with no change to the
 * app. Loaded before the app, so the fetch wrapper and the module hook are in place first.
 */
import { startTelemetry } from './telemetry.js';

startTelemetry();
