/** Sign-in: the operator's API key, checked against GET /v1/organization before it is kept. */
import { html, useState } from '../vendor/preact-htm.mjs';
import { api, setApiKey } from '../lib/api.js';

export function SignIn({ onSignedIn }) {
  const [key, setKey] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);

  const submit = async (event) => {
    event.preventDefault();
    const trimmed = key.trim();
    if (trimmed === '') {
      setError('Enter an API key.');
      return;
    }
    setBusy(true);
    setError('');
    try {
      const org = await api('/v1/organization', { key: trimmed });
      setApiKey(trimmed);
      onSignedIn(org);
    } catch (err) {
      setError(err.status === 401 ? 'That API key was not accepted: check it and try again.' : `Could not sign in: ${err.message}`);
    } finally {
      setBusy(false);
    }
  };

  return html`<article>
    <h1>Sign in</h1>
    <p>The console uses an API key of your organization (<code>callbridge keys create --org NAME</code>). It is kept in this tab only.</p>
    <form onSubmit=${submit}>
      <label for="api-key">API key</label>
      <input id="api-key" name="api-key" type="password" autocomplete="off" value=${key} onInput=${(e) => setKey(e.currentTarget.value)}
        aria-invalid=${error ? 'true' : undefined} aria-describedby=${error ? 'signin-error' : undefined} />
      ${error ? html`<p id="signin-error" role="alert" class="warn">${error}</p>` : null}
      <button type="submit" aria-busy=${busy ? 'true' : undefined} disabled=${busy}>Sign in</button>
    </form>
  </article>`;
}
