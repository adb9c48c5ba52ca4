import { resolve } from 'node:path';
import * as z from 'zod';
import { problemOf } from '../api/schema-fields.js';
import { DEFAULT_V1_PROXY, type V1ProxySettings } from '../collector/al-v1/proxy-settings.js';
import { UsageError } from './args.js';
import { readConfigFile } from './train-config.js';

/**
 * Agent Lightning v1's server settings for `agl serve`: its `config/server.yaml` as the file
 * (`--v1-config`), read as v1's Hydra reads it over the defaults (a key not given keeps v1's
 * default), and `--v1-model` for `default_proxy.model_name`, which flags override.
 */
export interface V1ServerSettings {
  readonly proxy: V1ProxySettings;
  /** The file's `host`, `port` and `key`, for the flags not given (--host, --port, --token). */
  readonly host?: string;
  readonly port?: number;
  readonly key?: string;
}

const KEYS = ['host', 'port', 'key', 'default_proxy'];

/** A JSON value a request body may hold (a sampling parameter). */
const jsonValue: z.ZodType<unknown> = z.union([
  z.string(),
  z.number(),
  z.boolean(),
  z.null(),
  z.array(z.lazy(() => jsonValue)),
  z.record(
    z.string(),
    z.lazy(() => jsonValue),
  ),
]);

/** A mode's parameters: v1 reads `temperature`; agl sends every parameter listed. */
const modeParameters = z
  .record(z.string(), jsonValue)
  .refine((mode) => mode.temperature === undefined || (typeof mode.temperature === 'number' && mode.temperature >= 0), {
    error: 'temperature must be a number of 0 or more',
  });

const fileSchema = z.strictObject({
  host: z.string().min(1).optional(),
  port: z.int().min(0).max(65535).optional(),
  key: z.string().nullish(),
  default_proxy: z
    .strictObject({
      model_name: z.string().min(1).optional(),
      include_log_probs: z.boolean().optional(),
      train: modeParameters.optional(),
      val: modeParameters.optional(),
    })
    .optional(),
});

/** The settings of `--v1-config FILE` and `--v1-model NAME`; v1's defaults where neither says. */
export async function v1Settings(file: string | undefined, model: string | undefined): Promise<V1ServerSettings> {
  if (model !== undefined && model.trim() === '') throw new UsageError('--v1-model needs a model name');
  if (file === undefined) return { proxy: { ...DEFAULT_V1_PROXY, modelName: model ?? DEFAULT_V1_PROXY.modelName } };
  const path = resolve(file);
  const { options } = await readConfigFile(path, KEYS, new Set(), '--v1-config');
  const interpolated = findInterpolation(options);
  if (interpolated !== undefined)
    throw new UsageError(
      `--v1-config ${path}: ${interpolated} is a Hydra interpolation (\${...}); agl reads the file as plain YAML: write the value (the key as --token or AGL_TOKEN)`,
    );
  const result = fileSchema.safeParse(options, { error: problemOf });
  if (!result.success) {
    const [issue] = result.error.issues;
    const where = issue.path.length === 0 ? 'the file' : issue.path.join('.');
    throw new UsageError(`--v1-config ${path}: ${where}: ${issue.message}`);
  }
  const { host, port, key, default_proxy: proxy = {} } = result.data;
  return {
    proxy: {
      modelName: model ?? proxy.model_name ?? DEFAULT_V1_PROXY.modelName,
      includeLogprobs: proxy.include_log_probs ?? DEFAULT_V1_PROXY.includeLogprobs,
      train: { ...DEFAULT_V1_PROXY.train, ...proxy.train },
      val: { ...DEFAULT_V1_PROXY.val, ...proxy.val },
    },
    host,
    port,
    key: key || undefined,
  };
}

/** The dotted key of the first text value holding `${`, if any. */
function findInterpolation(value: unknown, at = ''): string | undefined {
  if (typeof value === 'string') return value.includes('${') ? at : undefined;
  if (value === null || typeof value !== 'object') return undefined;
  for (const [key, inner] of Object.entries(value)) {
    const found = findInterpolation(inner, at === '' ? key : `${at}.${key}`);
    if (found !== undefined) return found;
  }
  return undefined;
}
