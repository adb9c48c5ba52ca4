/**
 * The token form, shown when the server answers 401: the token is kept in sessionStorage (this
 * tab only) and checked against the server before the pages load again.
 */
import { useState } from 'preact/hooks';
import { ApiError, getJson, storeToken } from './api.js';

export function Login({ onDone }: { onDone: () => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | undefined>(undefined);
  const submit = async (event: Event) => {
    event.preventDefault();
    storeToken(token.trim());
    try {
      await getJson('/v1/agl/health');
      onDone();
    } catch (e) {
      storeToken(null);
      setError(
        e instanceof ApiError && e.status === 401 ? 'The server does not take this token.' : (e as Error).message,
      );
    }
  };
  return (
    <main id="main" class="page login">
      <form class="panel" onSubmit={submit} aria-labelledby="login-title">
        <h1 id="login-title">This agl server needs a token</h1>
        <p>
          It was started with <code>--token</code> (or <code>AGL_TOKEN</code>). The token stays in this tab only and
          goes to the server with each request.
        </p>
        <label for="token">Token</label>
        <input
          id="token"
          type="password"
          autocomplete="current-password"
          value={token}
          autofocus
          onInput={(e) => setToken(e.currentTarget.value)}
          required
        />
        {error ? (
          <p class="error" role="alert">
            {error}
          </p>
        ) : null}
        <button type="submit" class="primary">
          Log in
        </button>
      </form>
    </main>
  );
}
