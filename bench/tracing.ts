/**
 * bench/tracing: the CPU one call's trace costs the daemon, with tracing off (the default: the
 * API's no-op tracer) and on (the SDK as src/tracing.ts starts it: NodeTracerProvider,
 * BatchSpanProcessor, OTLP/HTTP JSON exporter, posting to a sink on loopback in this process that
 * only reads and answers). CPU time, not wall time, so it holds on a busy machine better than the
 * session bench's per-session figure, where the difference is inside the run-to-run noise.
 *
 * One call's trace work, through the real modules: the `call` span with a SIP-like leg's
 * attributes and its traceparent (src/bridge/call-span.ts), the `session` span started from that
 * header and ended (src/session/session-spans.ts), BENCH_TRACING_TURNS (4) turns of seven marks
 * each turned into spans (src/agent/turn-trace-observer.ts), and three vendor spans per turn (a
 * span started and ended with vendor attributes, as src/agent/vendor-spans.ts does); off, as in
 * main.ts, neither the turn observer nor the vendor wrappers exist, so off is the call and session
 * spans' no-op calls only. BENCH_TRACING_CALLS (2000) calls per mode, after 200 warm-up
 * calls, 1 ms apart; on: until the exporter has sent everything (forceFlush).
 *
 * Figures: tracing_cpu_per_call_on (us of CPU per call, tracing on; baseline: off), and
 * tracing_cpu_per_call_off (baseline: 1 us, so the ratio is the value).
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { context, trace } from '@opentelemetry/api';
import { CallSpan } from '../src/bridge/call-span.ts';
import type { CallLeg } from '../src/bridge/call-leg.ts';
import { SessionSpans } from '../src/session/session-spans.ts';
import { TurnTraceObserver } from '../src/agent/turn-trace-observer.ts';
import { createLogger } from '../src/log.ts';
import { startTracing } from '../src/tracing.ts';
import type { TurnTimeline } from '../src/domain/turn-latency.ts';
import { printFigures } from './lib/result.ts';
import { envNumber } from './lib/env.ts';

const WARMUP_CALLS = 200;
const VENDOR_SPANS_PER_TURN = 3;

/** What CallSpan reads of a leg: a SIP call's identity and attributes. */
function leg(i: number): CallLeg {
  return {
    id: `leg-${i}`,
    direction: 'inbound',
    from: '+15550001111',
    to: '+15550002222',
    trunkId: '5f0c2a1e-8d7b-4d7e-9a51-0b7c2f1d9e11',
    traceAttributes: () => ({ 'callbridge.call.transport': 'sip', 'sip.call_id': `a84b4c76e66710${i}@pc33.example.com`, 'sip.final_status': 200 }),
  } as unknown as CallLeg;
}

function turn(index: number, t0: number): TurnTimeline {
  return {
    index,
    turnId: `turn-${index}`,
    kind: index === 0 ? 'first' : 'reply',
    marks: { speech_end: t0, transcript_final: t0 + 300, llm_request: t0 + 300.4, llm_first_token: t0 + 500, tts_first_sentence: t0 + 512, tts_first_audio: t0 + 660, audio_out_first: t0 + 680 },
  };
}

/** One call's trace work; `observer` only when tracing is on (main.ts registers it, and the vendor wrappers, then). */
function oneCall(i: number, turns: number, sessions: SessionSpans, observer: TurnTraceObserver | undefined): void {
  const call = new CallSpan(leg(i));
  const sessionId = `call-${i}`;
  call.sessionOpened(sessionId);
  sessions.start({ sessionId, orgId: 'org', agentId: 'agent', versionId: null, direction: 'inbound', transport: 'websocket', headers: call.propagationHeaders() });
  const parent = sessions.contextOf(sessionId) ?? context.active();
  const tracer = trace.getTracer('callbridge.agent');
  const t0 = Date.now();
  // Off, main.ts installs neither the vendor wrappers nor the turn observer: only on do turns cost.
  for (let k = 0; k < (observer !== undefined ? turns : 0); k++) {
    for (let v = 0; v < VENDOR_SPANS_PER_TURN; v++) {
      tracer.startSpan('tts', { attributes: { 'callbridge.vendor.kind': 'tts', 'callbridge.vendor.provider': 'provider_1', 'callbridge.vendor.type': 'openai', 'callbridge.tts.characters': 42 } }, parent).end();
    }
    observer?.turnComplete(sessionId, turn(k, t0 + k * 3000));
  }
  sessions.end(sessionId, 'client_closed');
  call.end('caller side ended: remote_bye', true);
}

