/**
 * For runners: the OpenAI base URL through which an agent's calls are recorded into one
 * rollout's attempt, so the agent needs nothing but `OPENAI_BASE_URL`.
 */
export function gatewayBaseUrl(serverUrl: string, rolloutId: string, attemptId: string): string {
  const base = serverUrl.replace(/\/+$/, '');
  return `${base}/v1/gateway/rollouts/${encodeURIComponent(rolloutId)}/attempts/${encodeURIComponent(attemptId)}/v1`;
}

/** Environment for an agent process of that rollout: its base URL and the ids (for `agl/register`). */
export function gatewayEnv(serverUrl: string, rolloutId: string, attemptId: string): Record<string, string> {
  return {
    OPENAI_BASE_URL: gatewayBaseUrl(serverUrl, rolloutId, attemptId),
    AGL_ROLLOUT_ID: rolloutId,
    AGL_ATTEMPT_ID: attemptId,
  };
}
