/**
 * SIP trunks: the list with each trunk's registration state and health (the trunk record's
 * inbound_registration_status, outbound_registration_status and outbound_registration_error),
 * and a form to create or change a trunk's basic fields, or delete it. Passwords are write-only:
 * the API never returns them, the form's password fields start empty and an empty one is not
 * sent (the stored password stays).
 */
import { html, useState } from '../vendor/preact-htm.mjs';
import { api } from '../lib/api.js';
import { Alert, ConfirmButton, Field, Status, useResource, when } from './admin-ui.js';

const PBX_TYPES = ['generic', '3cx', 'yeastar', 'webex'];
const AUTH_TYPES = ['digest', 'acl', 'none'];
/** How healthy a registration state is: the class its cell gets. */
const STATE_CLASS = { registered: '', pending: 'muted', not_registered: 'muted', failed: 'warn', auth_failed: 'warn' };

const EMPTY = {
  pbx: 'generic',
  name: '',
  inbound_auth_type: 'digest',
  inbound_host: '',
  inbound_acl: '',
  inbound_sip_username: '',
  inbound_sip_password: '',
  outbound_host: '',
  outbound_sip_username: '',
  outbound_sip_password: '',
  register: false,
};

function formOf(t) {
  return {
    ...EMPTY,
    pbx: t.pbx,
    name: t.name,
    inbound_auth_type: t.inbound_auth_type,
    inbound_host: t.inbound_host,
    inbound_acl: t.inbound_acl.join(', '),
    inbound_sip_username: t.inbound_sip_username,
    outbound_host: t.outbound_host,
    outbound_sip_username: t.outbound_sip_username,
    register: t.register,
  };
}

/**
 * The request body: text as typed (empty clears, as null would), passwords only when typed. On
 * edit only what the form changed is sent, so another operator's change of another field stays.
 */
function bodyOf(form, trunk) {
  const all = {
    pbx: form.pbx,
    name: form.name,
    inbound_auth_type: form.inbound_auth_type,
    inbound_host: form.inbound_host,
    inbound_acl: form.inbound_acl.split(/[\s,]+/).filter(Boolean),
    inbound_sip_username: form.inbound_sip_username,
    outbound_host: form.outbound_host,
    outbound_sip_username: form.outbound_sip_username,
    register: form.register,
  };
  const before = trunk ? formOf(trunk) : undefined;
  const body = before ? Object.fromEntries(Object.entries(all).filter(([k]) => form[k] !== before[k])) : all;
  if (form.inbound_sip_password) body.inbound_sip_password = form.inbound_sip_password;
  if (form.outbound_sip_password) body.outbound_sip_password = form.outbound_sip_password;
  return body;
}

function State({ status, error }) {
  return html`<span class=${STATE_CLASS[status] ?? ''}>${status.replaceAll('_', ' ')}</span>${error ? html`<br /><small class="warn">${error}</small>` : null}`;
}

function TrunkForm({ trunk, onDone, onCancel }) {
  const [form, setForm] = useState(trunk ? formOf(trunk) : EMPTY);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const bind = (name) => ({ name, error, value: form[name], onInput: (e) => setForm({ ...form, [name]: e.currentTarget.value }) });
  const keep = trunk ? 'leave empty to keep the stored one' : undefined;

  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      const saved = trunk
        ? await api(`/v1/sip-trunks/${trunk.id}`, { method: 'PATCH', body: bodyOf(form, trunk) })
        : await api('/v1/sip-trunks', { method: 'POST', body: bodyOf(form, null) });
      onDone(saved, trunk ? 'Trunk saved.' : 'Trunk created.');
    } catch (err) {
      setError(err.message);
    } finally {
      setBusy(false);
    }
  };

  return html`<form onSubmit=${submit} aria-labelledby="trunk-form-title" data-testid="trunk-form">
    <h2 id="trunk-form-title">${trunk ? `Edit ${trunk.name || 'trunk'}` : 'New SIP trunk'}</h2>
    <div class="grid">
      <${Field} label="Name" ...${bind('name')} />
      <${Field} label="PBX" as="select" ...${bind('pbx')}>${PBX_TYPES.map((p) => html`<option value=${p}>${p}</option>`)}<//>
    </div>
    <fieldset>
      <legend>Inbound (calls from the PBX)</legend>
      <div class="grid">
        <${Field} label="Authentication" as="select" ...${bind('inbound_auth_type')}>${AUTH_TYPES.map((p) => html`<option value=${p}>${p}</option>`)}<//>
        <${Field} label="Inbound host" ...${bind('inbound_host')} hint="ACL: the address the PBX sends from" />
        <${Field} label="Inbound ACL" ...${bind('inbound_acl')} hint="CIDRs, comma-separated" />
      </div>
      <div class="grid">
        <${Field} label="Inbound SIP username" ...${bind('inbound_sip_username')} autocomplete="off" />
        <${Field} label="Inbound SIP password" type="password" ...${bind('inbound_sip_password')} autocomplete="new-password" hint=${keep ?? 'write-only: never shown again'} />
      </div>
    </fieldset>
    <fieldset>
      <legend>Outbound (calls to the PBX)</legend>
      <div class="grid">
        <${Field} label="Outbound host" ...${bind('outbound_host')} hint="host[:port][;transport=tcp|tls]" />
        <${Field} label="Outbound SIP username" ...${bind('outbound_sip_username')} autocomplete="off" />
        <${Field} label="Outbound SIP password" type="password" ...${bind('outbound_sip_password')} autocomplete="new-password" hint=${keep ?? 'write-only: never shown again'} />
      </div>
      <label><input type="checkbox" name="register" role="switch" checked=${form.register} onChange=${(e) => setForm({ ...form, register: e.currentTarget.checked })} /> Register with the outbound host</label>
    </fieldset>
    <${Alert} id="trunk-error" message=${error} />
    <div class="pager">
      <button type="submit" aria-busy=${busy ? 'true' : undefined} disabled=${busy}>${trunk ? 'Save trunk' : 'Create trunk'}</button>
      ${onCancel ? html`<button type="button" class="secondary" onClick=${onCancel}>Cancel</button>` : null}
    </div>
  </form>`;
}

