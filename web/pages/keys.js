/**
 * API keys: the organization's keys (prefix, name, created, last used: never the key itself),
 * a new key whose secret is shown once, and revocation. The key this console signed in with is
 * marked; revoking it signs the console out at its next request (docs/api-keys.md).
 */
import { html, useState } from '../vendor/preact-htm.mjs';
import { api } from '../lib/api.js';
import { Alert, ConfirmButton, Field, Status, useResource, when } from './admin-ui.js';

function NewKeySecret({ created, onDone }) {
  const [copied, setCopied] = useState('');
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(created.key);
      setCopied('Copied.');
    } catch {
      setCopied('Copying is not allowed here: select the key and copy it.');
    }
  };
  return html`<article aria-labelledby="secret-title" data-testid="new-key">
    <h2 id="secret-title">New key ${created.name ? `"${created.name}"` : ''}</h2>
    <p role="status">Copy this key now: it is shown only once and cannot be shown again.</p>
    <label for="new-key-secret">API key</label>
    <input id="new-key-secret" readonly value=${created.key} data-testid="new-key-secret" />
    ${copied ? html`<p class="muted">${copied}</p>` : null}
    <div class="pager">
      <button type="button" class="secondary" onClick=${copy}>Copy key</button>
      <button type="button" onClick=${onDone}>I have stored it</button>
    </div>
  </article>`;
}

export function KeysPage() {
  const keys = useResource('/v1/api-keys');
  const [name, setName] = useState('');
  const [created, setCreated] = useState(null);
  const [error, setError] = useState('');
  const [note, setNote] = useState('');

  const create = async (e) => {
    e.preventDefault();
    setError('');
    setNote('');
    try {
      setCreated(await api('/v1/api-keys', { method: 'POST', body: { name: name.trim() } }));
      setName('');
      keys.reload();
    } catch (err) {
      setError(err.message);
    }
  };
  const revoke = async (k) => {
    setError('');
    setNote('');
    try {
      await api(`/v1/api-keys/${k.id}`, { method: 'DELETE' });
      setNote(`Key ${k.prefix}… revoked: it no longer works.`);
      keys.reload();
    } catch (err) {
      setError(err.message);
    }
  };

  return html`<section aria-labelledby="keys-title">
    <h1 id="keys-title">API keys</h1>
    <${Alert} message=${keys.error || error} />
    ${note ? html`<${Status} message=${note} />` : null}
    ${created ? html`<${NewKeySecret} created=${created} onDone=${() => setCreated(null)} />` : null}
    ${keys.data === null
      ? html`<p aria-busy="true">Loading…</p>`
      : html`<div class="overflow-auto"><table class="striped" data-testid="keys">
          <thead><tr><th scope="col">Key</th><th scope="col">Name</th><th scope="col">Created</th><th scope="col">Last used</th><th scope="col"><span class="muted">Action</span></th></tr></thead>
          <tbody>${keys.data.map(
            (k) => html`<tr key=${k.id} data-key-id=${k.id}>
              <td><code>${k.prefix}…</code>${k.current ? html` <mark>this console</mark>` : null}</td><td>${k.name || html`<span class="muted">(unnamed)</span>`}</td>
              <td>${when(k.created_at)}</td><td>${k.last_used_at ? when(k.last_used_at) : 'never'}</td>
              <td><${ConfirmButton} label="Revoke" fullLabel=${`Revoke ${k.prefix}…`} confirmLabel="Revoke for good" onConfirm=${() => revoke(k)} /></td>
            </tr>`,
          )}</tbody>
        </table></div>`}
    <form onSubmit=${create} aria-labelledby="new-key-title">
      <h2 id="new-key-title">New API key</h2>
      <${Field} label="Key name" name="name" error=${error} value=${name} onInput=${(e) => setName(e.currentTarget.value)} hint="what the key is for, e.g. the CRM integration" />
      <button type="submit">Create key</button>
    </form>
  </section>`;
}
