/**
 * Client routes in the URL's path and query (the server answers index.html for each), so every
 * view can be bookmarked and Back works: /, /rollouts/{id}?attempt=..., /training, /runners, /sql.
 */
import type { AnchorHTMLAttributes, ComponentChildren } from 'preact';
import { useEffect, useState } from 'preact/hooks';

const CHANGE = 'agl:navigate';

export interface Place {
  readonly path: string;
  readonly query: URLSearchParams;
}

const here = (): Place => ({ path: location.pathname, query: new URLSearchParams(location.search) });

/** The current place; re-renders on navigation and on Back/Forward. */
export function usePlace(): Place {
  const [place, setPlace] = useState(here);
  useEffect(() => {
    const update = () => setPlace(here());
    addEventListener('popstate', update);
    addEventListener(CHANGE, update);
    return () => {
      removeEventListener('popstate', update);
      removeEventListener(CHANGE, update);
    };
  }, []);
  return place;
}

/** Goes to `url`; `replace` for changes that should not make a Back step (typing a filter). */
export function navigate(url: string, { replace = false } = {}): void {
  if (url === location.pathname + location.search) return;
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  dispatchEvent(new Event(CHANGE));
}

/** A URL of `path` with these query parameters (empty and undefined ones left out). */
export function urlOf(path: string, params: Record<string, string | number | undefined>): string {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params))
    if (value !== undefined && value !== '') query.set(key, String(value));
  const text = query.toString();
  return text ? `${path}?${text}` : path;
}

/** A link that navigates in the page (a new tab still works: it is a real href). */
export function Link(props: { href: string; children: ComponentChildren } & AnchorHTMLAttributes<HTMLAnchorElement>) {
  const { href, children, ...rest } = props;
  const onClick = (event: MouseEvent) => {
    if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(href);
  };
  return (
    <a href={href} onClick={onClick} {...rest}>
      {children}
    </a>
  );
}
