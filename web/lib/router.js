/**
 * Hash routing (#/calls, #/calls/<id>): the server serves one page, and a reload or a shared
 * link lands on the same view. Patterns name parameters with ':' ('/calls/:id').
 */
import { useEffect, useState } from '../vendor/preact-htm.mjs';

/** The current hash path, '/calls' for '#/calls?x=1' (the query is the page's). */
export function currentPath() {
  const hash = location.hash.replace(/^#/, '') || '/';
  return hash.split('?')[0];
}

/** The hash's query parameters ('#/calls?status=completed'). */
export function currentQuery() {
  const hash = location.hash.replace(/^#/, '');
  const i = hash.indexOf('?');
  return new URLSearchParams(i >= 0 ? hash.slice(i + 1) : '');
}

export function navigate(path) {
  location.hash = path;
}

/** Parameters of `path` under `pattern`, or null when it does not match. */
export function match(pattern, path) {
  const want = pattern.split('/').filter(Boolean);
  const got = path.split('/').filter(Boolean);
  if (want.length !== got.length) return null;
  const params = {};
  for (let i = 0; i < want.length; i++) {
    if (want[i].startsWith(':')) params[want[i].slice(1)] = decodeURIComponent(got[i]);
    else if (want[i] !== got[i]) return null;
  }
  return params;
}

/** The first route of `routes` ({ path, component }) matching the current hash, re-rendered on change. */
export function useRoute(routes) {
  const [path, setPath] = useState(currentPath());
  useEffect(() => {
    const onChange = () => setPath(currentPath());
    addEventListener('hashchange', onChange);
    return () => removeEventListener('hashchange', onChange);
  }, []);
  for (const route of routes) {
    const params = match(route.path, path);
    if (params) return { route, params, path };
  }
  return { route: undefined, params: {}, path };
}
