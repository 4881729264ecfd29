/**
 * Opus (RFC 6716) over RTP (RFC 7587): 48 kHz RTP clock always (section 4.1), mono here, 20 ms
 * frames (960 samples), dynamic payload type chosen by SDP (111 by convention).
 *
 * Backed by @discordjs/opus (native libopus). What that binding forces, since it cannot write
 * into caller buffers:
 * - encode() and decode() each return a NEW Buffer (N-API Buffer::Copy of the native scratch
 *   array): one small allocation per call, copied here into the caller's `out`.
 * - its input must be a Node Buffer, so each call wraps the caller's typed array in a Buffer
 *   VIEW (no copy of the samples, one small object).
 * - PLC (see conceal()) can only be asked for as a whole 120 ms at once.
 * So Opus is the one codec whose hot path allocates per packet; G.711 does not.
 */
import opusBinding from '@discordjs/opus';
import type { Codec } from './types.ts';

// The binding is CommonJS exporting through `module.exports = require(...)`, which Node's ESM
// loader cannot see named exports in: take the default export.
const { OpusEncoder } = opusBinding;
type OpusEncoder = InstanceType<typeof OpusEncoder>;

export const OPUS_CLOCK_RATE = 48000;
export const OPUS_FRAME_MS = 20;
export const OPUS_SAMPLES_PER_FRAME = (OPUS_CLOCK_RATE * OPUS_FRAME_MS) / 1000;
/** The payload type most SIP/WebRTC peers offer for opus/48000/2 (any dynamic 96-127 is valid). */
export const OPUS_DEFAULT_PAYLOAD_TYPE = 111;
/** The longest Opus packet is 120 ms (RFC 6716 section 3.2.5): the most decode() may write. */
export const OPUS_MAX_SAMPLES_PER_PACKET = (OPUS_CLOCK_RATE * 120) / 1000;

// libopus CTL request numbers and values (opus_defines.h), applied through applyEncoderCTL.
const OPUS_SET_APPLICATION_REQUEST = 4000;
const OPUS_APPLICATION_VOIP = 2048;
const OPUS_SET_BITRATE_REQUEST = 4002;
const OPUS_SET_COMPLEXITY_REQUEST = 4010;
const OPUS_SET_INBAND_FEC_REQUEST = 4012;
const OPUS_SET_PACKET_LOSS_PERC_REQUEST = 4014;
const OPUS_SET_SIGNAL_REQUEST = 4024;
const OPUS_SIGNAL_VOICE = 3001;

export interface OpusOptions {
  /** RTP payload type as negotiated in SDP (96-127). Default 111. */
  payloadType?: number;
  /** Target bitrate in bit/s. Default 32000 (wideband speech well above transparency). */
  bitrate?: number;
  /**
   * Encoder complexity 0-10. Default 5: with speech (SILK/hybrid mode) it halves the encoder's
   * cost against libopus's default 10 (measured ~140 vs ~290 us per 20 ms frame on the 2-core
   * dev VM) for a quality difference hard to hear on telephone speech.
   */
  complexity?: number;
  /** In-band FEC (RFC 6716 section 2.1.7) tuned for this expected loss percentage; 0 = off. Default 0. */
  expectedLossPercent?: number;
}

/**
 * An Opus codec instance: one encoder and one decoder state, so ONE PER CALL (Opus is
 * stateful, unlike G.711).
 */
export class OpusCodec implements Codec {
  readonly name = 'opus';
  readonly clockRate = OPUS_CLOCK_RATE;
  readonly sampleRate = OPUS_CLOCK_RATE;
  readonly frameMs = OPUS_FRAME_MS;
  readonly samplesPerFrame = OPUS_SAMPLES_PER_FRAME;
  readonly payloadType: number;

  private opus: OpusEncoder | null;
  private static readonly EMPTY = Buffer.alloc(0);
  /** The last 120 ms of PLC output and how many 20 ms frames of it were handed out. */
  private plc: Int16Array | null = null;
  private plcUsed = 0;

