import type { z } from 'zod';
import type { NamedResources } from '../../api/types.js';
import type { Algorithm } from '../algorithm.js';

/**
 * What `agl train <name>` needs of an algorithm (src/runtime/train-command.ts): its options as a
 * zod object, whose keys are also config file keys and, where they are strings, numbers or
 * booleans, command line flags (beamWidth is --beam-width); how to make the algorithm from them;
 * and how to report its result. An algorithm joins the command with one entry in that table.
 */
export interface AlgorithmCommand<R = unknown> {
  /** One line for `agl train --help`. */
  readonly summary: string;
  readonly options: z.ZodObject;
  /** Options that name files: in a config file they are relative to the file's folder. */
  readonly paths: readonly string[];
  /** Options that are no flags, only config file keys (secrets such as API keys). */
  readonly fileOnly: readonly string[];
  create(options: Record<string, unknown>, context: CommandContext): Algorithm<unknown, R>;
  /**
   * The resources versions of the first and the last model a run trained (SFT, GRPO): with its
   * `eval` option, `agl train` evaluates the two on that task file after the run.
   */
  models?(result: R): { readonly first: string; readonly last: string };
  /** The result as text for the terminal (stdout). */
  report(result: R): string;
  /**
   * The message of an error the run ended with that says all the user needs (a failed training
   * command and its output): printed without a stack trace. Undefined for any other error.
   */
  explain?(error: unknown): string | undefined;
}

export interface CommandContext {
  /** The resources to start from, when the command was given any (--prompt, --llm-model, `resources` in the file). */
  readonly resources?: NamedResources;
  /** Where progress lines go (stderr). */
  readonly log: (line: string) => void;
}
