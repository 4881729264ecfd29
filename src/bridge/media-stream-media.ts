/**
 * A carrier media stream's audio, both ways, as the bridge's BridgeMedia: the same media engine
 * as a SIP call's (src/media: jitter buffer, G.711, resampler, playout queue, 20 ms pacing on the
 * process's MediaTicker), fed by the stream's messages instead of RTP.
 *
 *   caller `media` (mu-law 8 kHz, 20 ms) -> InboundPath (as RTP: chunk = sequence number,
 *     timestamp ms * 8 = RTP timestamp) -> one 24 kHz frame per tick -> onInputFrame
 *   push(24 kHz agent audio) -> OutboundPath (paced 20 ms, 24k -> 8k, mu-law 160 bytes) -> sendMedia
 *   clear() (barge-in) -> the queue dropped here and `clear` sent, so the carrier drops its buffer
 *
 * Marks: the carrier plays what it is sent from its own buffer, so the bridge sends a mark after
 * each agent audio segment (the playout queue ran dry) and after every MARK_EVERY_FRAMES frames of a
 * long one; the carrier echoes a mark when the audio before it has been played, and echoes the
 * marks still buffered at a `clear` without playing them. So heardMs is what the caller heard, to
 * within a segment, and unheardMs what a barge-in cut out of the carrier's buffer.
 */
import { createCodec } from '../media/codecs.ts';
import type { BridgeMedia, BridgeMediaCallbacks, BridgeMediaStats } from '../media/bridge-media.ts';
import { InboundPath } from '../media/inbound-path.ts';
import type { MediaTicker, TickSubscription } from '../media/media-ticker.ts';
import { OutboundPath } from '../media/outbound-path.ts';
import type { RtpSessionStats } from '../media/rtp-session.ts';
import type { Codec } from '../media/types.ts';

/** What the media needs of the stream's socket (src/telco/twilio-stream-socket.ts). */
export interface MediaStreamTransport {
  /** One encoded 20 ms frame (160 mu-law bytes) to the caller. */
  sendMedia(payload: Uint8Array): void;
  sendMark(name: string): void;
  /** Drop everything buffered at the carrier for the caller. */
  sendClear(): void;
  close(code: number, reason: string): void;
}

/** A mark after this many frames of one segment (500 ms): "heard" is known to that resolution. */
export const MARK_EVERY_FRAMES = 25;
const FRAME_MS = 20;
/** Any fixed SSRC: the stream has one source, and the jitter buffer only compares it with itself. */
const STREAM_SSRC = 0x5354524d;

export interface MarkFigures {
  /** Agent audio the carrier confirmed played (marks echoed in turn). */
  heardMs: number;
  /** Agent audio sent and then dropped by a clear before it was played. */
  unheardMs: number;
  marksSent: number;
  marksEchoed: number;
}

export class MediaStreamMedia implements BridgeMedia {
  readonly #transport: MediaStreamTransport;
  readonly #codec: Codec;
  readonly #inbound: InboundPath;
  readonly #outbound: OutboundPath;
  readonly #tick: TickSubscription;
  readonly #segmentWatch: TickSubscription;
  readonly #clock: MediaTicker['clock'];
  /** Marks sent and not yet echoed, by name: the frames before each (since the previous mark). */
  readonly #pending = new Map<string, number>();
  /** Marks that were buffered at a clear: their echo means "dropped", not "played". */
  readonly #cleared = new Set<string>();
  #framesSinceMark = 0;
  #sentSinceWatch = false;
  #markSeq = 0;
  #figures: MarkFigures = { heardMs: 0, unheardMs: 0, marksSent: 0, marksEchoed: 0 };
  #tickMsTotal = 0;
  #ticks = 0;
  #stopped: BridgeMediaStats | undefined;
  readonly #received = { packets: 0, lost: 0, lastChunk: -1 };
  /** Recording: agent frames sent, waiting to be paired with a caller tick (at most 3), and free buffers. */
  readonly #agentQueue: Int16Array[] = [];
  readonly #agentFree: Int16Array[] = [];

