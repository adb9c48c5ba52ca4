/**
 * Light or dark: the system's choice until the user picks one (kept in localStorage). The theme
 * is an attribute on <html> that the stylesheet's colour variables follow.
 */
import { useEffect, useState } from 'preact/hooks';

export type Theme = 'light' | 'dark';
const KEY = 'agl.theme';
const CHANGE = 'agl:theme';

const systemTheme = (): Theme => (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light');

export function currentTheme(): Theme {
  const chosen = localStorage.getItem(KEY);
  return chosen === 'light' || chosen === 'dark' ? chosen : systemTheme();
}

export function applyTheme(theme: Theme = currentTheme()): void {
  document.documentElement.dataset.theme = theme;
}

export function setTheme(theme: Theme): void {
  localStorage.setItem(KEY, theme);
  applyTheme(theme);
  dispatchEvent(new Event(CHANGE));
}

/** The theme in use; re-renders when it changes (charts draw in its colours). */
export function useTheme(): Theme {
  const [theme, set] = useState(currentTheme);
  useEffect(() => {
    const update = () => set(currentTheme());
    const media = matchMedia('(prefers-color-scheme: dark)');
    addEventListener(CHANGE, update);
    media.addEventListener('change', update);
    return () => {
      removeEventListener(CHANGE, update);
      media.removeEventListener('change', update);
    };
  }, []);
  return theme;
}
