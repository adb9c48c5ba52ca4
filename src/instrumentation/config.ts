import { type GenAiRecording, genAiRecordingOf } from '../otlp/genai-documents.js';

/**
 * `agl/register`'s settings, from the environment. Standard `OTEL_*` variables are honoured by
 * the OpenTelemetry SDK itself (service name, resource attributes, headers, OTEL_SDK_DISABLED,
 * OTEL_BSP_*); these are agl's own and the few standard ones agl decides on.
 */
export interface RegisterConfig {
  /** Where spans go: the OTLP/HTTP traces URL. */
  readonly tracesUrl: string;
  /** Where the app's OpenTelemetry log records go (GenAI events among them): the logs URL. */
  readonly logsUrl: string;
  readonly captureContent: boolean;
  /** The GenAI documents recorded besides the exchange, for other OpenTelemetry backends. */
  readonly genAi: GenAiRecording;
  readonly returnTokenIds: boolean;
  readonly instrumentations: ReadonlySet<InstrumentationName>;
  /**
   * Whether LLM call spans need the SDK's span machinery: a sampler other than the default, or
   * attribute limits, are the SDK's to apply (call-span.ts applies neither).
   */
  readonly sdkCallSpans: boolean;
  readonly rolloutId?: string;
  readonly attemptId?: string;
  readonly token?: string;
}

/** agl's own recorders. */
const OWN = ['fetch', 'http', 'langchain'] as const;
/** Other names users know agl's own by (OpenTelemetry's package names). */
const ALIASES: Record<string, (typeof OWN)[number]> = { undici: 'fetch', openai: 'fetch', https: 'http' };

/**
 * The library instrumentations of `@opentelemetry/auto-instrumentations-node` agl starts, named as
 * OTEL_NODE_*_INSTRUMENTATIONS name them (their package's name after `instrumentation-`). Its
 * `undici`, `openai` and `http` are not among them: agl's fetch capture and its own http
 * instrumentation record those, and two recorders would double each call.
 */
export const LIBRARY_INSTRUMENTATIONS = [
  'amqplib',
  'aws-lambda',
  'aws-sdk',
  'bunyan',
  'cassandra-driver',
  'connect',
  'cucumber',
  'dataloader',
  'dns',
  'express',
  'fs',
  'generic-pool',
  'graphql',
  'grpc',
  'hapi',
  'host-metrics',
  'ioredis',
  'kafkajs',
  'knex',
  'koa',
  'lru-memoizer',
  'memcached',
  'mongodb',
  'mongoose',
  'mysql',
  'mysql2',
  'nestjs-core',
  'net',
  'oracledb',
  'pg',
  'pino',
  'redis',
  'restify',
  'router',
  'runtime-node',
  'socket.io',
  'tedious',
  'winston',
] as const;

/**
 * Off unless OTEL_NODE_ENABLED_INSTRUMENTATIONS names them: a span per file operation, lookup or
 * socket would bury the agent's steps, and agl keeps no metrics (host, runtime).
 */
const OFF_BY_DEFAULT: readonly InstrumentationName[] = ['fs', 'dns', 'net', 'host-metrics', 'runtime-node'];

export type InstrumentationName = (typeof OWN)[number] | (typeof LIBRARY_INSTRUMENTATIONS)[number];
const KNOWN: readonly string[] = [...OWN, ...LIBRARY_INSTRUMENTATIONS];

export class ConfigError extends Error {}

const off = (value: string | undefined) => value !== undefined && /^(0|false|no|off)$/i.test(value.trim());
const on = (value: string | undefined) => value !== undefined && /^(1|true|yes|on)$/i.test(value.trim());

function instrumentationList(variable: string, value: string): InstrumentationName[] {
  return value
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean)
    .map((name) => {
      const known = ALIASES[name] ?? KNOWN.find((n) => n === name);
      if (!known)
        throw new ConfigError(
          `${variable}: unknown instrumentation "${name}" (agl's: ${OWN.join(', ')}; libraries: ${LIBRARY_INSTRUMENTATIONS.join(', ')})`,
        );
      return known as InstrumentationName;
    });
}

/**
 * What OTEL_NODE_ENABLED_INSTRUMENTATIONS and OTEL_NODE_DISABLED_INSTRUMENTATIONS leave on, as
 * the auto-instrumentations read them: the enabled list, if given, is all that is on (the quiet
 * ones too when named); the disabled list is taken off that.
 */
function enabledInstrumentations(env: NodeJS.ProcessEnv): Set<InstrumentationName> {
  const enabled = env.OTEL_NODE_ENABLED_INSTRUMENTATIONS
    ? new Set(instrumentationList('OTEL_NODE_ENABLED_INSTRUMENTATIONS', env.OTEL_NODE_ENABLED_INSTRUMENTATIONS))
    : new Set((KNOWN as InstrumentationName[]).filter((name) => !OFF_BY_DEFAULT.includes(name)));
  if (env.OTEL_NODE_DISABLED_INSTRUMENTATIONS)
    for (const name of instrumentationList(
      'OTEL_NODE_DISABLED_INSTRUMENTATIONS',
      env.OTEL_NODE_DISABLED_INSTRUMENTATIONS,
    ))
      enabled.delete(name);
  return enabled;
}

/** `url` once it is an http(s) URL; `from` names the variable it came from. */
function checkedUrl(url: string, from: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ConfigError(`the collector endpoint is not a URL: "${url}" (from ${from})`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')
    throw new ConfigError(`the collector endpoint must be http or https: "${url}" (from ${from})`);
  return url;
}

export function readConfig(env: NodeJS.ProcessEnv = process.env): RegisterConfig {
  const base = (env.AGL_ENDPOINT ?? env.OTEL_EXPORTER_OTLP_ENDPOINT ?? 'http://127.0.0.1:4318').replace(/\/+$/, '');
  // AGL_ENDPOINT names agl's server, which takes both signals; the standard per-signal variables
  // apply without it.
  const baseFrom = env.AGL_ENDPOINT !== undefined ? 'AGL_ENDPOINT' : 'OTEL_EXPORTER_OTLP_ENDPOINT';
  const signalUrl = (signal: 'TRACES' | 'LOGS') => {
    const own = `OTEL_EXPORTER_OTLP_${signal}_ENDPOINT`;
    return env.AGL_ENDPOINT === undefined && env[own]
      ? checkedUrl(env[own], own)
      : checkedUrl(`${base}/v1/${signal.toLowerCase()}`, baseFrom);
  };
  const tracesUrl = signalUrl('TRACES');
  const logsUrl = signalUrl('LOGS');

  const instrumentations = enabledInstrumentations(env);
  const sampler = env.OTEL_TRACES_SAMPLER?.trim();
  const limits = [
    'OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT',
    'OTEL_ATTRIBUTE_COUNT_LIMIT',
    'OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT',
    'OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT',
  ];
  const sdkCallSpans =
    (sampler !== undefined && sampler !== '' && sampler !== 'parentbased_always_on') ||
    limits.some((name) => env[name]);
  const contentSetting = env.AGL_CAPTURE_CONTENT ?? env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT;
  return {
    tracesUrl,
    logsUrl,
    captureContent: !off(contentSetting) && contentSetting?.trim().toUpperCase() !== 'NO_CONTENT',
    genAi: genAiRecordingOf(env),
    returnTokenIds: on(env.AGL_RETURN_TOKEN_IDS),
    instrumentations,
    sdkCallSpans,
    rolloutId: env.AGL_ROLLOUT_ID || undefined,
    attemptId: env.AGL_ATTEMPT_ID || undefined,
    token: env.AGL_TOKEN || undefined,
  };
}