export function TrunksPage() {
  const trunks = useResource('/v1/sip-trunks?limit=100');
  const [editing, setEditing] = useState(null);
  const [note, setNote] = useState('');
  const [error, setError] = useState('');

  const done = (_saved, message) => {
    setEditing(null);
    setNote(message);
    trunks.reload();
  };
  const remove = async (t) => {
    setError('');
    try {
      await api(`/v1/sip-trunks/${t.id}`, { method: 'DELETE' });
      done(null, `Trunk ${t.name || t.id} deleted.`);
    } catch (err) {
      setError(err.message);
    }
  };

  return html`<section aria-labelledby="trunks-title">
    <h1 id="trunks-title">SIP trunks</h1>
    <${Alert} message=${trunks.error || error} />
    ${note ? html`<${Status} message=${note} />` : null}
    ${trunks.data === null
      ? html`<p aria-busy="true">Loading…</p>`
      : html`<div class="overflow-auto"><table class="striped" data-testid="trunks">
          <thead><tr><th scope="col">Name</th><th scope="col">PBX</th><th scope="col">Inbound auth</th><th scope="col">Inbound registration</th>
            <th scope="col">Outbound host</th><th scope="col">Outbound registration</th><th scope="col">Updated</th><th scope="col"><span class="muted">Actions</span></th></tr></thead>
          <tbody>${trunks.data.length === 0
            ? html`<tr><td colspan="8" class="muted">No SIP trunks yet.</td></tr>`
            : trunks.data.map(
                (t) => html`<tr key=${t.id} data-trunk-id=${t.id}>
                  <td>${t.name || html`<span class="muted">(unnamed)</span>`}</td><td>${t.pbx}</td>
                  <td>${t.inbound_auth_type}${t.inbound_sip_username ? html` <small class="muted">(${t.inbound_sip_username})</small>` : null}</td>
                  <td data-testid="inbound-state"><${State} status=${t.inbound_registration_status} /></td>
                  <td>${t.outbound_host || html`<span class="muted">none</span>`}</td>
                  <td data-testid="outbound-state">${t.register ? html`<${State} status=${t.outbound_registration_status} error=${t.outbound_registration_error} />` : html`<span class="muted">not registering</span>`}</td>
                  <td>${when(t.updated_at)}</td>
                  <td><div role="group">
                    <button type="button" class="secondary" aria-label=${`Edit ${t.name || 'trunk'}`} onClick=${() => { setNote(''); setEditing(t); }}>Edit</button>
                    <${ConfirmButton} label="Delete" fullLabel=${`Delete ${t.name || 'trunk'}`} confirmLabel="Delete for good" onConfirm=${() => remove(t)} />
                  </div></td>
                </tr>`,
              )}</tbody>
        </table></div>`}
    ${editing
      ? html`<${TrunkForm} key=${editing.id} trunk=${editing} onDone=${done} onCancel=${() => setEditing(null)} />`
      : html`<${TrunkForm} key="new" trunk=${null} onDone=${done} />`}
  </section>`;
}
