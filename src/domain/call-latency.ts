/**
 * The figures of agent turn timelines (turn-latency.ts): each stage's duration, voice to voice,
 * and the call's `latency` extension field of GET /v1/calls/{id} (docs/latency.md), built from
 * the stored timelines. The metrics use the same stage figures, so the two never disagree.
 */
import { TURN_MARKS, TURN_STAGES, type TurnStage, type TurnTimeline } from './turn-latency.ts';

/** Each stage's duration in ms: the time from its mark to the next one, when the turn has both. */
export function stageDurations(turn: TurnTimeline): Partial<Record<TurnStage, number>> {
  const out: Partial<Record<TurnStage, number>> = {};
  TURN_STAGES.forEach((stage, i) => {
    const from = turn.marks[TURN_MARKS[i]!];
    const to = turn.marks[TURN_MARKS[i + 1]!];
    if (from !== undefined && to !== undefined) out[stage] = to - from;
  });
  return out;
}

/** speech_end -> audio_out_first in ms, when the turn has both. */
export function voiceToVoice(turn: TurnTimeline): number | undefined {
  const { speech_end: from, audio_out_first: to } = turn.marks;
  return from !== undefined && to !== undefined ? to - from : undefined;
}

export interface LatencyTurn {
  index: number;
  turn_id: string;
  kind: string;
  started_at: string;
  marks: Record<string, number>;
  stages: Record<string, number>;
  voice_to_voice_ms?: number;
  barge_in_ms?: number;
}

export interface Percentiles {
  p50: number;
  p95: number;
}

export interface CallLatency {
  turns: LatencyTurn[];
  summary: { turns: number; stages: Record<string, Percentiles>; voice_to_voice_ms: Percentiles | null };
}

/** Figures are given to 0.1 ms. */
const round = (ms: number): number => Math.round(ms * 10) / 10;

/** The `latency` field of a call with these turns (in their order). */
export function callLatency(turns: readonly TurnTimeline[]): CallLatency {
  const out: LatencyTurn[] = [];
  const byStage = new Map<TurnStage, number[]>();
  const v2v: number[] = [];
  for (const turn of turns) {
    const times = Object.values(turn.marks);
    // A turn cut before its first mark starts when it was cut.
    if (times.length === 0 && turn.bargeInAt === undefined) continue;
    const start = times.length > 0 ? Math.min(...times) : turn.bargeInAt!;
    const marks: Record<string, number> = {};
    for (const m of TURN_MARKS) if (turn.marks[m] !== undefined) marks[m] = round(turn.marks[m] - start);
    const stages: Record<string, number> = {};
    for (const [stage, ms] of Object.entries(stageDurations(turn)) as Array<[TurnStage, number]>) {
      stages[stage] = round(ms);
      byStage.set(stage, [...(byStage.get(stage) ?? []), ms]);
    }
    const entry: LatencyTurn = { index: turn.index, turn_id: turn.turnId, kind: turn.kind, started_at: new Date(start).toISOString(), marks, stages };
    const v = voiceToVoice(turn);
    if (v !== undefined) {
      entry.voice_to_voice_ms = round(v);
      v2v.push(v);
    }
    if (turn.bargeInAt !== undefined) entry.barge_in_ms = round(turn.bargeInAt - start);
    out.push(entry);
  }
  const stages: Record<string, Percentiles> = {};
  for (const stage of TURN_STAGES) {
    const values = byStage.get(stage);
    if (values !== undefined) stages[stage] = percentiles(values);
  }
  return { turns: out, summary: { turns: out.length, stages, voice_to_voice_ms: v2v.length > 0 ? percentiles(v2v) : null } };
}

/** p50 and p95 by the nearest-rank method (a figure that occurred, never an interpolation). */
export function percentiles(values: readonly number[]): Percentiles {
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p: number) => sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]!;
  return { p50: round(rank(50)), p95: round(rank(95)) };
}
