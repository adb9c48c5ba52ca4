import { readFileSync } from 'node:fs';
import * as nodeModule from 'node:module';
import { fileURLToPath } from 'node:url';
import { context, SpanStatusCode, trace, type Attributes, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { currentRollout } from './rollout-context.js';

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

const HOOK = Symbol.for('agl.langchain.callbacks');
const MANAGER_PATH = /\/@langchain\/core\/dist\/callbacks\/manager\.c?js$/;
const HANDOVER = `\n;globalThis[Symbol.for("agl.langchain.callbacks")]?.(typeof CallbackManager === "undefined" ? undefined : CallbackManager, typeof ensureHandler === "undefined" ? undefined : ensureHandler);\n`;

interface OpenRun {
  readonly span: Span;
  readonly isModel: boolean;
  readonly rolloutId: string | undefined;
  claims: number;
}

export interface LangChainCapture {
  /** The context of the chat-model run an LLM HTTP call belongs to, if one is open. */
  modelRunContext(): Context | undefined;
}

export function installLangChainCapture(tracer: Tracer, captureContent: boolean): LangChainCapture {
  const runs = new Map<string, OpenRun>();

  const start = (runId: string, parentRunId: string | undefined, name: string, attributes: Attributes, isModel = false) => {
    const parent = parentRunId ? runs.get(parentRunId) : undefined;
    const parentContext = parent ? trace.setSpan(context.active(), parent.span) : context.active();
    const span = tracer.startSpan(name, { attributes: { 'langchain.run_id': runId, ...attributes } }, parentContext);
    runs.set(runId, { span, isModel, rolloutId: currentRollout()?.rollout_id, claims: 0 });
  };
  const end = (runId: string, attributes: Attributes = {}, error?: unknown) => {
    const run = runs.get(runId);
    if (!run) return;
    runs.delete(runId);
    run.span.setAttributes(attributes);
    if (error !== undefined) {
      run.span.recordException(error instanceof Error ? error : String(error));
      run.span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    }
    run.span.end();
  };
  const content = (key: string, value: unknown): Attributes => (captureContent ? { [key]: jsonText(value) } : {});

  const methods = {
    handleChainStart(chain: any, inputs: unknown, runId: string, parentRunId?: string, _tags?: string[], _metadata?: unknown, runType?: string, runName?: string) {
      start(runId, parentRunId, runName ?? nameOf(chain, 'chain'), { 'langchain.run_type': runType ?? 'chain', ...content('langchain.input', inputs) });
    },
    handleChainEnd(outputs: unknown, runId: string) {
      end(runId, content('langchain.output', outputs));
    },
    handleChainError(error: unknown, runId: string) {
      end(runId, {}, error);
    },
    handleChatModelStart(llm: any, _messages: unknown, runId: string, parentRunId?: string, extra?: any, _tags?: string[], _metadata?: unknown, runName?: string) {
      start(runId, parentRunId, runName ?? nameOf(llm, 'chat_model'), modelAttributes(extra), true);
    },
    handleLLMStart(llm: any, _prompts: unknown, runId: string, parentRunId?: string, extra?: any, _tags?: string[], _metadata?: unknown, runName?: string) {
      start(runId, parentRunId, runName ?? nameOf(llm, 'llm'), modelAttributes(extra), true);
    },
    handleLLMEnd(_output: unknown, runId: string) {
      end(runId);
    },
    handleLLMError(error: unknown, runId: string) {
      end(runId, {}, error);
    },
    handleToolStart(tool: any, input: string, runId: string, parentRunId?: string, _tags?: string[], _metadata?: unknown, runName?: string, toolCallId?: string) {
      const name = runName ?? nameOf(tool, 'tool');
      start(runId, parentRunId, `execute_tool ${name}`, {
        'langchain.run_type': 'tool',
        'gen_ai.operation.name': 'execute_tool',
        'gen_ai.tool.name': name,
        ...(toolCallId ? { 'gen_ai.tool.call.id': toolCallId } : {}),
        ...(captureContent ? { 'gen_ai.tool.call.arguments': typeof input === 'string' ? input : jsonText(input) } : {}),
      });
    },
    handleToolEnd(output: unknown, runId: string) {
      end(runId, captureContent ? { 'gen_ai.tool.call.result': toolResultText(output) } : {});
    },
    handleToolError(error: unknown, runId: string) {
      end(runId, {}, error);
    },
    handleRetrieverStart(retriever: any, query: string, runId: string, parentRunId?: string, _tags?: string[], _metadata?: unknown, name?: string) {
      start(runId, parentRunId, name ?? nameOf(retriever, 'retriever'), { 'langchain.run_type': 'retriever', ...content('langchain.input', query) });
    },
    handleRetrieverEnd(documents: unknown, runId: string) {
      end(runId, content('langchain.output', documents));
    },
    handleRetrieverError(error: unknown, runId: string) {
      end(runId, {}, error);
    },
  };

  (globalThis as any)[HOOK] = (CallbackManager: any, ensureHandler: any) => {
    if (typeof CallbackManager?._configureSync !== 'function' || typeof ensureHandler !== 'function' || CallbackManager[HOOK]) return;
    const handler = ensureHandler(methods);
    handler.name = 'agl_tracer';
    handler.awaitHandlers = true; // run inline, in the caller's async context (its rollout scope)
    handler.copy = () => handler;
    const configure = CallbackManager._configureSync;
    CallbackManager._configureSync = function (this: unknown, ...args: unknown[]) {
      const manager = configure.apply(this, args) ?? new CallbackManager();
      if (!manager.handlers.some((h: any) => h.name === handler.name)) manager.addHandler(handler, true);
      return manager;
    };
    CallbackManager[HOOK] = true;
  };

  (nodeModule as any).registerHooks({
    load(url: string, loadContext: unknown, nextLoad: (url: string, context: unknown) => any) {
      const result = nextLoad(url, loadContext);
      if (!MANAGER_PATH.test(url)) return result;
      const source = result.source ?? readFileSync(fileURLToPath(url));
      return { ...result, source: `${typeof source === 'string' ? source : Buffer.from(source).toString('utf8')}${HANDOVER}` };
    },
  });

  return {
    modelRunContext() {
      // The chat-model run of this rollout that has not made its call yet (oldest first: runs
      // started together make their calls in that order); else the latest one (a retry).
      const rolloutId = currentRollout()?.rollout_id;
      let unclaimed: OpenRun | undefined;
      let latest: OpenRun | undefined;
      for (const run of runs.values()) {
        if (!run.isModel || run.rolloutId !== rolloutId) continue;
        if (run.claims === 0 && !unclaimed) unclaimed = run;
        latest = run;
      }
      const run = unclaimed ?? latest;
      if (!run) return undefined;
      run.claims++;
      return trace.setSpan(context.active(), run.span);
    },
  };
}

function nameOf(serialized: any, fallback: string): string {
  if (typeof serialized?.name === 'string') return serialized.name;
  const id = serialized?.id;
  return Array.isArray(id) && typeof id[id.length - 1] === 'string' ? id[id.length - 1] : fallback;
}

function modelAttributes(extra: any): Attributes {
  const params = extra?.invocation_params ?? {};
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
function toolResultText(output: any): string {
  if (output && typeof output === 'object' && 'content' in output) return jsonText(output.content);
  return jsonText(output);
}