  /**
   * @throws RangeError when payloadType is not 0-127, or bitrate / complexity / loss percentage
   *   are out of libopus's range.
   */
  constructor(options: OpusOptions = {}) {
    const pt = options.payloadType ?? OPUS_DEFAULT_PAYLOAD_TYPE;
    if (!Number.isInteger(pt) || pt < 0 || pt > 127) throw new RangeError(`opus: payload type must be 0-127, got ${pt}`);
    const bitrate = options.bitrate ?? 32000;
    if (!Number.isInteger(bitrate) || bitrate < 6000 || bitrate > 510000) throw new RangeError(`opus: bitrate must be 6000-510000, got ${bitrate}`);
    const loss = options.expectedLossPercent ?? 0;
    if (!Number.isInteger(loss) || loss < 0 || loss > 100) throw new RangeError(`opus: expectedLossPercent must be 0-100, got ${loss}`);
    const complexity = options.complexity ?? 5;
    if (!Number.isInteger(complexity) || complexity < 0 || complexity > 10) throw new RangeError(`opus: complexity must be 0-10, got ${complexity}`);
    this.payloadType = pt;
    this.opus = new OpusEncoder(OPUS_CLOCK_RATE, 1);
    // The binding creates its encoder with OPUS_APPLICATION_AUDIO; VOIP (speech-tuned, with
    // the high-pass and intelligibility emphasis) can still be set before the first frame.
    this.opus.applyEncoderCTL(OPUS_SET_APPLICATION_REQUEST, OPUS_APPLICATION_VOIP);
    this.opus.applyEncoderCTL(OPUS_SET_SIGNAL_REQUEST, OPUS_SIGNAL_VOICE);
    this.opus.applyEncoderCTL(OPUS_SET_BITRATE_REQUEST, bitrate);
    this.opus.applyEncoderCTL(OPUS_SET_COMPLEXITY_REQUEST, complexity);
    if (loss > 0) {
      this.opus.applyEncoderCTL(OPUS_SET_INBAND_FEC_REQUEST, 1);
      this.opus.applyEncoderCTL(OPUS_SET_PACKET_LOSS_PERC_REQUEST, loss);
    }
  }

  private get binding(): OpusEncoder {
    if (this.opus === null) throw new Error('opus: codec is closed');
    return this.opus;
  }

  /**
   * Decodes one packet (2.5 to 120 ms; 960 samples for the usual 20 ms).
   * @throws RangeError when out is too small for the decoded samples.
   * @throws TypeError when libopus rejects the packet as corrupt.
   * @throws Error when the codec is closed.
   */
  decode(payload: Uint8Array, out: Int16Array): number {
    const pcm = this.binding.decode(Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength));
    this.plc = null; // a real packet ends the loss run: the next loss starts fresh PLC
    return copyPcm(pcm, out);
  }

  /**
   * Encodes exactly 960 samples (20 ms) of 48 kHz PCM.
   * @throws RangeError on a wrong frame length or when out is smaller than the packet.
   * @throws Error when the codec is closed.
   */
  encode(pcm: Int16Array, out: Uint8Array): number {
    if (pcm.length !== this.samplesPerFrame) throw new RangeError(`opus encode: expected ${this.samplesPerFrame} samples, got ${pcm.length}`);
    const packet = this.binding.encode(Buffer.from(pcm.buffer, pcm.byteOffset, pcm.byteLength));
    if (out.length < packet.length) throw new RangeError(`opus encode: output holds ${out.length} bytes, packet is ${packet.length}`);
    out.set(packet);
    return packet.length;
  }

  /**
   * libopus packet loss concealment for one lost 20 ms frame.
   *
   * The binding has no PLC entry point, but opus_decode() with an empty packet is PLC (RFC 6716
   * section 4.4; opus_decoder.c: `len==0`), and the binding passes its fixed 120 ms output size
   * as frame_size, so one call conceals 120 ms. That output is kept and handed out 20 ms at a
   * time for up to six consecutive losses, which is what six 20 ms PLC calls would return. The
   * price: after the first loss the decoder state is 120 ms ahead, so the first packet after a
   * short loss is decoded against a more faded state than libopus would have after 20 ms (its
   * onset may be slightly softer). Cost: about six frame decodes (~200 us measured) and one
   * 11.5 KB array, once per loss run.
   * @throws RangeError when out holds fewer than 960 samples.
   * @throws Error when the codec is closed.
   */
  conceal(out: Int16Array): number {
    const n = this.samplesPerFrame;
    if (out.length < n) throw new RangeError(`opus conceal: output holds ${out.length} samples, ${n} needed`);
    if (this.plc === null || this.plcUsed * n >= this.plc.length) {
      const pcm = this.binding.decode(OpusCodec.EMPTY);
      const samples = new Int16Array(pcm.length >> 1);
      copyPcm(pcm, samples);
      this.plc = samples;
      this.plcUsed = 0;
    }
    const start = this.plcUsed * n;
    out.set(this.plc.subarray(start, start + n));
    this.plcUsed++;
    return n;
  }

  /** Releases the native encoder/decoder (on garbage collection: the binding has no destroy()). Idempotent. */
  close(): void {
    this.opus = null;
    this.plc = null;
  }

  get closed(): boolean {
    return this.opus === null;
  }
}

/**
 * Copies little-endian PCM16 from a binding Buffer into out.
 * @throws RangeError when out is too small.
 */
function copyPcm(pcm: Buffer, out: Int16Array): number {
  const samples = pcm.length >> 1;
  if (out.length < samples) throw new RangeError(`opus decode: output holds ${out.length} samples, ${samples} decoded`);
  if ((pcm.byteOffset & 1) === 0 && LITTLE_ENDIAN) {
    out.set(new Int16Array(pcm.buffer, pcm.byteOffset, samples));
  } else {
    for (let i = 0; i < samples; i++) out[i] = pcm.readInt16LE(i * 2);
  }
  return samples;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
