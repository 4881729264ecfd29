/**
 * The caller's direction: RTP in -> jitter buffer -> decode (or conceal) -> resample -> 24 kHz
 * PCM16 frames of 20 ms for the voice protocol's `input_audio`.
 *
 *   push(rtp) ........ on each received packet of the call's codec (or CN)
 *   tick(nowMs) ...... once per 20 ms playout tick: one 480-sample frame at 24 kHz, always
 *
 * A tick with nothing to play (before the first packet, or a gap in the caller's RTP longer than
 * concealment covers) is a frame of silence, not a missing frame: PBXs and carriers stop sending
 * RTP during silence (suppression without comfort noise, RFC 3389 or not), and what listens
 * downstream (turn detection, barge-in, silence timeouts, the recording) runs on frames, so a
 * caller who stops talking and whose PBX goes quiet must still be heard as silent.
 *
 * Frames are views of reused buffers, valid until the next tick. Nothing allocates per packet.
 */
import type { Codec, ReceivedRtp, Resampler } from './types.ts';
import { JitterBuffer, type JitterBufferOptions, type JitterBufferStats } from './jitter-buffer.ts';
import { RepeatFadePlc } from './plc.ts';
import { createResampler } from './resampler.ts';
import { CN_PAYLOAD_TYPE, comfortNoiseSilence } from './comfort-noise.ts';

export interface InboundPathOptions {
  codec: Codec;
  /** Rate of the frames handed out; the voice protocol's is 24 kHz. */
  outRate?: number;
  jitter?: Omit<JitterBufferOptions, 'clockRate' | 'samplesPerFrame'>;
}

export interface InboundPathStats extends JitterBufferStats {
  /** Frames decoded from packets. */
  decoded: number;
  /** Frames filled by concealment (codec PLC or repeat-and-fade). */
  concealedFrames: number;
  /** Frames of comfort noise turned into silence. */
  comfortNoiseFrames: number;
  /** Ticks with no packet to play (none yet, or a gap past concealment): silence was handed out. */
  gapFrames: number;
}

export class InboundPath {
  readonly codec: Codec;
  readonly outRate: number;
  readonly #jitter: JitterBuffer;
  readonly #plc: RepeatFadePlc;
  readonly #resampler: Resampler | null;
  readonly #pcm: Int16Array;
  /** The silence handed out for a gap: at outRate, never written. */
  readonly #silence: Int16Array;
  #decoded = 0;
  #gap = 0;
  #concealed = 0;
  #comfortNoise = 0;
  #closed = false;

  constructor(options: InboundPathOptions) {
    const { codec } = options;
    this.codec = codec;
    this.outRate = options.outRate ?? 24000;
    this.#jitter = new JitterBuffer({ ...options.jitter, clockRate: codec.clockRate, samplesPerFrame: (codec.clockRate * codec.frameMs) / 1000 });
    this.#plc = new RepeatFadePlc({ samplesPerFrame: codec.samplesPerFrame, sampleRate: codec.sampleRate });
    this.#resampler = codec.sampleRate === this.outRate ? null : createResampler(codec.sampleRate, this.outRate);
    this.#pcm = new Int16Array(codec.samplesPerFrame);
    this.#silence = new Int16Array((this.outRate * codec.frameMs) / 1000);
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Hands a received packet of this call's audio codec (or comfort noise) to the jitter buffer. */
  push(rtp: ReceivedRtp): void {
    if (this.#closed) return;
    this.#jitter.push(rtp);
  }

  /** One 20 ms playout tick: a frame at outRate (silence when there is nothing to play); null once closed. */
  tick(nowMs: number): Int16Array | null {
    if (this.#closed) return null;
    const frame = this.#jitter.pop(nowMs);
    const pcm = this.#pcm;
    if (frame.kind === 'empty') {
      this.#gap++;
      return this.#silence;
    }
    if (frame.kind === 'lost') {
      // The codec's own concealment (Opus) beats generic repeat-and-fade; G.711 has none.
      if (!(this.codec.conceal && this.codec.conceal(pcm) === pcm.length)) this.#plc.conceal(pcm);
      this.#concealed++;
    } else if (frame.payloadType === CN_PAYLOAD_TYPE) {
      comfortNoiseSilence(frame.payload, pcm.length, pcm);
      this.#plc.reset();
      this.#comfortNoise++;
    } else {
      const n = this.codec.decode(frame.payload, pcm);
      if (n < pcm.length) pcm.fill(0, n);
      this.#plc.good(pcm);
      this.#decoded++;
    }
    return this.#resampler ? this.#resampler.process(pcm) : pcm;
  }

  stats(): InboundPathStats {
    return { ...this.#jitter.stats(), decoded: this.#decoded, concealedFrames: this.#concealed, comfortNoiseFrames: this.#comfortNoise, gapFrames: this.#gap };
  }

  /** Idempotent; frees the resampler's WASM memory. The codec belongs to the caller. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#jitter.close();
    this.#resampler?.close();
  }
}
