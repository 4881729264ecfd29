/**
 * The per-turn latency of a call (its `latency` field, docs/calls.md) as a Chart.js stacked bar
 * chart: one bar per turn, one segment per stage. Chart.js is the UMD build loaded by index.html
 * (window.Chart). The canvas is an image to assistive technology, labelled with the figures it
 * draws; the table below it says the same in text.
 */
import { html, useEffect, useRef } from '../vendor/preact-htm.mjs';

/** The stages in the order a turn goes through them (src/domain/turn-latency.ts). */
export const STAGES = ['stt', 'turn_commit', 'llm', 'sentence', 'tts', 'playout'];
const STAGE_LABELS = { stt: 'STT', turn_commit: 'turn commit', llm: 'LLM first token', sentence: 'first sentence', tts: 'TTS first audio', playout: 'playout' };
const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b'];

function ms(v) {
  return `${Math.round(v)} ms`;
}

/** What the chart shows, as one sentence per turn. */
export function latencyDescription(turns) {
  const parts = turns.map((t) => {
    const stages = STAGES.filter((s) => t.stages?.[s] !== undefined).map((s) => `${STAGE_LABELS[s]} ${ms(t.stages[s])}`);
    const v2v = t.voice_to_voice_ms !== undefined ? `, voice to voice ${ms(t.voice_to_voice_ms)}` : '';
    return `turn ${t.index + 1}: ${stages.join(', ') || 'no stage measured'}${v2v}`;
  });
  return `Latency per turn, stacked by stage: ${parts.join('; ')}.`;
}

export function LatencyChart({ latency }) {
  const canvas = useRef(null);
  const turns = latency?.turns ?? [];
  useEffect(() => {
    if (!canvas.current || turns.length === 0 || !window.Chart) return undefined;
    const chart = new window.Chart(canvas.current, {
      type: 'bar',
      data: {
        labels: turns.map((t) => `Turn ${t.index + 1}`),
        datasets: STAGES.map((s, i) => ({ label: STAGE_LABELS[s], data: turns.map((t) => t.stages?.[s] ?? 0), backgroundColor: COLORS[i] })),
      },
      options: {
        animation: false,
        maintainAspectRatio: false,
        scales: { x: { stacked: true }, y: { stacked: true, title: { display: true, text: 'ms' } } },
        plugins: { legend: { position: 'bottom' } },
      },
    });
    return () => chart.destroy();
  }, [latency]);

  if (turns.length === 0) return html`<p class="muted" data-testid="no-latency">No turn latency was recorded for this call.</p>`;
  const summary = latency.summary;
  return html`<div class="chart-box"><canvas ref=${canvas} role="img" aria-label=${latencyDescription(turns)} data-testid="latency-chart"></canvas></div>
    <details>
      <summary>Figures</summary>
      <table class="numbers">
        <thead><tr><th scope="col">Turn</th>${STAGES.map((s) => html`<th scope="col">${STAGE_LABELS[s]}</th>`)}<th scope="col">Voice to voice</th><th scope="col">Barge-in</th></tr></thead>
        <tbody>${turns.map(
          (t) => html`<tr><th scope="row">${t.index + 1}</th>${STAGES.map((s) => html`<td>${t.stages?.[s] !== undefined ? ms(t.stages[s]) : ''}</td>`)}
            <td>${t.voice_to_voice_ms !== undefined ? ms(t.voice_to_voice_ms) : ''}</td><td>${t.barge_in_ms !== undefined ? ms(t.barge_in_ms) : ''}</td></tr>`,
        )}</tbody>
        ${summary?.voice_to_voice_ms
          ? html`<tfoot><tr><th scope="row" colspan=${STAGES.length + 1}>Voice to voice p50 / p95</th><td colspan="2">${ms(summary.voice_to_voice_ms.p50)} / ${ms(summary.voice_to_voice_ms.p95)}</td></tr></tfoot>`
          : null}
      </table>
    </details>`;
}
