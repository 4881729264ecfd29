/**
 * Byte and gain helpers shared by the TTS adapters: vendors send PCM16 little-endian bytes cut at
 * arbitrary places, and `volume` is applied locally as a gain (no vendor here takes it).
 */

/**
 * Turns a byte stream of PCM16 LE into samples across chunk borders: a chunk ending on half a
 * sample keeps that byte for the next one (HTTP and WebSocket framing do not respect samples).
 */
export class Pcm16Decoder {
  private carry: number | undefined;

  /** Decodes what is complete; returns an empty array when the chunk completes no sample. */
  push(bytes: Uint8Array): Int16Array {
    const extra = this.carry === undefined ? 0 : 1;
    const total = bytes.length + extra;
    const out = new Int16Array(total >> 1);
    let i = 0; // index into bytes
    let o = 0;
    if (this.carry !== undefined && bytes.length > 0) {
      out[o++] = ((this.carry | (bytes[0]! << 8)) << 16) >> 16;
      i = 1;
    }
    for (; i + 1 < bytes.length; i += 2) out[o++] = ((bytes[i]! | (bytes[i + 1]! << 8)) << 16) >> 16;
    if (bytes.length === 0) return out; // carry (if any) kept as is
    this.carry = i < bytes.length ? bytes[i] : undefined;
    return out;
  }

  /** Whether half a sample is still pending (the stream ended on an odd byte count). */
  get pending(): boolean {
    return this.carry !== undefined;
  }
}

/**
 * The gain for TtsRequest.volume: 0 or absent means unchanged (the types' "vendor default");
 * so do negative or non-finite values, which can only be configuration mistakes.
 */
export function volumeGain(volume: number | undefined): number {
  return volume !== undefined && Number.isFinite(volume) && volume > 0 ? volume : 1;
}

/** Scales samples in place, saturating at the PCM16 limits (no wrap-around clicks). */
export function applyGain(samples: Int16Array, gain: number): Int16Array {
  if (gain === 1) return samples;
  for (let i = 0; i < samples.length; i++) {
    const v = Math.round(samples[i]! * gain);
    samples[i] = v > 32767 ? 32767 : v < -32768 ? -32768 : v;
  }
  return samples;
}
