/**
 * An attempt's LLM calls as chat: the messages sent and the answer, tool calls with their JSON
 * arguments, content blocks (images, thinking, a tool's use and result), token counts, the
 * credited reward; token ids, thinking and tool definitions on demand.
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
  /** The model's thinking (Anthropic's thinking blocks, vLLM's and DeepSeek's reasoning). */
  readonly reasoning_content?: string;
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
      {message.reasoning_content ? <Thinking text={message.reasoning_content} /> : null}
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

/** Text, or parts (text, images, thinking, tool use and results, audio), or any other JSON. */
function Content({ value }: { value: unknown }) {
  if (value === null || value === undefined || value === '') return null;
  if (typeof value === 'string') return <p class="text">{value}</p>;
  if (Array.isArray(value))
    return (
      <>
        {value.map((part, i) => (
          // biome-ignore lint/suspicious/noArrayIndexKey: parts are in order and never move
          <Part key={i} part={part} />
        ))}
      </>
    );
  return <pre class="json">{prettyJson(value)}</pre>;
}

/** A content part as OpenAI chat, the Responses API or Anthropic write it. */
type ContentPart = {
  type?: string;
  text?: string;
  thinking?: string;
  image_url?: string | { url?: string };
  source?: { type?: string; url?: string; media_type?: string; data?: string };
  id?: string;
  name?: string;
  input?: unknown;
  tool_use_id?: string;
  content?: unknown;
};

function Part({ part }: { part: unknown }) {
  const p = (part ?? {}) as ContentPart;
  const image = imageUrlOf(p);
  if (image !== undefined) return <Image url={image} />;
  switch (p.type) {
    case 'thinking':
    case 'reasoning':
      return <Thinking text={p.thinking ?? p.text ?? ''} />;
    case 'redacted_thinking':
      return <p class="muted">thinking (redacted by the provider)</p>;
    case 'tool_use':
      return <ToolCall name={p.name} id={p.id} args={JSON.stringify(p.input ?? {})} />;
    case 'tool_result':
      return (
        <div class="tool-result">
          <span class="role-detail">result for {p.tool_use_id ?? '?'}</span>
          <Content value={p.content} />
        </div>
      );
  }
  if (typeof p.text === 'string') return <p class="text">{p.text}</p>;
  return <pre class="json">{prettyJson(part)}</pre>;
}

/** The image a part holds: chat's `image_url`, the Responses API's `input_image`, Anthropic's `image` source. */
function imageUrlOf(p: ContentPart): string | undefined {
  if (p.type === 'image_url' || p.type === 'input_image')
    return typeof p.image_url === 'string' ? p.image_url : p.image_url?.url;
  if (p.type === 'image' && p.source)
    return p.source.type === 'base64' ? `data:${p.source.media_type};base64,${p.source.data}` : p.source.url;
  return undefined;
}

/** An image sent inline is shown; one by URL is named, not fetched (the dashboard loads nothing from elsewhere). */
function Image({ url }: { url: string }) {
  if (url.startsWith('data:image/')) return <img class="part-image" src={url} alt="sent to the model" />;
  return (
    <p class="image-ref">
      image <span class="mono muted">{url}</span>
    </p>
  );
}

function Thinking({ text }: { text: string }) {
  return (
    <details class="thinking">
      <summary>thinking</summary>
      <p class="text">{text}</p>
    </details>
  );
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
