/**
 * A bridged call's quality at its end, reported once: to the metrics (histograms and frame
 * counters) and as one log line, `bridged call ended`, which is what an operator greps for when
 * a caller complains. Figures come from the media paths' own statistics, never per packet.
 */
import type { Logger } from '../log.ts';
import type { BridgeMediaStats } from '../media/bridge-media.ts';
import { callerHeardGaps } from '../media/outbound-path.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import type { LegDirection, LegQuality } from './call-leg.ts';

export interface CallQualityReport {
  sessionId: string | undefined;
  why: string;
  direction: LegDirection;
  /** Caller frames sent as input_audio, response_audio messages played, interruptions. */
  counts: { framesIn: number; audioOut: number; interruptions: number };
  /** Time this thread spent sending input_audio, all frames together (0 when a worker sent them). */
  sendMsTotal: number;
  /** The media's final figures (undefined when it gave none). */
  media: BridgeMediaStats | undefined;
  /** Reception figures: the media's, or the leg's own when the media gave none. */
  rtp: LegQuality;
}

export function reportCallQuality(log: Logger, metrics: BridgeMetrics | undefined, r: CallQualityReport): void {
  const rtp = r.rtp;
  const inbound = r.media?.inbound;
  const lost = Math.max(0, rtp.packetsLost);
  const lossRatio = rtp.packetsReceived + rtp.packetsLost > 0 ? lost / (rtp.packetsReceived + lost) : 0;
  // The media's own tick (wherever it ran) plus this thread's input_audio send (none in a worker).
  const inboundTickMs = (r.media?.inboundTickMs ?? 0) + (r.counts.framesIn > 0 ? r.sendMsTotal / r.counts.framesIn : 0);
  const out = r.media?.outbound;
  const frames = out ? { sent: out.framesSent + out.silenceSent, late: out.framesLate, skipped: out.lateTicksSkipped } : undefined;
  metrics?.quality({ jitterBufferDepthMs: inbound?.depthMs ?? 0, lossRatio, inboundTickMs, ...(frames ? { frames } : {}) });
  // A warning when the caller heard gaps of the bridge's making: what an operator should see first.
  log[out && callerHeardGaps(out) ? 'warn' : 'info'](
    {
      sessionId: r.sessionId,
      why: r.why,
      direction: r.direction,
      ...r.counts,
      packetsReceived: rtp.packetsReceived,
      packetsLost: rtp.packetsLost,
      lossRatio: Number(lossRatio.toFixed(4)),
      jitterMs: rtp.jitterMs,
      jitterBufferDepthMs: inbound?.depthMs,
      concealedFrames: inbound?.concealedFrames,
      inboundTickMs: Number(inboundTickMs.toFixed(4)),
      outbound: r.media?.outbound,
    },
    'bridged call ended',
  );
}
