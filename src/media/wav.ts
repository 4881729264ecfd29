/**
 * The canonical WAV container of PCM16 audio: a 44-byte header (RIFF/WAVE, one `fmt ` chunk
 * with format 1 = PCM, one `data` chunk) followed by little-endian samples, interleaved when
 * there are several channels. STT uploads (mono) and call recordings (stereo) both use it.
 *
 *   0 "RIFF" | 4 size-8 | 8 "WAVE" | 12 "fmt " | 16 16 | 20 1 (PCM) | 22 channels
 *   24 rate | 28 byte rate | 32 block align | 34 bits | 36 "data" | 40 data bytes | 44 samples
 */

export const WAV_HEADER_BYTES = 44;

/** The header of a PCM16 WAV; `dataBytes` 0 for a placeholder patched once the length is known. */
export function wavHeader(sampleRate: number, channels: number, dataBytes: number): Buffer {
  const h = Buffer.alloc(WAV_HEADER_BYTES);
  h.write('RIFF', 0, 'latin1');
  h.writeUInt32LE(36 + dataBytes, 4);
  h.write('WAVE', 8, 'latin1');
  h.write('fmt ', 12, 'latin1');
  h.writeUInt32LE(16, 16); // fmt chunk size
  h.writeUInt16LE(1, 20); // PCM
  h.writeUInt16LE(channels, 22);
  h.writeUInt32LE(sampleRate, 24);
  h.writeUInt32LE(sampleRate * channels * 2, 28); // byte rate
  h.writeUInt16LE(channels * 2, 32); // block align
  h.writeUInt16LE(16, 34); // bits per sample
  h.write('data', 36, 'latin1');
  h.writeUInt32LE(dataBytes, 40);
  return h;
}
