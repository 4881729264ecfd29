/**
 * PCM16 helpers for the STT adapters: little-endian bytes (what `linear16` streams and WAV
 * files carry) and a minimal WAV container for batch transcription endpoints.
 */
import { endianness } from 'node:os';

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

export const WAV_HEADER_BYTES = 44;

/**
 * A canonical 44-byte-header WAV file (RIFF/WAVE, one `fmt ` chunk with PCM format 1, one
 * `data` chunk) holding mono PCM16 at `sampleRate`:
 *
 *   0 "RIFF" | 4 size-8 | 8 "WAVE" | 12 "fmt " | 16 16 | 20 1 (PCM) | 22 channels
 *   24 rate | 28 byte rate | 32 block align | 34 bits | 36 "data" | 40 data bytes | 44 samples
 */
export function pcm16ToWav(samples: Int16Array, sampleRate: number): Buffer {
  const dataBytes = samples.length * 2;
  const header = Buffer.alloc(WAV_HEADER_BYTES);
  header.write('RIFF', 0, 'ascii');
  header.writeUInt32LE(36 + dataBytes, 4);
  header.write('WAVE', 8, 'ascii');
  header.write('fmt ', 12, 'ascii');
  header.writeUInt32LE(16, 16); // fmt chunk size
  header.writeUInt16LE(1, 20); // PCM
  header.writeUInt16LE(1, 22); // mono
  header.writeUInt32LE(sampleRate, 24);
  header.writeUInt32LE(sampleRate * 2, 28); // byte rate = rate * block align
  header.writeUInt16LE(2, 32); // block align = channels * 2 bytes
  header.writeUInt16LE(16, 34); // bits per sample
  header.write('data', 36, 'ascii');
  header.writeUInt32LE(dataBytes, 40);
  return Buffer.concat([header, pcm16ToLittleEndian(samples)]);
}