  constructor(transport: MediaStreamTransport, callbacks: BridgeMediaCallbacks, ticker: MediaTicker, options: { keepAgentFrames?: boolean } = {}) {
    this.#transport = transport;
    const keep = options.keepAgentFrames === true;
    if (keep) for (let i = 0; i < 3; i++) this.#agentFree.push(new Int16Array(480));
    this.#clock = ticker.clock;
    this.#codec = createCodec('PCMU');
    this.#inbound = new InboundPath({ codec: this.#codec });
    this.#outbound = new OutboundPath({
      codec: this.#codec,
      ticker,
      // The carrier needs no keep-alive media, and silence would make every segment endless.
      sendSilence: false,
      ...(keep ? { onFrame: (frame: Int16Array) => this.#keepAgentFrame(frame) } : {}),
      send: (payload) => this.#sendFrame(payload),
      onError: (err) => callbacks.onError(err, 'outbound'),
      // The first media frame of agent audio after a silence went to the carrier: what the caller hears first.
      ...(callbacks.onAgentAudioStart ? { onSpurtStart: () => callbacks.onAgentAudioStart?.(performance.timeOrigin + performance.now()) } : {}),
    });
    this.#outbound.start();
    this.#tick = ticker.add(
      (tick) => {
        const t0 = performance.now();
        const frame = this.#inbound.tick(tick.nowMs);
        this.#tickMsTotal += performance.now() - t0;
        this.#ticks++;
        // The recording's second channel: one agent frame per caller tick, as LocalBridgeMedia does.
        const agent = keep ? this.#agentQueue.shift() : undefined;
        callbacks.onInputFrame(frame, agent ?? null, tick.nowMs);
        if (agent) this.#agentFree.push(agent);
      },
      (err) => callbacks.onError(err, 'inbound'),
    );
    // A period without a frame sent after some were: the agent's segment is over, mark it.
    this.#segmentWatch = ticker.add(() => {
      if (!this.#sentSinceWatch && this.#framesSinceMark > 0) this.#mark();
      this.#sentSinceWatch = false;
    });
  }

  /** A caller `media` message: 20 ms of mu-law, its chunk number and stream timestamp (ms). */
  callerAudio(payload: Uint8Array, chunk: number, timestampMs: number): void {
    if (this.#stopped !== undefined) return;
    const r = this.#received;
    r.packets++;
    if (r.lastChunk >= 0 && chunk > r.lastChunk + 1) r.lost += chunk - r.lastChunk - 1;
    if (chunk > r.lastChunk) r.lastChunk = chunk;
    this.#inbound.push({
      payloadType: this.#codec.payloadType,
      sequenceNumber: chunk & 0xffff,
      timestamp: (timestampMs * 8) >>> 0,
      ssrc: STREAM_SSRC,
      marker: false,
      payload,
      arrivalMs: this.#clock.now(),
    });
  }

  /** The carrier echoed a mark: the audio before it was played, or dropped by a clear. */
  markEchoed(name: string): void {
    const frames = this.#pending.get(name);
    if (frames === undefined) return;
    this.#pending.delete(name);
    this.#figures.marksEchoed++;
    if (this.#cleared.delete(name)) this.#figures.unheardMs += frames * FRAME_MS;
    else this.#figures.heardMs += frames * FRAME_MS;
  }

  get marks(): MarkFigures {
    return { ...this.#figures };
  }

  push(audio: Int16Array): void {
    if (this.#stopped === undefined) this.#outbound.push(audio);
  }

  /** Barge-in: nothing queued here goes out, and the carrier drops what it holds, at once. */
  clear(): void {
    if (this.#stopped !== undefined) return;
    this.#outbound.clear();
    this.#transport.sendClear();
    // Whatever is still buffered at the carrier was not heard: its marks come back as dropped.
    for (const name of this.#pending.keys()) this.#cleared.add(name);
    // Frames sent since the last mark have no mark to tell; a closing mark makes them countable.
    if (this.#framesSinceMark > 0) {
      this.#mark();
      this.#cleared.add(`seg-${this.#markSeq}`);
    }
  }

  lateFrames(): number {
    return this.#stopped?.outbound.framesLate ?? this.#outbound.stats().framesLate;
  }

  stop(): Promise<BridgeMediaStats> {
    if (this.#stopped === undefined) {
      this.#tick.close();
      this.#segmentWatch.close();
      this.#outbound.close();
      this.#inbound.close();
      this.#codec.close();
      this.#stopped = {
        rtp: streamReception(this.#received.packets, this.#received.lost, this.#outbound.stats().framesSent),
        inbound: this.#inbound.stats(),
        outbound: this.#outbound.stats(),
        inboundTickMs: this.#ticks > 0 ? this.#tickMsTotal / this.#ticks : 0,
      };
    }
    return Promise.resolve(this.#stopped);
  }

  /** A copy of an agent frame sent (the path hands out views), for the recording. */
  #keepAgentFrame(frame: Int16Array): void {
    const slot = this.#agentFree.pop() ?? this.#agentQueue.shift()!;
    slot.fill(0);
    slot.set(frame.subarray(0, slot.length));
    this.#agentQueue.push(slot);
  }

  #sendFrame(payload: Uint8Array): void {
    this.#transport.sendMedia(payload);
    this.#sentSinceWatch = true;
    if (++this.#framesSinceMark >= MARK_EVERY_FRAMES) this.#mark();
  }

  #mark(): void {
    const name = `seg-${++this.#markSeq}`;
    this.#pending.set(name, this.#framesSinceMark);
    this.#framesSinceMark = 0;
    this.#figures.marksSent++;
    this.#transport.sendMark(name);
  }
}

/**
 * The stream's figures in the shape the call's quality line reads for RTP: messages for packets,
 * chunk-number gaps for loss. There is no RTP, RTCP or jitter measure on a stream (TCP delivers
 * in order), so those are zero.
 */
function streamReception(received: number, lost: number, sent: number): RtpSessionStats {
  return {
    ssrc: STREAM_SSRC,
    remoteSsrc: undefined,
    packetsSent: sent,
    bytesSent: sent * 160,
    packetsReceived: received,
    bytesReceived: received * 160,
    packetsLost: lost,
    fractionLost: 0,
    extendedHighestSeq: undefined,
    jitterMs: 0,
    rttMs: undefined,
    remote: undefined,
    rtcpSent: 0,
    rtcpReceived: 0,
    dtmfReceived: 0,
    dtmfSent: 0,
    dropped: { tooShort: 0, badVersion: 0, malformed: 0, wrongSource: 0, badSequence: 0, rtcpMalformed: 0, noRemote: 0, mutedByDtmf: 0, socketErrors: 0 },
  };
}
