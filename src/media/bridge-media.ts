/**
 * A bridged call's media, both directions, on the event loop that owns the call's RTP session:
 *
 *   caller RTP -> InboundPath (jitter buffer, decode, 8k->24k) -> onInputFrame, every 20 ms tick
 *   push(24 kHz agent audio) -> OutboundPath (playout queue, paced, 24k->8k, encode) -> RTP
 *
 * The bridge (src/bridge/) uses it through startBridgeMedia() (media-host.ts): here, when the
 * call's sockets are on this thread, or inside a media worker (media-worker.ts runs this same
 * class there and forwards the frames). Both directions tick on one MediaTicker.
 */
import { createCodec, type CodecName } from './codecs.ts';
import { InboundPath, type InboundPathStats } from './inbound-path.ts';
import type { MediaTicker, TickSubscription } from './media-ticker.ts';
import { OutboundPath, type OutboundPathStats } from './outbound-path.ts';
import type { RtpSession, RtpSessionStats } from './rtp-session.ts';
import type { Codec, ReceivedRtp } from './types.ts';

/** Everything a bridge's media needs to know, as plain data (it crosses to media workers). */
export interface BridgeMediaConfig {
  codec: CodecName;
  /** Payload type we send (the negotiated one). */
  payloadType: number;
  /** Payload type the peer sends its audio with. */
  receivePayloadType: number;
  /** RFC 3389 comfort noise payload type, when negotiated. */
  comfortNoisePayloadType?: number;
  /** Encoded silence while the agent is quiet (see OutboundPath). */
  sendSilence: boolean;
  /** Hand each agent frame sent back with the caller's frame of the same tick (call recording). */
  keepAgentFrames: boolean;
}

export interface BridgeMediaCallbacks {
  /**
   * Once per 20 ms tick: the caller's frame at 24 kHz (null while the jitter buffer has nothing
   * to play) and, with keepAgentFrames, the agent frame sent in the same period (or null).
   * Views of reused buffers: copy to keep.
   */
  onInputFrame(frame: Int16Array | null, agentFrame: Int16Array | null, nowMs: number): void;
  onError(err: unknown, direction: 'inbound' | 'outbound'): void;
  /**
   * The first RTP packet of agent audio after a silence or a clear went out, at `atEpochMs`
   * (performance.timeOrigin + performance.now() of the sending thread: epoch ms on any thread).
   */
  onAgentAudioStart?(atEpochMs: number): void;
}

/** The figures of a bridge's media when it stops (the per-call log line, metrics). */
export interface BridgeMediaStats {
  rtp: RtpSessionStats;
  inbound: InboundPathStats;
  outbound: OutboundPathStats;
  /** Mean time of this side's inbound tick (playout, decode, resample), ms per frame. */
  inboundTickMs: number;
}

/** The bridge's handle on its call's media, wherever it runs. */
export interface BridgeMedia {
  /** Agent audio, 24 kHz PCM16, any length (copied or consumed before this returns). */
  push(audio: Int16Array): void;
  /** Barge-in: drop every agent sample not yet sent. */
  clear(): void;
  /** Stops both directions (idempotent); resolves with the final figures. */
  stop(): Promise<BridgeMediaStats>;
  /**
   * Agent frames sent later than their 20 ms slot so far (a live figure: the console's call
   * quality); undefined when this media does not count them. In a worker: its last snapshot.
   */
  lateFrames(): number | undefined;
}

export class LocalBridgeMedia implements BridgeMedia {
  readonly #rtp: RtpSession;
  readonly #codec: Codec;
  readonly #inbound: InboundPath;
  readonly #outbound: OutboundPath;
  readonly #tick: TickSubscription;
  readonly #onRtp: (p: ReceivedRtp) => void;
  /** Agent frames waiting to be paired with a caller tick (at most 3), and the free buffers. */
  readonly #agentQueue: Int16Array[] = [];
  readonly #agentFree: Int16Array[] = [];
  #tickMsTotal = 0;
  #ticks = 0;
  #stopped: BridgeMediaStats | undefined;

