/**
 * Prometheus metrics of bridged calls (on the daemon's registry, served at /metrics). Counted
 * once per call at its edges, never per packet: the per-call quality figures are observed when
 * the call ends, from the media paths' own statistics.
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import { SEND_LATE_MS } from '../media/outbound-path.ts';

export interface BridgeMetrics {
  callStarted(direction: 'inbound' | 'outbound'): void;
  callEnded(direction: 'inbound' | 'outbound'): void;
  /** A call that could not be bridged: limit, session refused, dial failure... */
  failure(reason: string): void;
  /**
   * A call's quality figures at its end. `frames`: the RTP frames sent to the caller (audio and
   * silence), those sent more than SEND_LATE_MS after their slot, and the slots skipped after stalls.
   */
  quality(q: { jitterBufferDepthMs: number; lossRatio: number; inboundTickMs: number; frames?: { sent: number; late: number; skipped: number } }): void;
}

export function createBridgeMetrics(registry: Registry): BridgeMetrics {
  const active = new Gauge({ name: 'callbridge_bridge_calls_active', help: 'Calls bridged to a voice session now, by direction.', labelNames: ['direction'] as const, registers: [registry] });
  const setups = new Counter({ name: 'callbridge_bridge_call_setups_total', help: 'Calls bridged to a voice session (answered and connected), by direction.', labelNames: ['direction'] as const, registers: [registry] });
  const failures = new Counter({ name: 'callbridge_bridge_call_failures_total', help: 'Calls that could not be bridged or placed, by reason.', labelNames: ['reason'] as const, registers: [registry] });
  const depth = new Histogram({
    name: 'callbridge_bridge_jitter_buffer_depth_ms',
    help: 'Jitter-buffer playout depth of the caller audio at the end of each call, ms.',
    buckets: [20, 40, 60, 80, 100, 140, 200],
    registers: [registry],
  });
  const loss = new Histogram({
    name: 'callbridge_bridge_packet_loss_ratio',
    help: 'Share of the caller RTP packets lost, per call.',
    buckets: [0, 0.001, 0.01, 0.02, 0.05, 0.1, 0.2],
    registers: [registry],
  });
  const tick = new Histogram({
    name: 'callbridge_bridge_inbound_tick_ms',
    help: 'Mean processing time per 20 ms caller frame (jitter buffer, decode, resample, input_audio send), per call, ms.',
    buckets: [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5],
    registers: [registry],
  });
  // Counters, not per-call histograms: a late frame is rare and matters wherever it falls, so the
  // share is what to watch: rate(..._late_total) / rate(..._sent_total).
  const framesSent = new Counter({ name: 'callbridge_bridge_frames_sent_total', help: 'RTP frames sent to callers (agent audio and silence), counted when each call ends.', registers: [registry] });
  const framesLate = new Counter({
    name: 'callbridge_bridge_frames_late_total',
    help: `RTP frames sent to callers more than ${SEND_LATE_MS} ms after their 20 ms slot (a gap for a shallow jitter buffer), counted when each call ends.`,
    registers: [registry],
  });
  const framesSkipped = new Counter({ name: 'callbridge_bridge_frames_skipped_total', help: '20 ms slots skipped after a stall instead of sent in a burst, counted when each call ends.', registers: [registry] });
  return {
    callStarted(direction) {
      active.inc({ direction });
      setups.inc({ direction });
    },
    callEnded(direction) {
      active.dec({ direction });
    },
    failure(reason) {
      failures.inc({ reason });
    },
    quality(q) {
      depth.observe(q.jitterBufferDepthMs);
      loss.observe(q.lossRatio);
      tick.observe(q.inboundTickMs);
      if (q.frames) {
        framesSent.inc(q.frames.sent);
        framesLate.inc(q.frames.late);
        framesSkipped.inc(q.frames.skipped);
      }
    },
  };
}
