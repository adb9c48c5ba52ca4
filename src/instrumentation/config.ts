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
  readonly returnTokenIds: boolean;
  readonly instrumentations: ReadonlySet<Instrumentation>;
  /**
   * Whether LLM call spans need the SDK's span machinery: a sampler other than the default, or
   * attribute limits, are the SDK's to apply (call-span.ts applies neither).
   */
  readonly sdkCallSpans: boolean;
  readonly rolloutId?: string;
  readonly attemptId?: string;
  readonly token?: string;
}

const INSTRUMENTATIONS = ['fetch', 'http', 'langchain'] as const;
type Instrumentation = (typeof INSTRUMENTATIONS)[number];
/** Other names users know these by (OpenTelemetry's package names). */
const ALIASES: Record<string, Instrumentation> = { undici: 'fetch', openai: 'fetch', https: 'http' };

export class ConfigError extends Error {}

const off = (value: string | undefined) => value !== undefined && /^(0|false|no|off)$/i.test(value.trim());
const on = (value: string | undefined) => value !== undefined && /^(1|true|yes|on)$/i.test(value.trim());

function instrumentationList(variable: string, value: string): Instrumentation[] {
  return value
    .split(',')
    .map((s) => s.trim().toLowerCase())
    .filter(Boolean)
    .map((name) => {
      const known = ALIASES[name] ?? (INSTRUMENTATIONS as readonly string[]).find((n) => n === name);
      if (!known)
        throw new ConfigError(`${variable}: unknown instrumentation "${name}" (known: ${INSTRUMENTATIONS.join(', ')})`);
      return known as Instrumentation;
    });
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

  let instrumentations = new Set<Instrumentation>(INSTRUMENTATIONS);
  if (env.OTEL_NODE_ENABLED_INSTRUMENTATIONS)
    instrumentations = new Set(
      instrumentationList('OTEL_NODE_ENABLED_INSTRUMENTATIONS', env.OTEL_NODE_ENABLED_INSTRUMENTATIONS),
    );
  if (env.OTEL_NODE_DISABLED_INSTRUMENTATIONS) {
    for (const name of instrumentationList(
      'OTEL_NODE_DISABLED_INSTRUMENTATIONS',
      env.OTEL_NODE_DISABLED_INSTRUMENTATIONS,
    ))
      instrumentations.delete(name);
  }
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
    captureContent: !off(contentSetting),
    returnTokenIds: on(env.AGL_RETURN_TOKEN_IDS),
    instrumentations,
    sdkCallSpans,
    rolloutId: env.AGL_ROLLOUT_ID || undefined,
    attemptId: env.AGL_ATTEMPT_ID || undefined,
    token: env.AGL_TOKEN || undefined,
  };
}
