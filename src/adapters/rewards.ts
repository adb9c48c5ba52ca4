import { AGL, ATTR } from '../api/semconv.js';

/** A span as the store answers it (Agent Lightning's Span JSON), as far as reading rewards goes. */
interface SpanLike {
  readonly name: string;
  readonly attributes: Record<string, unknown>;
}

/**
 * The rewards a span carries, as Agent Lightning writes them: `agentlightning.reward.<i>.name`
 * / `.value` (0 is the primary); also its v0.2 form, a span `agentlightning.reward` with `reward`.
 */
export function getRewards(span: SpanLike): { name: string; value: number }[] {
  const rewards: { name: string; value: number }[] = [];
  for (let i = 0; ; i++) {
    const value = span.attributes[`${ATTR.reward}.${i}.value`];
    if (value === undefined) break;
    const number = Number(value);
    if (Number.isFinite(number))
      rewards.push({
        name: String(span.attributes[`${ATTR.reward}.${i}.name`] ?? (i === 0 ? 'primary' : String(i))),
        value: number,
      });
  }
  if (rewards.length === 0 && span.name === ATTR.reward && typeof span.attributes.reward === 'number')
    rewards.push({ name: 'primary', value: span.attributes.reward });
  return rewards;
}

/** The primary reward of a reward span (an annotation, or an operation named agentlightning.reward), else null. */
export function getRewardValue(span: SpanLike): number | null {
  const isReward =
    span.name === AGL.annotation ||
    span.name === ATTR.reward ||
    (span.name === AGL.operation && span.attributes[ATTR.operationName] === AGL.rewardOperation);
  return isReward ? (getRewards(span)[0]?.value ?? null) : null;
}

export function findRewardSpans<S extends SpanLike>(spans: readonly S[]): S[] {
  return spans.filter((span) => getRewardValue(span) !== null);
}

/**
 * The last reward of spans in hand (in the order given, e.g. by sequence id), else null: for an
 * agent or script that holds a rollout's spans. Code with SQL over the store reads many
 * rollouts' final rewards in one query by the same rule: `finalRewards` (final-rewards.ts).
 */
export function findFinalReward(spans: readonly SpanLike[]): number | null {
  for (let i = spans.length - 1; i >= 0; i--) {
    const value = getRewardValue(spans[i]);
    if (value !== null) return value;
  }
  return null;
}
