/**
 * G.711 (ITU-T G.711, 1988) mu-law "PCMU" (RTP payload type 0) and A-law "PCMA" (payload type 8),
 * RFC 3551 section 4.5.14: 8000 Hz clock, one byte per sample, 20 ms = 160 samples per packet.
 *
 * alawmulaw is the reference implementation, but it allocates a new array per call and runs
 * its bit arithmetic per sample. Here its own per-sample functions fill lookup tables ONCE at
 * module load, and the codecs only index those tables into caller-owned buffers:
 *
 *   decode: 256 codes -> Int16Array(256)                         (512 bytes per law)
 *   encode: every 16-bit sample value (s & 0xffff) -> Uint8Array  (64 KiB per law)
 *
 * The encode table is indexed by the full 16-bit value rather than by `s >> 2` / `s >> 3`:
 * alawmulaw converts to sign-magnitude before truncating, so negative samples do not truncate
 * the same way as an arithmetic shift and a shorter table would differ from the reference for
 * ~1% of inputs. 64 KiB fits in L2 and makes the table bit-exact by construction (a test checks
 * all 65,536 inputs and all 256 codes against alawmulaw).
 */
import alawmulaw from 'alawmulaw';
import type { Codec } from './types.ts';

/** RTP payload types of G.711 (RFC 3551 table 4). */
export const PCMU_PAYLOAD_TYPE = 0;
export const PCMA_PAYLOAD_TYPE = 8;
export const G711_CLOCK_RATE = 8000;
export const G711_FRAME_MS = 20;
export const G711_SAMPLES_PER_FRAME = (G711_CLOCK_RATE * G711_FRAME_MS) / 1000;

function buildDecodeTable(decodeSample: (code: number) => number): Int16Array {
  const table = new Int16Array(256);
  for (let code = 0; code < 256; code++) table[code] = decodeSample(code);
  return table;
}

function buildEncodeTable(encodeSample: (sample: number) => number): Uint8Array {
  const table = new Uint8Array(65536);
  for (let u = 0; u < 65536; u++) {
    // u is the sample's 16-bit two's-complement pattern; (u << 16) >> 16 restores its sign.
    // alawmulaw's mulaw.encodeSample returns a negative number (~x): keep its low byte, as its
    // own array encode() does by storing into a Uint8Array.
    table[u] = encodeSample((u << 16) >> 16) & 0xff;
  }
  return table;
}

const MULAW_DECODE = buildDecodeTable(alawmulaw.mulaw.decodeSample);
const MULAW_ENCODE = buildEncodeTable(alawmulaw.mulaw.encodeSample);
const ALAW_DECODE = buildDecodeTable(alawmulaw.alaw.decodeSample);
const ALAW_ENCODE = buildEncodeTable(alawmulaw.alaw.encodeSample);

/**
 * Decodes `length` G.711 codes from `codes` into `out` through a 256-entry table.
 * @throws RangeError when `out` or `codes` is shorter than `length`.
 */
function decodeWith(table: Int16Array, codes: Uint8Array, out: Int16Array, length: number): number {
  if (length > codes.length) throw new RangeError(`G.711 decode: length ${length} exceeds the ${codes.length} input bytes`);
  if (out.length < length) throw new RangeError(`G.711 decode: output holds ${out.length} samples, ${length} needed`);
  for (let i = 0; i < length; i++) out[i] = table[codes[i]!]!;
  return length;
}

/**
 * Encodes `length` samples from `pcm` into `out` through the 65,536-entry table.
 * @throws RangeError when `out` or `pcm` is shorter than `length`.
 */
function encodeWith(table: Uint8Array, pcm: Int16Array, out: Uint8Array, length: number): number {
  if (length > pcm.length) throw new RangeError(`G.711 encode: length ${length} exceeds the ${pcm.length} input samples`);
  if (out.length < length) throw new RangeError(`G.711 encode: output holds ${out.length} bytes, ${length} needed`);
  for (let i = 0; i < length; i++) out[i] = table[pcm[i]! & 0xffff]!;
  return length;
}

