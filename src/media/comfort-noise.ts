/**
 * Comfort noise received in RTP (RFC 3389, payload type 13 "CN/8000", RFC 3551 table 4).
 *
 * A sender that stops sending speech during silence (VAD/DTX) may send CN packets instead:
 *
 *    0                   1                   2
 *    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 ...
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-
 *   |0|   level     |  N1 (optional reflection coefficients) ... Nm
 *   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-
 *   level: noise level in -dBov, 0..127 (section 3.1); 0 dBov is a full-scale square wave
 *
 * The packet says nothing about how long the silence lasts: it lasts until the next packet.
 * So the decoder path turns a CN packet into audio of this length (comfortNoiseSamples):
 * - the gap from the CN packet's RTP timestamp to the next packet's, when the next is known;
 * - otherwise one frame (20 ms) per CN packet received.
 *
 * What fills that length: by default digital silence (zeros). The far end here is a voice agent
 * (VAD + speech recognition), not a listener who needs reassurance that the line is alive, and
 * zeros are the cleanest input for a VAD. `mode: 'noise'` instead produces white noise at the
 * signalled level (the spectral-shape coefficients are parsed over but not applied).
 */

/** Payload type and SDP rtpmap data of CN (RFC 3389 section 5, RFC 3551). */
export const CN_PAYLOAD_TYPE = 13;
export const CN_CLOCK_RATE = 8000;
export const COMFORT_NOISE_RTPMAP = { name: 'CN', payloadType: CN_PAYLOAD_TYPE, clockRate: CN_CLOCK_RATE, channels: 1 } as const;

/** Noise level and model order parsed from a CN payload. */
export interface ComfortNoiseParams {
  /** Level in dBov, 0 down to -127 (RFC 3389 section 3.1). */
  levelDbov: number;
  /** Number of reflection coefficients that followed the level (the spectral model order). */
  order: number;
}

/**
 * Reads the noise level of a CN payload. The reserved most significant bit is ignored rather
 * than rejected (be liberal in what you accept).
 * @throws RangeError when the payload is empty (section 3 requires the level byte).
 */
export function parseComfortNoise(payload: Uint8Array): ComfortNoiseParams {
  return { levelDbov: comfortNoiseLevel(payload), order: payload.length - 1 };
}

/**
 * The noise level in dBov (0 to -127), without allocating.
 * @throws RangeError when the payload is empty.
 */
export function comfortNoiseLevel(payload: Uint8Array): number {
  const first = payload[0];
  if (first === undefined) throw new RangeError('CN payload is empty: RFC 3389 requires the noise level byte');
  return -(first & 0x7f);
}

/** Gaps beyond this are treated as a timestamp jump, not silence: the default cap, 10 s. */
export const CN_MAX_GAP_MS = 10_000;

/**
 * How many samples of silence a CN packet stands for.
 *
 * @param cnTimestamp RTP timestamp of the CN packet.
 * @param nextTimestamp RTP timestamp of the packet after it, or undefined when not (yet) known.
 * @param clockRate RTP clock of those timestamps (8000 for CN/8000).
 * @param sampleRate rate of the audio being produced (8000 for G.711; may differ, e.g. 48000).
 * @param frameMs frame length used when the next packet is not known (20).
 * @param maxMs cap on the gap: longer gaps (or a next timestamp that is not after the CN's, in
 *   32-bit serial arithmetic, RFC 1982) fall back to one frame.
 * @throws RangeError on a non-positive clockRate, sampleRate or frameMs.
 */
export function comfortNoiseSamples(
  cnTimestamp: number,
  nextTimestamp: number | undefined,
  clockRate: number = CN_CLOCK_RATE,
  sampleRate: number = clockRate,
  frameMs = 20,
  maxMs: number = CN_MAX_GAP_MS,
): number {
  if (!(clockRate > 0) || !(sampleRate > 0) || !(frameMs > 0)) {
    throw new RangeError(`comfortNoiseSamples: rates and frameMs must be positive (clock ${clockRate}, sample ${sampleRate}, frame ${frameMs})`);
  }
  const oneFrame = Math.round((sampleRate * frameMs) / 1000);
  if (nextTimestamp === undefined) return oneFrame;
  // RTP timestamps wrap at 2^32: the forward distance modulo 2^32.
  const ticks = (nextTimestamp - cnTimestamp) >>> 0;
  if (ticks === 0 || ticks >= 0x80000000 || ticks > (clockRate * maxMs) / 1000) return oneFrame;
  return Math.round((ticks * sampleRate) / clockRate);
}

/**
 * Writes `samples` samples of silence (zeros) for a CN packet into out.
 * @throws RangeError when the payload is empty or out holds fewer than `samples`.
 */
export function comfortNoiseSilence(payload: Uint8Array, samples: number, out: Int16Array): number {
  comfortNoiseLevel(payload); // validates
  checkOut(samples, out);
  out.fill(0, 0, samples);
  return samples;
}

function checkOut(samples: number, out: Int16Array): void {
  if (!Number.isInteger(samples) || samples < 0) throw new RangeError(`comfort noise: sample count must be a non-negative integer, got ${samples}`);
  if (out.length < samples) throw new RangeError(`comfort noise: output holds ${out.length} samples, ${samples} needed`);
}

export interface ComfortNoiseOptions {
  /** 'silence' (default): zeros. 'noise': white noise at the packet's level. */
  mode?: 'silence' | 'noise';
  /** Seed of the noise generator (tests); any non-zero 32-bit integer. */
  seed?: number;
}

/**
 * Fills audio for CN packets, in the configured mode. One per call (the noise generator keeps
 * its state, so consecutive fills continue one noise stream). Allocates nothing per fill.
 */
export class ComfortNoiseGenerator {
  readonly mode: 'silence' | 'noise';
  private state: number;

  constructor(options: ComfortNoiseOptions = {}) {
    this.mode = options.mode ?? 'silence';
    this.state = (options.seed ?? 0x2545f491) | 0 || 1;
  }

  /**
   * Writes `samples` samples for the CN payload into out; returns `samples`.
   * @throws RangeError when the payload is empty or out holds fewer than `samples`.
   */
  fill(payload: Uint8Array, samples: number, out: Int16Array): number {
    if (this.mode === 'silence') return comfortNoiseSilence(payload, samples, out);
    const dbov = comfortNoiseLevel(payload);
    checkOut(samples, out);
    // 0 dBov = full-scale square wave, RMS 32767. Uniform noise in [-a, a] has RMS a / sqrt(3).
    const a = 32767 * Math.pow(10, dbov / 20) * Math.sqrt(3);
    let x = this.state;
    for (let i = 0; i < samples; i++) {
      // xorshift32 (Marsaglia 2003): cheap, allocation-free, good enough for noise.
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      const v = Math.round((x / 0x80000000) * a);
      out[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
    }
    this.state = x;
    return samples;
  }
}
