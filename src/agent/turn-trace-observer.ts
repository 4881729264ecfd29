/**
 * Each agent turn as trace spans, built after the fact from its timeline (src/domain/turn-latency.ts),
 * the same record the call's `latency` field and the metrics are built from, so a trace and the
 * API never disagree (docs/tracing.md):
 *
 *   session
 *     turn        first mark -> last mark (or the barge-in, when later)
 *       stt       speech_end -> transcript_final
 *       turn_commit, llm, sentence, tts, playout   (each from one mark to the next)
 *
 * A stage is a span only when the turn had both of its marks. The turn's parent is the session's
 * span, looked up by the call id (the session's id); a turn of a session not traced here (none
 * running on this node, or tracing off) makes no span.
 */
import { trace, type Attributes, type Context } from '@opentelemetry/api';
import { TURN_MARKS, TURN_STAGES, type TurnMark, type TurnTimeline, type TurnTimelineObserver } from '../domain/turn-latency.ts';

const tracer = trace.getTracer('callbridge.agent');

/** Each stage's two marks: TURN_STAGES[i] runs from TURN_MARKS[i] to TURN_MARKS[i + 1]. */
const STAGE_MARKS = TURN_STAGES.map((stage, i) => ({ stage, from: TURN_MARKS[i] as TurnMark, to: TURN_MARKS[i + 1] as TurnMark }));

export class TurnTraceObserver implements TurnTimelineObserver {
  /** @param parentOf the session span's context by call id (SessionSpans.contextOf). */
  constructor(private readonly parentOf: (callId: string) => Context | undefined) {}

  turnComplete(callId: string, turn: TurnTimeline): void {
    const parent = this.parentOf(callId);
    if (parent === undefined || trace.getSpan(parent)?.isRecording() !== true) return;
    const times = TURN_MARKS.map((m) => turn.marks[m]).filter((t): t is number => typeof t === 'number' && Number.isFinite(t));
    if (times.length === 0) return;
    const start = Math.min(...times);
    const end = Math.max(...times, turn.bargeInAt ?? -Infinity);
    const attributes: Attributes = { 'callbridge.turn.index': turn.index, 'callbridge.turn.id': turn.turnId, 'callbridge.turn.kind': turn.kind };
    const speechEnd = turn.marks.speech_end;
    const audioOut = turn.marks.audio_out_first;
    if (speechEnd !== undefined && audioOut !== undefined) attributes['callbridge.turn.voice_to_voice_ms'] = round(audioOut - speechEnd);
    if (turn.bargeInAt !== undefined) attributes['callbridge.turn.barge_in_ms'] = round(turn.bargeInAt - start);
    const span = tracer.startSpan('turn', { startTime: start, attributes }, parent);
    const turnContext = trace.setSpan(parent, span);
    for (const { stage, from, to } of STAGE_MARKS) {
      const a = turn.marks[from];
      const b = turn.marks[to];
      if (a === undefined || b === undefined) continue;
      tracer.startSpan(stage, { startTime: a, attributes: { 'callbridge.stage.ms': round(b - a) } }, turnContext).end(b);
    }
    if (turn.bargeInAt !== undefined) span.addEvent('barge_in', {}, turn.bargeInAt);
    span.end(end);
  }
}

/** 0.1 ms, as the latency field. */
function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