function cpuUs(): number {
  const u = process.cpuUsage();
  return u.user + u.system;
}

export async function run(): Promise<void> {
  const calls = Math.round(envNumber('BENCH_TRACING_CALLS', 2000));
  const turns = Math.round(envNumber('BENCH_TRACING_TURNS', 4));
  const logger = createLogger('warn');

  // Off: nothing registered, the no-op API.
  const offSessions = new SessionSpans();
  for (let i = 0; i < WARMUP_CALLS; i++) oneCall(i, turns, offSessions, undefined);
  const offStart = cpuUs();
  for (let i = 0; i < calls; i++) oneCall(i, turns, offSessions, undefined);
  const offUs = (cpuUs() - offStart) / calls;

  // On: the SDK as the daemon starts it, exporting to the sink.
  let spans = 0;
  let requests = 0;
  const sink = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      requests++;
      // A cheap count of the spans in the body (each has one "spanId").
      spans += Buffer.concat(chunks).toString('latin1').split('"spanId"').length - 1;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => sink.listen(0, '127.0.0.1', r));
  const endpoint = `http://127.0.0.1:${(sink.address() as AddressInfo).port}`;
  // The exporter reads the variable itself, as in the daemon.
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = endpoint;
  const tracing = await startTracing(logger);
  try {
    if (tracing === undefined) throw new Error('tracing did not start');
    const onSessions = new SessionSpans();
    const observer = new TurnTraceObserver((id) => onSessions.contextOf(id));
    for (let i = 0; i < WARMUP_CALLS; i++) oneCall(i, turns, onSessions, observer);
    // The warm-up's spans out of the way first.
    await (trace.getTracerProvider() as unknown as { getDelegate(): { forceFlush(): Promise<void> } }).getDelegate().forceFlush();
    const before = spans;
    const onStart = cpuUs();
    for (let i = 0; i < calls; i++) {
      oneCall(i, turns, onSessions, observer);
      // A pause between calls, as in a daemon: the batch processor and the exporter's sockets run
      // (back to back, the bench's bursts would overflow the batch queue of 2048 spans, and a
      // dropped span is work not measured).
      await new Promise((r) => setTimeout(r, 1));
    }
    await (trace.getTracerProvider() as unknown as { getDelegate(): { forceFlush(): Promise<void> } }).getDelegate().forceFlush();
    const onUs = (cpuUs() - onStart) / calls;
    const perCall = (spans - before) / calls;
    await tracing.shutdown();
    const expected = 2 + turns * (7 + VENDOR_SPANS_PER_TURN);
    process.stdout.write(`${calls} calls per mode, ${turns} turns each; on: ${spans - before} spans exported (${perCall.toFixed(1)} per call, expected ${expected}), ${requests} export requests in all\n`);
    // The batch processor drops spans when its queue is full: a run that lost spans measured less work.
    if (perCall < expected) throw new Error(`only ${perCall.toFixed(1)} of ${expected} spans per call reached the sink (the batch queue dropped some): the on figure would be too low`);
    printFigures('bench/tracing: CPU per call of its trace', [
      { name: 'tracing_cpu_per_call_on', value: onUs, unit: 'us', baseline: offUs, note: `tracing on (${expected} spans per call exported over OTLP/HTTP JSON to a loopback sink); baseline: off` },
      { name: 'tracing_cpu_per_call_off', value: offUs, unit: 'us', baseline: 1, note: 'tracing off: the no-op API calls of one call (call and session span, traceparent); baseline: 1 us' },
    ]);
  } finally {
    delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    await tracing?.shutdown();
    await new Promise<void>((r) => sink.close(() => r()));
  }
}
