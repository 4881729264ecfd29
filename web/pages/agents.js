/**
 * Agents: the organization's agents, a new one by name, and one agent's page: its settings
 * (prompt, first message, voice, VAD) saved with PATCH /v1/agents/{id}, and its versions
 * (POST /v1/agents/{id}/versions snapshots the draft, .../publish makes one live). A validation
 * error from the API is shown next to the field it names and announced.
 */
import { html, useEffect, useState } from '../vendor/preact-htm.mjs';
import { api } from '../lib/api.js';
import { navigate } from '../lib/router.js';
import { Alert, ConfirmButton, Field, Status, useResource, when } from './admin-ui.js';

export function AgentsPage() {
  const agents = useResource('/v1/agents?limit=100');
  const [name, setName] = useState('');
  const [error, setError] = useState('');

  const create = async (e) => {
    e.preventDefault();
    setError('');
    try {
      const agent = await api('/v1/agents', { method: 'POST', body: { name: name.trim() } });
      navigate(`/agents/${agent.id}`);
    } catch (err) {
      setError(err.message);
    }
  };

  return html`<section aria-labelledby="agents-title">
    <h1 id="agents-title">Agents</h1>
    <${Alert} message=${agents.error} />
    ${agents.data === null
      ? html`<p aria-busy="true">Loading…</p>`
      : html`<div class="overflow-auto"><table class="striped" data-testid="agents">
          <thead><tr><th scope="col">Name</th><th scope="col">Status</th><th scope="col">Model</th><th scope="col">Voice</th><th scope="col">Updated</th></tr></thead>
          <tbody>${agents.data.length === 0
            ? html`<tr><td colspan="5" class="muted">No agents yet.</td></tr>`
            : agents.data.map(
                (a) => html`<tr key=${a.id} data-agent-id=${a.id}>
                  <td><a href=${`#/agents/${a.id}`}>${a.name}</a></td><td>${a.status}</td><td>${a.llm}</td>
                  <td>${a.voice_settings.id} <small class="muted">(${a.voice_settings.provider})</small></td><td>${when(a.updated_at)}</td>
                </tr>`,
              )}</tbody>
        </table></div>`}
    <form onSubmit=${create} aria-labelledby="new-agent-title">
      <h2 id="new-agent-title">New agent</h2>
      <${Field} label="Name" name="name" error=${error} required value=${name} onInput=${(e) => setName(e.currentTarget.value)} />
      <${Alert} id="new-agent-error" message=${error} />
      <button type="submit">Create agent</button>
    </form>
  </section>`;
}

/** The form's fields from an agent (text inputs hold strings). */
function formOf(agent) {
  return {
    name: agent.name,
    status: agent.status,
    prompt: agent.prompt,
    first_message: agent.first_message,
    'voice_settings.provider': agent.voice_settings.provider,
    'voice_settings.id': agent.voice_settings.id,
    'vad_settings.start_secs': String(agent.vad_settings.start_secs),
    'vad_settings.stop_secs': String(agent.vad_settings.stop_secs),
    'vad_settings.silence_timeout_secs': String(agent.vad_settings.silence_timeout_secs),
  };
}

/**
 * The PATCH body: only what the form changed (another operator's edit of another field is not
 * overwritten). Numbers go as numbers; a field that is empty or not a number goes as typed, for
 * the API to name. voice_settings replaces the whole object on the server, so the voice's tuning
 * fields (speed, stability, ...), which this form does not show, are sent along unchanged.
 */
function patchOf(form, agent) {
  const num = (v) => (v.trim() !== '' && Number.isFinite(Number(v)) ? Number(v) : v);
  const before = formOf(agent);
  const changed = (name) => form[name] !== before[name];
  const body = {};
  for (const name of ['name', 'status', 'prompt', 'first_message']) if (changed(name)) body[name] = form[name];
  if (changed('voice_settings.provider') || changed('voice_settings.id')) {
    body.voice_settings = { ...agent.voice_settings, provider: form['voice_settings.provider'], id: form['voice_settings.id'] };
  }
  const vad = {};
  for (const field of ['start_secs', 'stop_secs', 'silence_timeout_secs']) {
    if (changed(`vad_settings.${field}`)) vad[field] = num(form[`vad_settings.${field}`]);
  }
  if (Object.keys(vad).length > 0) body.vad_settings = vad;
  return body;
}

const PROVIDERS = ['provider_1', 'provider_2', 'provider_3', 'provider_4', 'provider_5', 'provider_6'];

function AgentForm({ agent, voices, onSaved }) {
  const [form, setForm] = useState(formOf(agent));
  const [error, setError] = useState('');
  const [saved, setSaved] = useState('');
  const [busy, setBusy] = useState(false);
  useEffect(() => setForm(formOf(agent)), [agent]);
  const bind = (name) => ({ name, error, value: form[name], onInput: (e) => setForm({ ...form, [name]: e.currentTarget.value }) });

  const save = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    setSaved('');
    try {
      const updated = await api(`/v1/agents/${agent.id}`, { method: 'PATCH', body: patchOf(form, agent) });
      setSaved(`Saved at ${new Date().toLocaleTimeString()}.`);
      onSaved(updated);
    } catch (err) {
      setError(err.message);
    } finally {
      setBusy(false);
    }
  };

  const provider = form['voice_settings.provider'];
  const providerVoices = voices.filter((v) => v.provider === provider);
  return html`<form onSubmit=${save} aria-labelledby="settings-title" data-testid="agent-form">
    <h2 id="settings-title">Settings</h2>
    <${Field} label="Name" ...${bind('name')} required />
    <${Field} label="Status" as="select" ...${bind('status')}>
      <option value="active">active</option><option value="inactive">inactive</option>
    <//>
    <${Field} label="Prompt" as="textarea" rows="8" ...${bind('prompt')} />
    <${Field} label="First message" as="textarea" rows="2" ...${bind('first_message')} hint="Said when the call connects; empty: the agent waits for the caller." />
    <fieldset>
      <legend>Voice</legend>
      <div class="grid">
        <${Field} label="Voice provider" as="select" ...${bind('voice_settings.provider')}>
          ${[...new Set([...PROVIDERS, provider])].map((p) => html`<option value=${p}>${p}</option>`)}
        <//>
        <${Field} label="Voice id" ...${bind('voice_settings.id')} list="voice-ids" autocomplete="off" />
      </div>
      <datalist id="voice-ids">${providerVoices.map((v) => html`<option value=${v.id}>${v.name}</option>`)}</datalist>
    </fieldset>
    <fieldset>
      <legend>Voice activity detection (seconds)</legend>
      <div class="grid">
        <${Field} label="Speech start" type="number" step="0.05" min="0" ...${bind('vad_settings.start_secs')} />
        <${Field} label="Speech stop" type="number" step="0.05" min="0" ...${bind('vad_settings.stop_secs')} />
        <${Field} label="Silence timeout" type="number" step="1" min="0" ...${bind('vad_settings.silence_timeout_secs')} />
      </div>
    </fieldset>
    <${Alert} id="agent-error" message=${error} />
    ${saved ? html`<${Status} message=${saved} />` : null}
    <button type="submit" aria-busy=${busy ? 'true' : undefined} disabled=${busy}>Save</button>
  </form>`;
}

function Versions({ agent, onPublished }) {
  const versions = useResource(`/v1/agents/${agent.id}/versions`);
  const [tag, setTag] = useState('');
  const [error, setError] = useState('');

  const snapshot = async (e) => {
    e.preventDefault();
    setError('');
    try {
      await api(`/v1/agents/${agent.id}/versions`, { method: 'POST', body: { tag: tag.trim() } });
      setTag('');
      versions.reload();
    } catch (err) {
      setError(err.message);
    }
  };
  const publish = async (version) => {
    setError('');
    try {
      await api(`/v1/agents/${agent.id}/versions/${version.id}/publish`, { method: 'POST' });
      versions.reload();
      onPublished();
    } catch (err) {
      setError(err.message);
    }
  };

  const live = versions.data?.filter((v) => v.published_at).sort((a, b) => b.published_at.localeCompare(a.published_at))[0];
  return html`<section aria-labelledby="versions-title">
    <h2 id="versions-title">Versions</h2>
    <p class="muted">A version is a snapshot of the agent's conversation flow (its draft); new calls run the published one.</p>
    <${Alert} message=${versions.error || error} />
    ${versions.data === null
      ? html`<p aria-busy="true">Loading…</p>`
      : html`<table class="striped" data-testid="versions">
          <thead><tr><th scope="col">Tag</th><th scope="col">Created</th><th scope="col">Published</th><th scope="col"><span class="muted">Action</span></th></tr></thead>
          <tbody>${versions.data.length === 0
            ? html`<tr><td colspan="4" class="muted">No versions yet.</td></tr>`
            : versions.data.map(
                (v) => html`<tr key=${v.id} data-version-id=${v.id}>
                  <td>${v.tag}${live?.id === v.id ? html` <mark>live</mark>` : null}</td><td>${when(v.created_at)}</td><td>${when(v.published_at)}</td>
                  <td><${ConfirmButton} label="Publish" fullLabel=${`Publish ${v.tag}`} confirmLabel=${`Publish ${v.tag} now`} onConfirm=${() => publish(v)} /></td>
                </tr>`,
              )}</tbody>
        </table>`}
    <form onSubmit=${snapshot} aria-label="New version">
      <${Field} label="New version tag" name="tag" error=${error} required value=${tag} onInput=${(e) => setTag(e.currentTarget.value)} />
      <button type="submit">Create version</button>
    </form>
  </section>`;
}

export function AgentPage({ params }) {
  const agent = useResource(`/v1/agents/${encodeURIComponent(params.id)}`);
  const voices = useResource('/v1/voices');
  const [current, setCurrent] = useState(null);
  useEffect(() => setCurrent(agent.data), [agent.data]);

  if (agent.error && !current) return html`<article><${Alert} message=${agent.error} /><a href="#/agents">All agents</a></article>`;
  if (!current) return html`<p aria-busy="true">Loading…</p>`;
  return html`<article>
    <nav aria-label="Breadcrumb"><ul><li><a href="#/agents">Agents</a></li><li>${current.name}</li></ul></nav>
    <h1>${current.name}</h1>
    <${AgentForm} agent=${current} voices=${voices.data?.voices ?? []} onSaved=${setCurrent} />
    <${Versions} agent=${current} onPublished=${agent.reload} />
  </article>`;
}
