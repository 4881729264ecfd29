/**
 * PCM16 helpers for the STT adapters: little-endian bytes (what `linear16` streams and WAV
 * files carry) and a minimal WAV container for batch transcription endpoints.
 */
import { endianness } from 'node:os';
import { wavHeader } from '../../../media/wav.ts';

const LITTLE_ENDIAN_HOST = endianness() === 'LE';

/** The samples as little-endian PCM16 bytes, always a copy (callers may reuse their frames). */
export function pcm16ToLittleEndian(samples: Int16Array): Buffer {
  if (LITTLE_ENDIAN_HOST) {
    return Buffer.from(new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength));
  }
  const out = Buffer.allocUnsafe(samples.length * 2);
  for (let i = 0; i < samples.length; i++) out.writeInt16LE(samples[i]!, i * 2);
  return out;
}


/** A mono PCM16 WAV file of the samples (src/media/wav.ts has the layout). */
export function pcm16ToWav(samples: Int16Array, sampleRate: number): Buffer {
  const header = wavHeader(sampleRate, 1, samples.length * 2);
  return Buffer.concat([header, pcm16ToLittleEndian(samples)]);
}