  constructor(rtp: RtpSession, config: BridgeMediaConfig, callbacks: BridgeMediaCallbacks, ticker: MediaTicker) {
    this.#rtp = rtp;
    // One codec object per call: G.711 is stateless, Opus keeps state per call.
    const codec = createCodec(config.codec, { payloadType: config.payloadType });
    this.#codec = codec;
    this.#inbound = new InboundPath({ codec });
    if (config.keepAgentFrames) for (let i = 0; i < 3; i++) this.#agentFree.push(new Int16Array(480));
    this.#outbound = new OutboundPath({
      codec,
      ...(config.keepAgentFrames ? { onFrame: (frame: Int16Array) => this.#keepAgentFrame(frame) } : {}),
      send: (payload, marker, timestampIncrement) => {
        rtp.send(payload, { payloadType: config.payloadType, timestampIncrement, marker });
      },
      onError: (err) => callbacks.onError(err, 'outbound'),
      sendSilence: config.sendSilence,
      ticker,
      ...(callbacks.onAgentAudioStart ? { onSpurtStart: () => callbacks.onAgentAudioStart?.(performance.timeOrigin + performance.now()) } : {}),
    });
    this.#outbound.start();
    const receivePt = config.receivePayloadType;
    const cnPt = config.comfortNoisePayloadType;
    this.#onRtp = (p) => {
      if (p.payloadType === receivePt || (cnPt !== undefined && p.payloadType === cnPt)) this.#inbound.push(p);
    };
    rtp.on('rtp', this.#onRtp);
    // Caller audio goes on at the jitter buffer's playout pace: one frame per 20 ms.
    this.#tick = ticker.add(
      (tick) => {
        const t0 = performance.now();
        const frame = this.#inbound.tick(tick.nowMs);
        this.#tickMsTotal += performance.now() - t0;
        this.#ticks++;
        const agent = config.keepAgentFrames ? this.#agentQueue.shift() : undefined;
        callbacks.onInputFrame(frame, agent ?? null, tick.nowMs);
        if (agent) this.#agentFree.push(agent);
      },
      (err) => callbacks.onError(err, 'inbound'),
    );
  }

  push(audio: Int16Array): void {
    if (this.#stopped === undefined) this.#outbound.push(audio);
  }

  clear(): void {
    if (this.#stopped === undefined) this.#outbound.clear();
  }

  /**
   * The agent's frames sent, for the recording's second channel (copied: they are views). The
   * agent's 20 ms clock and the caller's drift apart a little: a short queue passes one frame per
   * caller tick, so no agent frame is lost to the drift (only a backlog beyond it).
   */
  #keepAgentFrame(frame: Int16Array): void {
    const slot = this.#agentFree.pop() ?? this.#agentQueue.shift()!;
    slot.fill(0);
    slot.set(frame.subarray(0, slot.length));
    this.#agentQueue.push(slot);
  }

  lateFrames(): number {
    return this.#stopped?.outbound.framesLate ?? this.#outbound.stats().framesLate;
  }

  /** Synchronous form of stop() for the thread that owns the media. */
  stopNow(): BridgeMediaStats {
    if (this.#stopped !== undefined) return this.#stopped;
    this.#tick.close();
    this.#outbound.close();
    this.#inbound.close();
    this.#rtp.off('rtp', this.#onRtp);
    this.#codec.close();
    this.#stopped = {
      rtp: this.#rtp.stats(),
      inbound: this.#inbound.stats(),
      outbound: this.#outbound.stats(),
      inboundTickMs: this.#ticks > 0 ? this.#tickMsTotal / this.#ticks : 0,
    };
    return this.#stopped;
  }

  stop(): Promise<BridgeMediaStats> {
    return Promise.resolve(this.stopNow());
  }
}
