/**
 * Calls: the calls this node bridges now (GET /v1/calls/live, polled while the page is visible)
 * with their audio quality, and the history (GET /v1/calls) with its filters, paged.
 */
import { html, useEffect, useRef, useState } from '../vendor/preact-htm.mjs';
import { api } from '../lib/api.js';
import { dateTime, duration, loadNames, percent, secondsSince } from '../lib/format.js';

const LIVE_POLL_MS = 1500;
const PAGE_SIZE = 20;
const STATUSES = ['connected', 'started', 'in_progress', 'auth_failed', 'ended'];
const OUTCOMES = ['transferred', 'ended_by_agent', 'ended_by_user'];

/** Calls `tick` every `ms` while the tab is visible (and once at once); stops when hidden. */
function useVisiblePoll(tick, ms) {
  const latest = useRef(tick);
  latest.current = tick;
  useEffect(() => {
    let timer;
    let inFlight = false;
    let stopped = false;
    // One request at a time: a tab shown again while one is on its way waits for it.
    const run = () => {
      clearTimeout(timer);
      if (stopped || inFlight || document.visibilityState !== 'visible') return;
      inFlight = true;
      Promise.resolve(latest.current()).finally(() => {
        inFlight = false;
        if (!stopped) timer = setTimeout(run, ms);
      });
    };
    document.addEventListener('visibilitychange', run);
    run();
    return () => {
      stopped = true;
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', run);
    };
  }, [ms]);
}

function line(call, names) {
  if (call.sip_trunk_id) return `trunk ${names.trunks.get(call.sip_trunk_id) ?? call.sip_trunk_id}`;
  return call.to ?? '';
}

