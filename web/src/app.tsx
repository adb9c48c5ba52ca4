/** The dashboard's frame: navigation, theme, token, and the page of the current URL. */
import { useEffect, useState } from 'preact/hooks';
import { storedToken, storeToken, whenUnauthorized } from './api.js';
import { Login } from './login.js';
import { EvaluationsPage } from './pages/evaluations.js';
import { RolloutPage } from './pages/rollout.js';
import { RolloutsPage } from './pages/rollouts.js';
import { RunnersPage } from './pages/runners.js';
import { SqlPage } from './pages/sql.js';
import { TrainingPage } from './pages/training.js';
import { Link, type Place, usePlace } from './router.js';
import { applyTheme, setTheme, useTheme } from './theme.js';

const NAV = [
  { href: '/', label: 'Rollouts', matches: (path: string) => path === '/' || path.startsWith('/rollouts') },
  { href: '/training', label: 'Training', matches: (path: string) => path === '/training' },
  { href: '/evaluations', label: 'Evaluations', matches: (path: string) => path === '/evaluations' },
  { href: '/runners', label: 'Runners', matches: (path: string) => path === '/runners' },
  { href: '/sql', label: 'SQL', matches: (path: string) => path === '/sql' },
];

const TITLES: Record<string, string> = {
  '/training': 'Training',
  '/evaluations': 'Evaluations',
  '/runners': 'Runners',
  '/sql': 'SQL',
};

export function App() {
  const place = usePlace();
  const theme = useTheme();
  const [needsToken, setNeedsToken] = useState(false);
  // Bumped after a login, so that every page reads its data again with the token.
  const [session, setSession] = useState(0);
  useEffect(() => whenUnauthorized(() => setNeedsToken(true)), []);
  useEffect(() => applyTheme(theme), [theme]);
  useEffect(() => {
    const rollout = /^\/rollouts\/(.+)$/.exec(place.path);
    document.title = `${rollout ? `Rollout ${decodeURIComponent(rollout[1])}` : (TITLES[place.path] ?? 'Rollouts')} · agl`;
  }, [place.path]);
  return (
    <>
      <a class="skip" href="#main">
        Skip to content
      </a>
      <header class="top">
        <span class="brand">agl</span>
        <nav aria-label="Pages">
          {NAV.map((item) => (
            <Link key={item.href} href={item.href} aria-current={item.matches(place.path) ? 'page' : undefined}>
              {item.label}
            </Link>
          ))}
        </nav>
        <span class="spacer" />
        <button
          type="button"
          onClick={() => setTheme(theme === 'dark' ? 'light' : 'dark')}
          aria-label={`Switch to ${theme === 'dark' ? 'light' : 'dark'} mode`}
        >
          {theme === 'dark' ? '☀ Light' : '☾ Dark'}
        </button>
        {storedToken() ? (
          <button
            type="button"
            onClick={() => {
              storeToken(null);
              setSession((s) => s + 1);
            }}
          >
            Forget token
          </button>
        ) : null}
      </header>
      {needsToken ? (
        <Login
          onDone={() => {
            setNeedsToken(false);
            setSession((s) => s + 1);
          }}
        />
      ) : (
        <Page key={session} place={place} />
      )}
    </>
  );
}

function Page({ place }: { place: Place }) {
  const rollout = /^\/rollouts\/([^/]+)\/?$/.exec(place.path);
  if (rollout) return <RolloutPage id={decodeURIComponent(rollout[1])} place={place} />;
  if (place.path === '/training') return <TrainingPage />;
  if (place.path === '/evaluations') return <EvaluationsPage place={place} />;
  if (place.path === '/runners') return <RunnersPage />;
  if (place.path === '/sql') return <SqlPage />;
  if (place.path === '/' || place.path === '/rollouts') return <RolloutsPage place={place} />;
  return (
    <main id="main" class="page">
      <h1>Not found</h1>
      <p>
        The dashboard has no page {place.path}. <Link href="/">Rollouts</Link>
      </p>
    </main>
  );
}
