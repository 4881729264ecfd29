/**
 * Numbers: the carrier numbers the organization imported (GET /v1/telco/numbers) with the agent
 * each one routes to, and the SIP trunk assignments (numbers dialed on a trunk routed to an
 * agent) with their routing_warnings: why calls to a number will not reach the agent. A new
 * assignment is made here too; importing a carrier number needs the carrier account's token,
 * sent once and never shown.
 */
import { html, useEffect, useState } from '../vendor/preact-htm.mjs';
import { api } from '../lib/api.js';
import { Alert, ConfirmButton, Field, Status, useResource, when } from './admin-ui.js';

function CarrierNumbers({ agents }) {
  const numbers = useResource('/v1/telco/numbers');
  const [form, setForm] = useState({ phone_number: '', account_sid: '', auth_token: '', label: '' });
  const [error, setError] = useState('');
  const [note, setNote] = useState('');
  const bind = (name) => ({ name, error, value: form[name], onInput: (e) => setForm({ ...form, [name]: e.currentTarget.value }) });
  const routedTo = (id) => agents.filter((a) => a.phone_number_id === id).map((a) => a.name).join(', ');

  const importNumber = async (e) => {
    e.preventDefault();
    setError('');
    setNote('');
    const body = { phone_number: form.phone_number.trim(), account_sid: form.account_sid.trim(), auth_token: form.auth_token };
    if (form.label.trim()) body.label = form.label.trim();
    try {
      const n = await api('/v1/telco/numbers', { method: 'POST', body });
      setForm({ phone_number: '', account_sid: '', auth_token: '', label: '' });
      setNote(`${n.phone_number} imported.`);
      numbers.reload();
    } catch (err) {
      setError(err.message);
    }
  };

  return html`<section aria-labelledby="carrier-title">
    <h2 id="carrier-title">Carrier numbers</h2>
    <${Alert} message=${numbers.error} />
    ${note ? html`<${Status} message=${note} />` : null}
    ${numbers.data === null
      ? html`<p aria-busy="true">Loading…</p>`
      : html`<div class="overflow-auto"><table class="striped" data-testid="carrier-numbers">
          <thead><tr><th scope="col">Number</th><th scope="col">Label</th><th scope="col">Carrier account</th><th scope="col">Agent</th><th scope="col">Imported</th></tr></thead>
          <tbody>${numbers.data.length === 0
            ? html`<tr><td colspan="5" class="muted">No carrier numbers imported.</td></tr>`
            : numbers.data.map(
                (n) => html`<tr key=${n.id}><td>${n.phone_number}</td><td>${n.label}</td><td>${n.account_sid}</td>
                  <td>${routedTo(n.id) || html`<span class="muted">none (set the agent's phone_number_id)</span>`}</td><td>${when(n.created_at)}</td></tr>`,
              )}</tbody>
        </table></div>`}
    <details>
      <summary>Import a carrier number</summary>
      <form onSubmit=${importNumber} aria-label="Import a carrier number">
        <div class="grid">
          <${Field} label="Phone number (E.164)" ...${bind('phone_number')} required />
          <${Field} label="Label" ...${bind('label')} />
        </div>
        <div class="grid">
          <${Field} label="Carrier account SID" ...${bind('account_sid')} required autocomplete="off" />
          <${Field} label="Carrier auth token" type="password" ...${bind('auth_token')} required autocomplete="off" hint="write-only: stored sealed, never shown" />
        </div>
        <${Alert} message=${error} />
        <button type="submit">Import number</button>
      </form>
    </details>
  </section>`;
}

function Assignments({ agents, trunks }) {
  const [rows, setRows] = useState(null);
  const [generation, setGeneration] = useState(0);
  const [loadError, setLoadError] = useState('');
  const [form, setForm] = useState({ sip_trunk_id: '', agent_id: '', number: '', alternate_number: '' });
  const [error, setError] = useState('');
  const [note, setNote] = useState('');
  const bind = (name) => ({ name, error, value: form[name], onInput: (e) => setForm({ ...form, [name]: e.currentTarget.value }) });
  const agentName = (id) => agents.find((a) => a.id === id)?.name ?? id;

  useEffect(() => {
    let stale = false;
    Promise.all(trunks.map((t) => api(`/v1/sip-trunks/${t.id}/assignments`).then((list) => list.map((a) => ({ ...a, trunk: t })))))
      .then((lists) => !stale && (setRows(lists.flat()), setLoadError('')))
      .catch((err) => !stale && setLoadError(err.message));
    return () => {
      stale = true;
    };
  }, [trunks, generation]);

  const create = async (e) => {
    e.preventDefault();
    setError('');
    setNote('');
    const body = { agent_id: form.agent_id };
    if (form.number.trim()) body.number = form.number.trim();
    if (form.alternate_number.trim()) body.alternate_number = form.alternate_number.trim();
    try {
      if (!form.sip_trunk_id) throw new Error('Choose a SIP trunk.');
      await api(`/v1/sip-trunks/${form.sip_trunk_id}/assignments`, { method: 'POST', body });
      setForm({ ...form, number: '', alternate_number: '' });
      setNote('Assignment created.');
      setGeneration((g) => g + 1);
    } catch (err) {
      setError(err.message);
    }
  };
  const remove = async (a) => {
    setError('');
    try {
      await api(`/v1/sip-trunks/assignments/${a.id}`, { method: 'DELETE' });
      setNote('Assignment deleted.');
      setGeneration((g) => g + 1);
    } catch (err) {
      setError(err.message);
    }
  };

  return html`<section aria-labelledby="assignments-title">
    <h2 id="assignments-title">SIP trunk assignments</h2>
    <${Alert} message=${loadError} />
    ${note ? html`<${Status} message=${note} />` : null}
    ${rows === null
      ? html`<p aria-busy="true">Loading…</p>`
      : html`<div class="overflow-auto"><table class="striped" data-testid="assignments">
          <thead><tr><th scope="col">Trunk</th><th scope="col">Number (digest)</th><th scope="col">Alternate number (ACL)</th><th scope="col">Agent</th>
            <th scope="col">Routing warnings</th><th scope="col"><span class="muted">Action</span></th></tr></thead>
          <tbody>${rows.length === 0
            ? html`<tr><td colspan="6" class="muted">No numbers assigned on any trunk.</td></tr>`
            : rows.map(
                (a) => html`<tr key=${a.id} data-assignment-id=${a.id}>
                  <td>${a.trunk.name || a.trunk.id}</td><td>${a.number || '–'}</td><td>${a.alternate_number || '–'}</td><td>${agentName(a.agent_id)}</td>
                  <td data-testid="routing-warnings">${a.routing_warnings.length === 0
                    ? html`<span class="muted">routes as configured</span>`
                    : html`<ul>${a.routing_warnings.map((w) => html`<li class="warn">${w}</li>`)}</ul>`}</td>
                  <td><${ConfirmButton} label="Remove" fullLabel=${`Remove ${a.number || a.alternate_number}`} confirmLabel="Remove for good" onConfirm=${() => remove(a)} /></td>
                </tr>`,
              )}</tbody>
        </table></div>`}
    <form onSubmit=${create} aria-labelledby="new-assignment-title">
      <h3 id="new-assignment-title">Route a number to an agent</h3>
      <div class="grid">
        <${Field} label="SIP trunk" as="select" ...${bind('sip_trunk_id')} required>
          <option value="">choose…</option>${trunks.map((t) => html`<option value=${t.id}>${t.name || t.id}</option>`)}
        <//>
        <${Field} label="Agent" as="select" ...${bind('agent_id')} required>
          <option value="">choose…</option>${agents.map((a) => html`<option value=${a.id}>${a.name}</option>`)}
        <//>
      </div>
      <div class="grid">
        <${Field} label="Number" ...${bind('number')} hint="dialed number on a digest trunk" />
        <${Field} label="Alternate number" ...${bind('alternate_number')} hint="dialed number on an ACL trunk" />
      </div>
      <${Alert} message=${error} />
      <button type="submit">Assign number</button>
    </form>
  </section>`;
}

export function NumbersPage() {
  const agents = useResource('/v1/agents?limit=100');
  const trunks = useResource('/v1/sip-trunks?limit=100');
  return html`<section aria-labelledby="numbers-title">
    <h1 id="numbers-title">Numbers</h1>
    <${Alert} message=${agents.error || trunks.error} />
    ${agents.data === null || trunks.data === null
      ? html`<p aria-busy="true">Loading…</p>`
      : html`<${CarrierNumbers} agents=${agents.data} /><${Assignments} agents=${agents.data} trunks=${trunks.data} />`}
  </section>`;
}