function LiveCalls({ names, onChange }) {
  const [calls, setCalls] = useState(null);
  const [error, setError] = useState('');
  const [now, setNow] = useState(Date.now());
  const ids = useRef('');
  useVisiblePoll(async () => {
    try {
      const r = await api('/v1/calls/live');
      setCalls(r.calls);
      setError('');
      setNow(Date.now());
      const key = r.calls.map((c) => c.id).join(',');
      if (key !== ids.current) {
        ids.current = key;
        onChange();
      }
    } catch (err) {
      setError(err.message);
    }
  }, LIVE_POLL_MS);

  return html`<section aria-labelledby="live-title">
    <h2 id="live-title">Live calls <small class="muted">(this node)</small></h2>
    ${error ? html`<p role="alert" class="warn">Could not load live calls: ${error}</p>` : null}
    ${calls === null
      ? html`<p aria-busy="true">Loading…</p>`
      : calls.length === 0
        ? html`<p class="muted" data-testid="no-live-calls">No calls in progress on this node.</p>`
        : html`<div class="overflow-auto"><table class="striped numbers" data-testid="live-calls">
            <thead><tr><th scope="col">Agent</th><th scope="col">Trunk or number</th><th scope="col">Caller</th><th scope="col">Duration</th><th scope="col">State</th>
              <th scope="col">Loss</th><th scope="col">Jitter</th><th scope="col">Late frames</th></tr></thead>
            <tbody>${calls.map(
              (c) => html`<tr key=${c.id} data-call-id=${c.id}>
                <td><a href=${`#/calls/${c.id}`}>${names.agents.get(c.agent_id) ?? c.agent_id ?? '(deleted agent)'}</a></td>
                <td>${line(c, names)}</td>
                <td>${c.from ?? c.party_number ?? ''}</td>
                <td>${duration(secondsSince(c.connected_at ?? c.started_at ?? c.created_at, now))}</td>
                <td>${c.status ?? ''}</td>
                <td class=${c.live.loss_ratio >= 0.03 ? 'warn' : ''}>${percent(c.live.loss_ratio)} <small class="muted">(${c.live.packets_lost}/${c.live.packets_received + Math.max(0, c.live.packets_lost)})</small></td>
                <td>${c.live.jitter_ms.toFixed(1)} ms</td>
                <td>${c.live.late_frames ?? '–'}</td>
              </tr>`,
            )}</tbody>
          </table></div>`}
  </section>`;
}

function Filters({ names, filters, onApply }) {
  const [draft, setDraft] = useState(filters);
  const set = (name) => (e) => setDraft({ ...draft, [name]: e.currentTarget.value });
  const submit = (e) => {
    e.preventDefault();
    onApply(draft);
  };
  const reset = () => {
    setDraft({});
    onApply({});
  };
  return html`<form onSubmit=${submit} aria-label="Call history filters">
    <div class="filters">
      <label>Status<select name="status" value=${draft.status ?? ''} onChange=${set('status')}>
        <option value="">any</option>${STATUSES.map((s) => html`<option value=${s}>${s}</option>`)}</select></label>
      <label>Agent<select name="agent" value=${draft.agent_ids ?? ''} onChange=${set('agent_ids')}>
        <option value="">any</option>${[...names.agents].map(([id, name]) => html`<option value=${id}>${name}</option>`)}</select></label>
      <label>Outcome<select name="outcome" value=${draft.outcome ?? ''} onChange=${set('outcome')}>
        <option value="">any</option>${OUTCOMES.map((s) => html`<option value=${s}>${s.replaceAll('_', ' ')}</option>`)}</select></label>
      <label>From date<input type="date" name="date_from" value=${draft.date_from ?? ''} onInput=${set('date_from')} /></label>
      <label>To date<input type="date" name="date_to" value=${draft.date_to ?? ''} onInput=${set('date_to')} /></label>
      <label>Number contains<input type="search" name="search" value=${draft.search ?? ''} onInput=${set('search')} /></label>
      <label>Tag<input type="text" name="tag" value=${draft.tag ?? ''} onInput=${set('tag')} /></label>
    </div>
    <div class="pager"><button type="submit">Apply filters</button><button type="button" class="secondary" onClick=${reset}>Clear</button></div>
  </form>`;
}

function History({ names, reload }) {
  const [filters, setFilters] = useState({});
  const [page, setPage] = useState(1);
  const [result, setResult] = useState(null);
  const [error, setError] = useState('');

  useEffect(() => {
    const q = new URLSearchParams({ page: String(page), page_size: String(PAGE_SIZE) });
    for (const [k, v] of Object.entries(filters)) if (v) q.set(k, v);
    let stale = false;
    api(`/v1/calls?${q}`)
      .then((r) => {
        if (stale) return;
        setResult(r);
        setError('');
      })
      .catch((err) => !stale && setError(err.message));
    return () => {
      stale = true;
    };
  }, [filters, page, reload]);

  const p = result?.pagination;
  return html`<section aria-labelledby="history-title">
    <h2 id="history-title">History</h2>
    <${Filters} names=${names} filters=${filters} onApply=${(f) => { setFilters(f); setPage(1); }} />
    ${error ? html`<p role="alert" class="warn">${error}</p>` : null}
    ${result === null
      ? html`<p aria-busy="true">Loading…</p>`
      : html`<div class="overflow-auto"><table class="striped numbers" data-testid="call-history">
          <thead><tr><th scope="col">Started</th><th scope="col">Direction</th><th scope="col">From</th><th scope="col">To</th><th scope="col">Agent</th>
            <th scope="col">Duration</th><th scope="col">Status</th><th scope="col">End</th></tr></thead>
          <tbody>${result.calls.length === 0
            ? html`<tr><td colspan="8" class="muted">No calls match.</td></tr>`
            : result.calls.map(
                (c) => html`<tr key=${c.id} data-call-id=${c.id}>
                  <td><a href=${`#/calls/${c.id}`}>${dateTime(c.created_at)}</a></td>
                  <td>${c.direction ?? c.source ?? ''}</td>
                  <td>${c.from ?? ''}</td>
                  <td>${c.to ?? ''}</td>
                  <td>${names.agents.get(c.agent_id) ?? ''}</td>
                  <td>${duration(c.duration_seconds)}</td>
                  <td>${c.status ?? ''}</td>
                  <td>${c.end_status ?? ''}${c.termination_reason ? html` <small class="muted">${c.termination_reason}</small>` : null}</td>
                </tr>`,
              )}</tbody>
        </table></div>
        <nav class="pager" aria-label="History pages">
          <button type="button" class="secondary" disabled=${!p?.has_prev} onClick=${() => setPage(page - 1)}>Previous page</button>
          <span>Page ${p?.page ?? 1} of ${Math.max(1, p?.total_pages ?? 1)} · ${p?.total ?? 0} calls</span>
          <button type="button" class="secondary" disabled=${!p?.has_next} onClick=${() => setPage(page + 1)}>Next page</button>
        </nav>`}
  </section>`;
}

export function CallsPage() {
  const [names, setNames] = useState({ agents: new Map(), trunks: new Map() });
  const [reload, setReload] = useState(0);
  useEffect(() => {
    loadNames(api).then(setNames);
  }, []);
  return html`<h1>Calls</h1>
    <${LiveCalls} names=${names} onChange=${() => setReload((n) => n + 1)} />
    <${History} names=${names} reload=${reload} />`;
}
