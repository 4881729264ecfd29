/**
 * One call: what an operator needs for a carrier ticket (ids, numbers, trunk, times, how it
 * ended), its recording (fetched with the API key into a blob: URL), its transcript as a
 * conversation (tool calls with name, arguments and output) and its per-turn latency chart.
 */
import { html, useEffect, useState } from '../vendor/preact-htm.mjs';
import { api, apiBlob } from '../lib/api.js';
import { dateTime, duration, loadNames } from '../lib/format.js';
import { LatencyChart } from '../components/latency-chart.js';

/** "486 Busy Here": the final response as a carrier quotes it; undefined when the call had none. */
function sipStatus(sip) {
  if (sip?.final_status === undefined) return undefined;
  return sip.final_reason ? `${sip.final_status} ${sip.final_reason}` : String(sip.final_status);
}

function Details({ call, names }) {
  const rows = [
    ['Call id', call.id],
    ['Direction', call.direction ?? call.source],
    ['From', call.from],
    ['To', call.to],
    ['Agent', call.agent_id ? `${names.agents.get(call.agent_id) ?? ''} (${call.agent_id})` : '(deleted)'],
    ['Agent version', call.graph_version_id],
    ['SIP trunk', call.sip_trunk_id ? `${names.trunks.get(call.sip_trunk_id) ?? ''} (${call.sip_trunk_id})` : undefined],
    ['Carrier call id', call.carrier_call_id],
    ['SIP Call-ID', call.sip?.call_id],
    ['Final SIP status', sipStatus(call.sip)],
    ['Created', dateTime(call.created_at)],
    ['Answered', dateTime(call.connected_at ?? call.started_at)],
    ['Ended', dateTime(call.ended_at)],
    ['Duration', duration(call.duration_seconds)],
    ['Status', call.status],
    ['End status', call.end_status],
    ['Termination reason', call.termination_reason],
    ['Outcome', call.outcome],
    ['Tags', call.tags?.join(', ')],
  ].filter(([, v]) => v !== undefined && v !== '');
  return html`<dl class="details" data-testid="call-details">${rows.map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`)}</dl>`;
}

function Recording({ call }) {
  const [url, setUrl] = useState(null);
  const [error, setError] = useState('');
  useEffect(() => {
    if (!call.has_recording) return undefined;
    let objectUrl;
    let gone = false;
    apiBlob(`/v1/calls/${encodeURIComponent(call.id)}/recording`)
      .then((blob) => {
        if (gone) return;
        objectUrl = URL.createObjectURL(blob);
        setUrl(objectUrl);
      })
      .catch((err) => !gone && setError(err.message));
    return () => {
      gone = true;
      if (objectUrl) URL.revokeObjectURL(objectUrl);
    };
  }, [call.id, call.has_recording]);
  if (!call.has_recording) return html`<p class="muted">No recording (recording is off, or the call was never answered).</p>`;
  if (error) return html`<p role="alert" class="warn">Could not load the recording: ${error}</p>`;
  if (!url) return html`<p aria-busy="true">Loading the recording…</p>`;
  return html`<audio controls preload="metadata" src=${url} aria-label="Call recording: left channel the caller, right channel the agent" data-testid="recording"></audio>`;
}

/** A JSON text shown pretty when it parses, as it is otherwise. */
function pretty(text) {
  if (typeof text !== 'string') return text === undefined ? '' : JSON.stringify(text, null, 2);
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function Entry({ e }) {
  if (e.type === 'tool_call' || e.type === 'tool_call_output') {
    const t = e.toolCall ?? {};
    const output = e.toolCallOutput ?? t.output;
    return html`<li class="tool"><span class="who">Tool call: ${t.toolName ?? '(unnamed)'}</span>
      ${t.arguments !== undefined ? html`<div>Arguments: <code>${pretty(t.arguments)}</code></div>` : null}
      ${output !== undefined ? html`<div>Output: <code>${pretty(output)}</code></div>` : null}</li>`;
  }
  if (e.type === 'interruption') return html`<li class="tool muted"><span class="who">The caller interrupted</span></li>`;
  const role = e.role ?? 'system';
  const who = role === 'user' ? 'Caller' : role === 'assistant' ? 'Agent' : 'System';
  return html`<li class=${role}><span class="who">${who}${e.interrupted ? ' (interrupted)' : ''}</span>${e.message ?? ''}</li>`;
}

export function CallPage({ params }) {
  const [call, setCall] = useState(null);
  const [names, setNames] = useState({ agents: new Map(), trunks: new Map() });
  const [error, setError] = useState('');
  useEffect(() => {
    setCall(null);
    setError('');
    api(`/v1/calls/${encodeURIComponent(params.id)}`).then(setCall, (err) => setError(err.message));
    loadNames(api).then(setNames);
  }, [params.id]);

  if (error) return html`<article><h1>Call</h1><p role="alert" class="warn">${error}</p><a href="#/calls">Back to calls</a></article>`;
  if (!call) return html`<p aria-busy="true">Loading the call…</p>`;
  const entries = call.transcript?.entries ?? [];
  return html`<nav aria-label="Breadcrumb"><ul><li><a href="#/calls">Calls</a></li><li>${call.from ?? ''} → ${call.to ?? ''}</li></ul></nav>
    <h1>Call</h1>
    <section aria-labelledby="details-title"><h2 id="details-title">Details</h2><${Details} call=${call} names=${names} /></section>
    <section aria-labelledby="recording-title"><h2 id="recording-title">Recording</h2><${Recording} call=${call} /></section>
    <section aria-labelledby="latency-title"><h2 id="latency-title">Latency per turn</h2><${LatencyChart} latency=${call.latency} /></section>
    <section aria-labelledby="transcript-title"><h2 id="transcript-title">Transcript</h2>
      ${entries.length === 0 ? html`<p class="muted">No transcript.</p>` : html`<ol class="transcript" data-testid="transcript">${entries.map((e, i) => html`<${Entry} key=${e.index ?? i} e=${e} />`)}</ol>`}
    </section>`;
}
