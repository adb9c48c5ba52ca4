/**
 * LangChain.js runs (chains, agents, chat models, tools, retrievers) as a span tree.
 *
 * A callback handler of ours joins every CallbackManager that `@langchain/core` configures, so
 * each run reports its start and end; parent runs become parent spans. The handler is put in
 * through a module load hook (`module.registerHooks`, in-thread, for `import` and `require`
 * alike): when the app loads `@langchain/core/dist/callbacks/manager`, one line appended to that
 * module hands its CallbackManager class to us. No copy of @langchain/core is loaded by agl, and
 * the app's own copy (ESM or CJS, whichever it uses) is the one patched.
 *
 * The LLM call itself is recorded by the fetch capture; `modelRunContext` lets that span be a
 * child of the chat-model run that made it.
 */
import { readFileSync } from 'node:fs';
import { registerHooks, type LoadHookSync } from 'node:module';
import { fileURLToPath } from 'node:url';
import {
  context,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import { currentRollout } from './rollout-context.js';

const HOOK = Symbol.for('agl.langchain.callbacks');
const MANAGER_PATH = /\/@langchain\/core\/dist\/callbacks\/manager\.c?js$/;
const HANDOVER = `\n;globalThis[Symbol.for("agl.langchain.callbacks")]?.(typeof CallbackManager === "undefined" ? undefined : CallbackManager, typeof ensureHandler === "undefined" ? undefined : ensureHandler);\n`;

interface OpenRun {
  readonly span: Span;
  readonly isModel: boolean;
  readonly rolloutId: string | undefined;
  claims: number;
}

interface LangChainCapture {
  /** The context of the chat-model run an LLM HTTP call belongs to, if one is open. */
  modelRunContext(): Context | undefined;
}

export function installLangChainCapture(tracer: Tracer, captureContent: boolean): LangChainCapture {
  const runs = new OpenRuns(tracer);
  acceptCallbackManager(callbackMethods(runs, captureContent));
  registerHooks({ load: appendHandover });
  return { modelRunContext: () => runs.modelRunContext() };
}

/** The runs that started and have not ended yet, each with its span. */
class OpenRuns {
  private readonly runs = new Map<string, OpenRun>();

  constructor(private readonly tracer: Tracer) {}

  start(runId: string, parentRunId: string | undefined, name: string, attributes: Attributes, isModel = false): void {
    const parent = parentRunId ? this.runs.get(parentRunId) : undefined;
    const parentContext = parent ? trace.setSpan(context.active(), parent.span) : context.active();
    const span = this.tracer.startSpan(
      name,
      { attributes: { 'langchain.run_id': runId, ...attributes } },
      parentContext,
    );
    this.runs.set(runId, { span, isModel, rolloutId: currentRollout()?.rollout_id, claims: 0 });
  }

  end(runId: string, attributes: Attributes = {}, error?: unknown): void {
    const run = this.runs.get(runId);
    if (!run) return;
    this.runs.delete(runId);
    run.span.setAttributes(attributes);
    if (error !== undefined) {
      run.span.recordException(error instanceof Error ? error : String(error));
      run.span.setStatus({
        code: SpanStatusCode.ERROR,
        message: error instanceof Error ? error.message : String(error),
      });
    }
    run.span.end();
  }

  /**
   * The chat-model run of this rollout that has not made its call yet (oldest first: runs
   * started together make their calls in that order); else the latest one (a retry).
   */
  modelRunContext(): Context | undefined {
    const rolloutId = currentRollout()?.rollout_id;
    let unclaimed: OpenRun | undefined;
    let latest: OpenRun | undefined;
    for (const run of this.runs.values()) {
      if (!run.isModel || run.rolloutId !== rolloutId) continue;
      if (run.claims === 0 && !unclaimed) unclaimed = run;
      latest = run;
    }
    const run = unclaimed ?? latest;
    if (!run) return undefined;
    run.claims++;
    return trace.setSpan(context.active(), run.span);
  }
}

/**
 * The callback methods of our handler, in the argument order of LangChain's BaseCallbackHandler.
 * The first argument of a start is the run's serialized component (`{name?, id: [...path]}`).
 */
function callbackMethods(runs: OpenRuns, captureContent: boolean) {
  const content = (key: string, value: unknown): Attributes => (captureContent ? { [key]: jsonText(value) } : {});
  return {
    handleChainStart(
      chain: unknown,
      inputs: unknown,
      runId: string,
      parentRunId?: string,
      _tags?: string[],
      _metadata?: unknown,
      runType?: string,
      runName?: string,
    ) {
      runs.start(runId, parentRunId, runName ?? nameOf(chain, 'chain'), {
        'langchain.run_type': runType ?? 'chain',
        ...content('langchain.input', inputs),
      });
    },
    handleChainEnd(outputs: unknown, runId: string) {
      runs.end(runId, content('langchain.output', outputs));
    },
    handleChainError(error: unknown, runId: string) {
      runs.end(runId, {}, error);
    },
    handleChatModelStart(
      llm: unknown,
      _messages: unknown,
      runId: string,
      parentRunId?: string,
      extra?: unknown,
      _tags?: string[],
      _metadata?: unknown,
      runName?: string,
    ) {
      runs.start(runId, parentRunId, runName ?? nameOf(llm, 'chat_model'), modelAttributes(extra), true);
    },
    handleLLMStart(
      llm: unknown,
      _prompts: unknown,
      runId: string,
      parentRunId?: string,
      extra?: unknown,
      _tags?: string[],
      _metadata?: unknown,
      runName?: string,
    ) {
      runs.start(runId, parentRunId, runName ?? nameOf(llm, 'llm'), modelAttributes(extra), true);
    },
    handleLLMEnd(_output: unknown, runId: string) {
      runs.end(runId);
    },
    handleLLMError(error: unknown, runId: string) {
      runs.end(runId, {}, error);
    },
    handleToolStart(
      tool: unknown,
      input: string,
      runId: string,
      parentRunId?: string,
      _tags?: string[],
      _metadata?: unknown,
      runName?: string,
      toolCallId?: string,
    ) {
      const name = runName ?? nameOf(tool, 'tool');
      runs.start(runId, parentRunId, `execute_tool ${name}`, {
        'langchain.run_type': 'tool',
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': name,
        ...(toolCallId ? { 'gen_ai.tool.call.id': toolCallId } : {}),
        ...(captureContent
          ? { 'gen_ai.tool.call.arguments': typeof input === 'string' ? input : jsonText(input) }
          : {}),
      });
    },
    handleToolEnd(output: unknown, runId: string) {
      runs.end(runId, captureContent ? { 'gen_ai.tool.call.result': toolResultText(output) } : {});
    },
    handleToolError(error: unknown, runId: string) {
      runs.end(runId, {}, error);
    },
    handleRetrieverStart(
      retriever: unknown,
      query: string,
      runId: string,
      parentRunId?: string,
      _tags?: string[],
      _metadata?: unknown,
      name?: string,
    ) {
      runs.start(runId, parentRunId, name ?? nameOf(retriever, 'retriever'), {
        'langchain.run_type': 'retriever',
        ...content('langchain.input', query),
      });
    },
    handleRetrieverEnd(documents: unknown, runId: string) {
      runs.end(runId, content('langchain.output', documents));
    },
    handleRetrieverError(error: unknown, runId: string) {
      runs.end(runId, {}, error);
    },
  };
}

type CallbackMethods = ReturnType<typeof callbackMethods>;

// What the hand-over touches of @langchain/core, which agl does not import: the app's copy, of
// whatever version, is the one patched.
interface CallbackHandler {
  name: string;
  awaitHandlers: boolean;
  copy(): CallbackHandler;
}
interface CallbackManager {
  readonly handlers: readonly { readonly name?: unknown }[];
  addHandler(handler: CallbackHandler, inherit: boolean): void;
}
interface CallbackManagerClass {
  new (): CallbackManager;
  _configureSync(...args: unknown[]): CallbackManager | undefined;
  [HOOK]?: boolean;
}
type EnsureHandler = (methods: CallbackMethods) => CallbackHandler;

const isCallbackManagerClass = (value: unknown): value is CallbackManagerClass =>
  typeof value === 'function' && typeof (value as { _configureSync?: unknown })._configureSync === 'function';

/**
 * Sets the global the appended line calls (HANDOVER): it makes every CallbackManager that
 * `_configureSync` returns carry our handler, once per CallbackManager class.
 */
function acceptCallbackManager(methods: CallbackMethods): void {
  const accept = (Manager: unknown, ensureHandler: unknown) => {
    if (!isCallbackManagerClass(Manager) || typeof ensureHandler !== 'function' || Manager[HOOK]) return;
    const handler = (ensureHandler as EnsureHandler)(methods);
    handler.name = 'agl_tracer';
    handler.awaitHandlers = true; // run inline, in the caller's async context (its rollout scope)
    handler.copy = () => handler;
    const configure = Manager._configureSync;
    Manager._configureSync = function (this: unknown, ...args: unknown[]) {
      const manager = configure.apply(this, args) ?? new Manager();
      if (!manager.handlers.some((h) => h.name === handler.name)) manager.addHandler(handler, true);
      return manager;
    };
    Manager[HOOK] = true;
  };
  Reflect.set(globalThis, HOOK, accept);
}

/** The load hook: appends HANDOVER to @langchain/core's callbacks/manager module. */
const appendHandover: LoadHookSync = (url, loadContext, nextLoad) => {
  const result = nextLoad(url, loadContext);
  if (!MANAGER_PATH.test(url)) return result;
  const source = result.source ?? readFileSync(fileURLToPath(url));
  return { ...result, source: `${typeof source === 'string' ? source : new TextDecoder().decode(source)}${HANDOVER}` };
};

/** The fields of an object handed over by LangChain; none for anything else. */
const fieldsOf = (value: unknown): Record<string, unknown> =>
  typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {};

function nameOf(serialized: unknown, fallback: string): string {
  const { name, id } = fieldsOf(serialized);
  if (typeof name === 'string') return name;
  const last = Array.isArray(id) ? id.at(-1) : undefined;
  return typeof last === 'string' ? last : fallback;
}

function modelAttributes(extra: unknown): Attributes {
  const params = fieldsOf(fieldsOf(extra).invocation_params);
  const model = params.model ?? params.model_name ?? params.modelName;
  return { 'langchain.run_type': 'llm', ...(typeof model === 'string' ? { 'gen_ai.request.model': model } : {}) };
}

function jsonText(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** A tool's output is often a ToolMessage; its content is what the model sees. */
function toolResultText(output: unknown): string {
  if (output && typeof output === 'object' && 'content' in output) return jsonText(output.content);
  return jsonText(output);
}
