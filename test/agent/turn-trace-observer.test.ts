/**
 * TurnTraceObserver builds a turn's spans from its timeline after the fact: a `turn` span from its
 * first mark to its last (or the barge-in) under the session's span, and one child per stage
 * whose two marks exist, with the marks' own times. The real SDK records them (in memory).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT_CONTEXT, trace } from '@opentelemetry/api';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { TurnTraceObserver } from '../../src/agent/turn-trace-observer.ts';
import type { TurnTimeline } from '../../src/domain/turn-latency.ts';

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
trace.setGlobalTracerProvider(provider);
afterAll(async () => {
  await provider.shutdown();
  trace.disable();
});

/** Epoch ms of a span time ([seconds, nanoseconds]). */
const ms = (t: [number, number]) => t[0] * 1000 + t[1] / 1e6;
const T0 = Date.UTC(2026, 0, 1, 12, 0, 0);

function sessionParent(): { parentOf: (id: string) => ReturnType<typeof trace.setSpan> | undefined; spanId: string; traceId: string } {
  const session = trace.getTracer('test').startSpan('session', {}, ROOT_CONTEXT);
  const ctx = trace.setSpan(ROOT_CONTEXT, session);
  return { parentOf: (id) => (id === 'call-1' ? ctx : undefined), spanId: session.spanContext().spanId, traceId: session.spanContext().traceId };
}

describe('turn spans from a turn timeline', () => {
  it('a reply: the turn under the session, one span per stage with the marks as start and end', () => {
    exporter.reset();
    const { parentOf, spanId, traceId } = sessionParent();
    const turn: TurnTimeline = {
      index: 1,
      turnId: 'turn-1',
      kind: 'reply',
      marks: { speech_end: T0, transcript_final: T0 + 301.2, llm_request: T0 + 301.6, llm_first_token: T0 + 501.9, tts_first_sentence: T0 + 514, tts_first_audio: T0 + 664.2, audio_out_first: T0 + 685.2 },
    };
    new TurnTraceObserver(parentOf).turnComplete('call-1', turn);
    const spans = exporter.getFinishedSpans();
    const turnSpan = spans.find((s) => s.name === 'turn')!;
    expect(turnSpan.spanContext().traceId).toBe(traceId);
    expect(turnSpan.parentSpanContext?.spanId).toBe(spanId);
    expect(ms(turnSpan.startTime)).toBeCloseTo(T0, 3);
    expect(ms(turnSpan.endTime)).toBeCloseTo(T0 + 685.2, 3);
    expect(turnSpan.attributes).toMatchObject({ 'callbridge.turn.index': 1, 'callbridge.turn.id': 'turn-1', 'callbridge.turn.kind': 'reply', 'callbridge.turn.voice_to_voice_ms': 685.2 });
    const stages = spans.filter((s) => s !== turnSpan);
    expect(stages.map((s) => s.name)).toEqual(['stt', 'turn_commit', 'llm', 'sentence', 'tts', 'playout']);
    for (const s of stages) expect(s.parentSpanContext?.spanId).toBe(turnSpan.spanContext().spanId);
    const llm = stages.find((s) => s.name === 'llm')!;
    expect(ms(llm.startTime)).toBeCloseTo(T0 + 301.6, 3);
    expect(ms(llm.endTime)).toBeCloseTo(T0 + 501.9, 3);
    expect(llm.attributes['callbridge.stage.ms']).toBe(200.3);
  });

  it('a first message cut by the caller: only the stages it had, and the barge-in ends the turn', () => {
    exporter.reset();
    const { parentOf } = sessionParent();
    const turn: TurnTimeline = { index: 0, turnId: 'first', kind: 'first', marks: { tts_first_sentence: T0, tts_first_audio: T0 + 150, audio_out_first: T0 + 170 }, bargeInAt: T0 + 1200 };
    new TurnTraceObserver(parentOf).turnComplete('call-1', turn);
    const spans: ReadableSpan[] = exporter.getFinishedSpans();
    const turnSpan = spans.find((s) => s.name === 'turn')!;
    expect(spans.filter((s) => s !== turnSpan).map((s) => s.name)).toEqual(['tts', 'playout']);
    expect(ms(turnSpan.endTime)).toBeCloseTo(T0 + 1200, 3);
    expect(turnSpan.attributes['callbridge.turn.barge_in_ms']).toBe(1200);
    expect(turnSpan.attributes['callbridge.turn.voice_to_voice_ms']).toBeUndefined();
    expect(turnSpan.events.map((e) => e.name)).toEqual(['barge_in']);
  });

  it('a call with no session span here (another node, or ended long ago) makes no span', () => {
    exporter.reset();
    const { parentOf } = sessionParent();
    new TurnTraceObserver(parentOf).turnComplete('call-2', { index: 0, turnId: 't', kind: 'reply', marks: { speech_end: T0, transcript_final: T0 + 10 } });
    // The session span itself is still open: nothing finished.
    expect(exporter.getFinishedSpans()).toEqual([]);
  });
});
