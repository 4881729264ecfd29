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

/** The caller's decode buffer, grown to hold `bytes`, aligned for an Int16Array view. */
function scratchFor(out: { buffer: Buffer }, bytes: number): Buffer {
  // An Int16Array view needs an even byte offset: pooled Buffers may not have one, unpooled do.
  if (out.buffer.length < bytes || out.buffer.byteOffset % 2 !== 0) out.buffer = Buffer.allocUnsafeSlow(Math.max(bytes, out.buffer.length * 2, 4096));
  return out.buffer;
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
  const n = scratchFor(out, maxBytes).write(text, 'base64');
  if (n !== maxBytes - padding || (padding > 0 && text.slice(0, -padding).includes('='))) throw new BadPacketError('audio is not valid base64');
  if (n % 2 !== 0) throw new BadPacketError(`audio has an odd byte count (${n}); PCM16 needs whole samples`);
  return new Int16Array(out.buffer.buffer, out.buffer.byteOffset, n / 2);
}

// Byte-level base64 for the bridge's per-frame messages. Node's base64 goes through strings, and
// at 200 calls those strings (1.3 kB per input_audio, 2.6 kB twice per response_audio) were most
// of what a media thread allocated: the scavenges they caused are where a real-time media
// thread's late frames fell (docs/media-workers.md). These work on bytes, off the JS heap.
const B64 = new TextEncoder().encode('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/');
/** Byte -> 6-bit value, 255 for bytes outside the alphabet. */
const B64_VALUE = new Uint8Array(256).fill(255);
for (let i = 0; i < 64; i++) B64_VALUE[B64[i]!] = i;
const PAD = 0x3d; // '='

/** Length of the base64 text of `bytes` bytes (with padding). */
export function base64Length(bytes: number): number {
  return Math.ceil(bytes / 3) * 4;
}

/**
 * Writes the base64 of the samples' bytes (PCM16 LE) into `out` at `offset`; returns the offset
 * after it. `out` must have base64Length(samples.byteLength) bytes free there.
 */
export function pcm16ToBase64Bytes(samples: Int16Array, out: Uint8Array, offset: number): number {
  const src = new Uint8Array(samples.buffer, samples.byteOffset, samples.byteLength);
  const n = src.length;
  let o = offset;
  let i = 0;
  for (; i + 2 < n; i += 3) {
    const v = (src[i]! << 16) | (src[i + 1]! << 8) | src[i + 2]!;
    out[o++] = B64[v >>> 18]!;
    out[o++] = B64[(v >>> 12) & 63]!;
    out[o++] = B64[(v >>> 6) & 63]!;
    out[o++] = B64[v & 63]!;
  }
  if (i < n) {
    const v = (src[i]! << 16) | (i + 1 < n ? src[i + 1]! << 8 : 0);
    out[o++] = B64[v >>> 18]!;
    out[o++] = B64[(v >>> 12) & 63]!;
    out[o++] = i + 1 < n ? B64[(v >>> 6) & 63]! : PAD;
    out[o++] = PAD;
  }
  return o;
}

/**
 * Decodes the base64 text in bytes[start, end) as PCM16 into `out` (grown when too small) and
 * returns the samples as a view; null when the text is not strict base64 or the byte count is
 * odd (the caller then takes its slow path, which says what was wrong).
 */
export function base64BytesToPcm16(bytes: Uint8Array, start: number, end: number, out: { buffer: Buffer }): Int16Array | null {
  const len = end - start;
  if (len % 4 !== 0) return null;
  if (len === 0) return new Int16Array(0);
  const padding = bytes[end - 1] === PAD ? (bytes[end - 2] === PAD ? 2 : 1) : 0;
  const n = (len / 4) * 3 - padding;
  if (n % 2 !== 0) return null;
  const dst = scratchFor(out, n);
  let o = 0;
  const whole = end - (padding > 0 ? 4 : 0);
  let bad = 0;
  for (let i = start; i < whole; i += 4) {
    const a = B64_VALUE[bytes[i]!]!;
    const b = B64_VALUE[bytes[i + 1]!]!;
    const c = B64_VALUE[bytes[i + 2]!]!;
    const d = B64_VALUE[bytes[i + 3]!]!;
    bad |= a | b | c | d;
    const v = (a << 18) | (b << 12) | (c << 6) | d;
    dst[o++] = v >>> 16;
    dst[o++] = (v >>> 8) & 255;
    dst[o++] = v & 255;
  }
  if (padding > 0) {
    const a = B64_VALUE[bytes[whole]!]!;
    const b = B64_VALUE[bytes[whole + 1]!]!;
    const c = padding === 1 ? B64_VALUE[bytes[whole + 2]!]! : 0;
    bad |= a | b | c;
    const v = (a << 18) | (b << 12) | (c << 6);
    dst[o] = v >>> 16;
    if (padding === 1) dst[o + 1] = (v >>> 8) & 255;
  }
  // Any byte outside the alphabet (padding in the middle included) maps to 255, which has bits a
  // 6-bit value never has.
  if (bad & 0xc0) return null;
  return new Int16Array(dst.buffer, dst.byteOffset, n / 2);
}
