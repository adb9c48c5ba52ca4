/**
 * APO's prompt versions (the `prompt_versions` view): each run's search tree (a version under the
 * one it was edited from) with its scores, and a word diff between any two versions.
 */
import { useState } from 'preact/hooks';
import { formatNumber } from '../format.js';
import { wordDiff } from '../diff.js';

export interface PromptVersion {
  readonly run_id: string;
  readonly session: number | null;
  readonly version: string;
  readonly parent: string | null;
  readonly round: number | null;
  readonly status: string;
  readonly reason: string | null;
  readonly template: string;
  readonly critique: string | null;
  readonly gradient_score: number | null;
  readonly batch_score: number | null;
  readonly val_score: number | null;
  readonly rollouts: number;
  readonly failed_rollouts: number;
  readonly in_beam: boolean;
  readonly is_best: boolean;
  readonly resources_id: string | null;
}

export function PromptVersions({ versions }: { versions: PromptVersion[] }) {
  const runs = [...new Set(versions.map((v) => v.run_id))];
  return (
    <>
      {runs.map((run) => (
        <PromptRun key={run} run={run} versions={versions.filter((v) => v.run_id === run)} />
      ))}
    </>
  );
}

function PromptRun({ run, versions }: { run: string; versions: PromptVersion[] }) {
  const best = versions.find((v) => v.is_best) ?? versions.at(-1);
  const [from, setFrom] = useState(best?.parent ?? versions[0]?.version);
  const [to, setTo] = useState(best?.version);
  const byVersion = new Map(versions.map((v) => [v.version, v]));
  const roots = versions.filter((v) => v.parent === null || !byVersion.has(v.parent));
  const compare = (v: PromptVersion) => {
    setFrom(v.parent ?? v.version);
    setTo(v.version);
  };
  return (
    <div class="prompt-run">
      <h3>
        APO run <span class="mono">{run}</span>
      </h3>
      <ul class="tree" aria-label={`Prompt versions of ${run}, each under the version it was edited from`}>
        {roots.map((v) => (
          <VersionNode key={v.version} version={v} versions={versions} onCompare={compare} />
        ))}
      </ul>
      <div class="diff-pick">
        <label>
          Compare
          <select value={from} onChange={(e) => setFrom(e.currentTarget.value)}>
            {versions.map((v) => (
              <option key={v.version} value={v.version}>
                {v.version}
              </option>
            ))}
          </select>
        </label>
        <label>
          with
          <select value={to} onChange={(e) => setTo(e.currentTarget.value)}>
            {versions.map((v) => (
              <option key={v.version} value={v.version}>
                {v.version}
              </option>
            ))}
          </select>
        </label>
      </div>
      <VersionDiff from={from ? byVersion.get(from) : undefined} to={to ? byVersion.get(to) : undefined} />
    </div>
  );
}

function VersionNode(props: {
  version: PromptVersion;
  versions: PromptVersion[];
  onCompare: (v: PromptVersion) => void;
}) {
  const { version: v, versions } = props;
  const children = versions.filter((c) => c.parent === v.version && c !== v);
  return (
    <li>
      <div class={`version ${v.status}`}>
        <strong class="mono">{v.version}</strong>
        <span>round {v.round ?? '—'}</span>
        <span>val {formatNumber(v.val_score)}</span>
        <span>batch {formatNumber(v.batch_score)}</span>
        <span>
          {v.rollouts} rollouts{v.failed_rollouts ? `, ${v.failed_rollouts} failed` : ''}
        </span>
        {v.is_best ? <span class="tag best">best</span> : null}
        {v.in_beam ? <span class="tag beam">beam</span> : null}
        {v.status === 'rejected' ? <span class="tag rejected">rejected: {v.reason}</span> : null}
        {v.parent ? (
          <button type="button" class="link" onClick={() => props.onCompare(v)}>
            diff with {v.parent}
          </button>
        ) : null}
      </div>
      {children.length > 0 ? (
        <ul>
          {children.map((c) => (
            <VersionNode key={c.version} version={c} versions={versions} onCompare={props.onCompare} />
          ))}
        </ul>
      ) : null}
    </li>
  );
}

function VersionDiff({ from, to }: { from?: PromptVersion; to?: PromptVersion }) {
  if (!from || !to) return null;
  return (
    <section class="diff" aria-label={`Changes from ${from.version} to ${to.version}`}>
      <p class="diff-text">
        {wordDiff(from.template, to.template).map((part, i) =>
          part.kind === 'same' ? (
            // biome-ignore lint/suspicious/noArrayIndexKey: the parts are the diff, in order
            <span key={i}>{part.text}</span>
          ) : part.kind === 'added' ? (
            // biome-ignore lint/suspicious/noArrayIndexKey: the parts are the diff, in order
            <ins key={i}>{part.text}</ins>
          ) : (
            // biome-ignore lint/suspicious/noArrayIndexKey: the parts are the diff, in order
            <del key={i}>{part.text}</del>
          ),
        )}
      </p>
      {to.critique ? (
        <details>
          <summary>The critique {to.version} was edited from</summary>
          <p class="critique">{to.critique}</p>
        </details>
      ) : null}
    </section>
  );
}
