/**
 * PCM16 <-> base64 for the voice protocol's `input_audio` / `response_audio` (PCM 16-bit
 * little-endian, mono). Both directions avoid copies: encoding views the samples' own memory,
 * decoding writes into a caller-owned buffer.
 */
import { BadPacketError } from './errors.ts';

// Node's Buffer is little-endian on every platform we run on; Int16Array uses the host's order.
const HOST_IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
if (!HOST_IS_LITTLE_ENDIAN) throw new Error('callbridge media needs a little-endian host');

/** Base64 of the samples' bytes (PCM16 LE), without copying them first. */
export function pcm16ToBase64(samples: Int16Array): string {
  return Buffer.from(samples.buffer, samples.byteOffset, samples.byteLength).toString('base64');
}

/**
 * Decodes base64 PCM16 into `out` (grown when too small) and returns the samples as a view.
 * @throws BadPacketError (MEDIA_BAD_PACKET) when the text is not base64 or the byte count is odd: the
 *   voice protocol closes the socket with 1007 then (DESIGN.md).
 */
export function base64ToPcm16(text: string, out: { buffer: Buffer }): Int16Array {
  if (text.length % 4 !== 0) throw new BadPacketError('audio is not valid base64');
  // No regex pass over every frame (it cost ~7% of a busy daemon): Node's decoder skips any
  // character outside the alphabet, so valid base64 is exactly the text whose decoded length is
  // the one its length and padding promise.
  const padding = text.endsWith('==') ? 2 : text.endsWith('=') ? 1 : 0;
  const maxBytes = (text.length / 4) * 3;
  // An Int16Array view needs an even byte offset: pooled Buffers may not have one, unpooled do.
  if (out.buffer.length < maxBytes || out.buffer.byteOffset % 2 !== 0) {
    out.buffer = Buffer.allocUnsafeSlow(Math.max(maxBytes, out.buffer.length * 2, 4096));
  }
  const n = out.buffer.write(text, 'base64');
  if (n !== maxBytes - padding || (padding > 0 && text.slice(0, -padding).includes('='))) throw new BadPacketError('audio is not valid base64');
  if (n % 2 !== 0) throw new BadPacketError(`audio has an odd byte count (${n}); PCM16 needs whole samples`);
  return new Int16Array(out.buffer.buffer, out.buffer.byteOffset, n / 2);
}