/**
 * mu-law codes to PCM16, any length (e.g. a whole buffer, not only one frame).
 * @throws RangeError when `out` or `codes` is shorter than `length`.
 */
export function decodeMuLaw(codes: Uint8Array, out: Int16Array, length: number = codes.length): number {
  return decodeWith(MULAW_DECODE, codes, out, length);
}

/**
 * PCM16 to mu-law codes, any length.
 * @throws RangeError when `out` or `pcm` is shorter than `length`.
 */
export function encodeMuLaw(pcm: Int16Array, out: Uint8Array, length: number = pcm.length): number {
  return encodeWith(MULAW_ENCODE, pcm, out, length);
}

/**
 * A-law codes to PCM16, any length.
 * @throws RangeError when `out` or `codes` is shorter than `length`.
 */
export function decodeALaw(codes: Uint8Array, out: Int16Array, length: number = codes.length): number {
  return decodeWith(ALAW_DECODE, codes, out, length);
}

/**
 * PCM16 to A-law codes, any length.
 * @throws RangeError when `out` or `pcm` is shorter than `length`.
 */
export function encodeALaw(pcm: Int16Array, out: Uint8Array, length: number = pcm.length): number {
  return encodeWith(ALAW_ENCODE, pcm, out, length);
}

/** One G.711 law as a Codec. Stateless: one instance may serve any number of calls. */
class G711Codec implements Codec {
  readonly clockRate = G711_CLOCK_RATE;
  readonly sampleRate = G711_CLOCK_RATE;
  readonly frameMs = G711_FRAME_MS;
  readonly samplesPerFrame = G711_SAMPLES_PER_FRAME;

  constructor(
    readonly name: 'PCMU' | 'PCMA',
    readonly payloadType: number,
    private readonly decodeTable: Int16Array,
    private readonly encodeTable: Uint8Array,
  ) {}

  /**
   * Decodes the whole payload (one byte per sample, so a 30 ms packet gives 240 samples).
   * @throws RangeError when out is shorter than the payload.
   */
  decode(payload: Uint8Array, out: Int16Array): number {
    const n = payload.length;
    if (out.length < n) throw new RangeError(`${this.name} decode: output holds ${out.length} samples, ${n} needed`);
    const table = this.decodeTable;
    for (let i = 0; i < n; i++) out[i] = table[payload[i]!]!;
    return n;
  }

  /**
   * Encodes exactly one 20 ms frame.
   * @throws RangeError when pcm is not 160 samples or out is shorter than 160 bytes.
   */
  encode(pcm: Int16Array, out: Uint8Array): number {
    if (pcm.length !== this.samplesPerFrame) {
      throw new RangeError(`${this.name} encode: expected ${this.samplesPerFrame} samples, got ${pcm.length}`);
    }
    const n = this.samplesPerFrame;
    if (out.length < n) throw new RangeError(`${this.name} encode: output holds ${out.length} bytes, ${n} needed`);
    const table = this.encodeTable;
    for (let i = 0; i < n; i++) out[i] = table[pcm[i]! & 0xffff]!;
    return n;
  }

  /** G.711 has no concealment of its own (G.711 Appendix I PLC is left to the caller): 0. */
  conceal(_out: Int16Array): number {
    return 0;
  }

  close(): void {
    // Stateless: nothing to release.
  }
}

/** A PCMU codec (mu-law, PT 0, or another PT when an SDP maps it dynamically). */
export function createPcmu(payloadType: number = PCMU_PAYLOAD_TYPE): Codec {
  return new G711Codec('PCMU', payloadType, MULAW_DECODE, MULAW_ENCODE);
}

/** A PCMA codec (A-law, PT 8, or another PT when an SDP maps it dynamically). */
export function createPcma(payloadType: number = PCMA_PAYLOAD_TYPE): Codec {
  return new G711Codec('PCMA', payloadType, ALAW_DECODE, ALAW_ENCODE);
}
