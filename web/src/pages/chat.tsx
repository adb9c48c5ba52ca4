/**
 * An attempt's LLM calls as chat: the messages sent and the answer, tool calls with their JSON
 * arguments, token counts, the credited reward; token ids and tool definitions on demand.
 */
import { useState } from 'preact/hooks';
import { sql } from '../api.js';
import { formatDuration, formatNumber, prettyJson } from '../format.js';
import { tokenIdsSql } from '../queries.js';
import type { CallRow, RewardRow } from '../attempt-rows.js';

/** A chat message or a Responses API item, as llm_calls keeps them. */
interface Message {
  readonly role?: string;
  readonly type?: string;
  readonly content?: unknown;
  readonly name?: string;
  readonly arguments?: string;
  readonly call_id?: string;
  readonly tool_call_id?: string;
  readonly tool_calls?: { id?: string; function?: { name?: string; arguments?: string } }[];
}

const asList = (value: unknown): Message[] =>
  Array.isArray(value) ? (value as Message[]) : value === null || value === undefined ? [] : [value as Message];

export function Calls({ calls, rewards }: { calls: CallRow[]; rewards: RewardRow[] }) {
  return (
    <section class="panel" aria-labelledby="calls-title">
      <h2 id="calls-title">LLM calls</h2>
      {calls.length === 0 ? <p class="empty">This attempt made no LLM call agl recorded.</p> : null}
      {calls.map((call, i) => (
        <Call key={call.span_id} call={call} number={i + 1} rewards={rewards} />
      ))}
    </section>
  );
}

function Call({ call, number, rewards }: { call: CallRow; number: number; rewards: RewardRow[] }) {
  const credited = rewards.filter((r) => r.span_id === call.reward_span_id && r.is_primary);
  const tools = asList(call.tools);
  return (
    <article class="call" id={`call-${call.span_id}`} aria-labelledby={`call-title-${call.span_id}`}>
      <header>
        <h3 id={`call-title-${call.span_id}`}>
          Call {number} · {call.model ?? 'unknown model'}
        </h3>
        <span class="meta">
          {formatNumber(call.input_tokens)} in · {formatNumber(call.output_tokens)} out tokens
          {call.finish_reason ? ` · ${call.finish_reason}` : ''}
          {call.start_time !== null && call.end_time !== null
            ? ` · ${formatDuration(call.end_time - call.start_time)}`
            : ''}
        </span>
        {credited.length > 0 ? (
          <span class="credited">
            <span class="reward-mark static">◆</span> reward {credited.map((r) => formatNumber(r.value)).join(', ')}
          </span>
        ) : null}
      </header>
      <ol class="messages" aria-label="Messages sent">
        {asList(call.input_messages).map((m, i) => (
          // biome-ignore lint/suspicious/noArrayIndexKey: messages are in order and never move
          <MessageView key={i} message={m} />
        ))}
      </ol>
      <ol class="messages answer" aria-label="The answer">
        {asList(call.output_messages).map((m, i) => (
          // biome-ignore lint/suspicious/noArrayIndexKey: messages are in order and never move
          <MessageView key={i} message={m} fallbackRole="assistant" />
        ))}
      </ol>
      <footer>
        {tools.length > 0 ? (
          <details>
            <summary>
              {tools.length} tool {tools.length === 1 ? 'definition' : 'definitions'}
            </summary>
            <pre class="json">{prettyJson(call.tools)}</pre>
          </details>
        ) : null}
        <TokenIds call={call} />
      </footer>
    </article>
  );
}

function MessageView({ message, fallbackRole = 'user' }: { message: Message; fallbackRole?: string }) {
  if (message.type === 'function_call')
    return (
      <li class="message assistant">
        <span class="role">assistant</span>
        <ToolCall name={message.name} id={message.call_id} args={message.arguments} />
      </li>
    );
  const role = message.role ?? (message.type === 'function_call_output' ? 'tool' : fallbackRole);
  const toolCallId = message.tool_call_id ?? (message.type === 'function_call_output' ? message.call_id : undefined);
  return (
    <li class={`message ${role}`}>
      <span class="role">
        {role}
        {message.name || toolCallId ? (
          <span class="role-detail">
            {message.name ? ` · ${message.name}` : ''}
            {toolCallId ? ` · answers ${toolCallId}` : ''}
          </span>
        ) : null}
      </span>
      <Content
        value={
          message.content ??
          (message.type === 'function_call_output' ? (message as { output?: unknown }).output : undefined)
        }
      />
      {(message.tool_calls ?? []).map((c, i) => (
        // biome-ignore lint/suspicious/noArrayIndexKey: tool calls are in order and never move
        <ToolCall key={i} name={c.function?.name} id={c.id} args={c.function?.arguments} />
      ))}
    </li>
  );
}

/** Text, or parts (text, images, audio), or any other JSON. */
function Content({ value }: { value: unknown }) {
  if (value === null || value === undefined || value === '') return null;
  if (typeof value === 'string') return <p class="text">{value}</p>;
  if (Array.isArray(value))
    return (
      <>
        {value.map((part, i) => {
          const p = part as { type?: string; text?: string };
          return typeof p?.text === 'string' ? (
            // biome-ignore lint/suspicious/noArrayIndexKey: parts are in order and never move
            <p key={i} class="text">
              {p.text}
            </p>
          ) : (
            // biome-ignore lint/suspicious/noArrayIndexKey: parts are in order and never move
            <pre key={i} class="json">
              {prettyJson(part)}
            </pre>
          );
        })}
      </>
    );
  return <pre class="json">{prettyJson(value)}</pre>;
}

function ToolCall({ name, id, args }: { name?: string; id?: string; args?: string }) {
  let pretty = args ?? '';
  try {
    pretty = prettyJson(JSON.parse(pretty));
  } catch {
    // arguments a model wrote that are not JSON: shown as they are
  }
  return (
    <div class="tool-call">
      <span class="tool-name">
        calls <code>{name ?? '?'}</code>
        {id ? <span class="mono muted"> ({id})</span> : null}
      </span>
      <pre class="json">{pretty}</pre>
    </div>
  );
}

function TokenIds({ call }: { call: CallRow }) {
  const [ids, setIds] = useState<{ prompt: unknown; response: unknown } | string | undefined>(undefined);
  const counts = [call.prompt_token_count, call.response_token_count];
  if (!counts.some((n) => (n ?? 0) > 0)) return <span class="muted">No token ids recorded.</span>;
  const load = async () => {
    if (ids !== undefined) return setIds(undefined);
    try {
      const { rows } = await sql(tokenIdsSql(call.trace_id, call.span_id));
      setIds({ prompt: rows[0]?.prompt_token_ids, response: rows[0]?.response_token_ids });
    } catch (error) {
      setIds((error as Error).message);
    }
  };
  return (
    <div class="token-ids">
      <button type="button" aria-expanded={ids !== undefined} onClick={load}>
        {ids === undefined ? 'Show' : 'Hide'} token ids ({formatNumber(counts[0] ?? 0)} prompt,{' '}
        {formatNumber(counts[1] ?? 0)} response)
      </button>
      {typeof ids === 'string' ? <p class="error">{ids}</p> : null}
      {ids && typeof ids === 'object' ? (
        <dl>
          <dt>Prompt</dt>
          <dd class="mono ids">{JSON.stringify(ids.prompt)}</dd>
          <dt>Response</dt>
          <dd class="mono ids">{JSON.stringify(ids.response)}</dd>
        </dl>
      ) : null}
    </div>
  );
}
