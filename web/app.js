/**
 * The console's shell: sign-in gate, header with navigation, and the page the hash names. Pages
 * come from one registry: the console's own (calls, one call) and web/pages/admin.js's.
 */
import { html, render, useEffect, useState } from './vendor/preact-htm.mjs';
import { api, apiKey, clearApiKey, onUnauthorized } from './lib/api.js';
import { currentPath, navigate, useRoute } from './lib/router.js';
import { SignIn } from './pages/signin.js';
import { CallsPage } from './pages/calls.js';
import { CallPage } from './pages/call.js';
import { adminPages } from './pages/admin.js';

/** Every page: `{ path, title?, component }`; those with a title are in the navigation. */
export const pages = [{ path: '/calls', title: 'Calls', component: CallsPage }, { path: '/calls/:id', component: CallPage }, ...adminPages];

function NotFound({ path }) {
  return html`<article><h2>Not found</h2><p>The console has no page ${path}.</p><a href="#/calls">Calls</a></article>`;
}

function Header({ org, path, onSignOut }) {
  return html`<header class="console">
    <nav aria-label="Console">
      <ul><li><strong>callbridge</strong></li>${org ? html`<li class="muted">${org.name}</li>` : null}</ul>
      <ul>
        ${pages
          .filter((p) => p.title)
          .map((p) => html`<li><a href=${`#${p.path}`} aria-current=${path === p.path || path.startsWith(`${p.path}/`) ? 'page' : undefined}>${p.title}</a></li>`)}
        <li><button type="button" class="secondary outline" onClick=${onSignOut}>Sign out</button></li>
      </ul>
    </nav>
  </header>`;
}

function App() {
  const [org, setOrg] = useState(null);
  const [signedIn, setSignedIn] = useState(apiKey() !== null);
  const { route, params, path } = useRoute(pages);

  const signOut = () => {
    clearApiKey();
    setOrg(null);
    setSignedIn(false);
  };
  useEffect(() => onUnauthorized(signOut), []);
  useEffect(() => {
    if (!signedIn) return;
    if (currentPath() === '/' || currentPath() === '/signin') navigate('/calls');
    // A reload keeps the key (sessionStorage) but not the organization's name.
    if (org === null) api('/v1/organization').then(setOrg, () => undefined);
  }, [signedIn]);

  if (!signedIn) {
    return html`<main class="container"><${SignIn} onSignedIn=${(o) => { setOrg(o); setSignedIn(true); }} /></main>`;
  }
  const Page = route?.component;
  return html`<${Header} org=${org} path=${path} onSignOut=${signOut} />
    <main class="container">${Page ? html`<${Page} params=${params} />` : html`<${NotFound} path=${path} />`}</main>`;
}

render(html`<${App} />`, document.getElementById('app'));
