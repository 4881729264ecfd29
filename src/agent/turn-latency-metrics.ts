/**
 * Prometheus histograms of where agent turns' time went (docs/latency.md), observed from each
 * complete turn timeline with the same stage figures as the call's `latency` field:
 * `callbridge_turn_stage_seconds{stage}` and `callbridge_turn_voice_to_voice_seconds`.
 */
import { Histogram, type Registry } from 'prom-client';
import { stageDurations, voiceToVoice } from '../domain/call-latency.ts';
import type { TurnStage, TurnTimeline, TurnTimelineObserver } from '../domain/turn-latency.ts';

/** 10 ms to 10 s: a stage of a few ms (turn_commit) up to a slow model or a long reply. */
export const TURN_LATENCY_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10];

export function createTurnLatencyMetrics(registry: Registry): TurnTimelineObserver {
  const stage = new Histogram({
    name: 'callbridge_turn_stage_seconds',
    help: 'Duration of each stage of an agent turn (stt, turn_commit, llm, sentence, tts, playout: from one mark to the next, docs/latency.md), s. A stage is counted when the turn had both its marks.',
    labelNames: ['stage'] as const,
    buckets: TURN_LATENCY_BUCKETS,
    registers: [registry],
  });
  const v2v = new Histogram({
    name: 'callbridge_turn_voice_to_voice_seconds',
    help: 'Time from the end of the caller\'s speech (VAD) to the first audio of the agent\'s reply leaving for the caller (first RTP packet of a phone call, first response_audio of a web session), s.',
    buckets: TURN_LATENCY_BUCKETS,
    registers: [registry],
  });
  return {
    turnComplete(_callId: string, turn: TurnTimeline): void {
      for (const [name, ms] of Object.entries(stageDurations(turn)) as Array<[TurnStage, number]>) {
        // Out of order (a final transcript before VAD's end of speech): not a duration.
        if (ms >= 0) stage.observe({ stage: name }, ms / 1000);
      }
      const v = voiceToVoice(turn);
      if (v !== undefined && v >= 0) v2v.observe(v / 1000);
    },
  };
}
