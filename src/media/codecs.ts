/**
 * The codecs callbridge speaks, with what the SIP layer needs for SDP offer/answer (RFC 3264):
 * the rtpmap of each (RFC 4566 section 6: `a=rtpmap:<pt> <name>/<clock>[/<channels>]`), and one
 * factory that builds a Codec from the negotiated name and payload type.
 */
import { createPcma, createPcmu, PCMA_PAYLOAD_TYPE, PCMU_PAYLOAD_TYPE, G711_CLOCK_RATE } from './g711.ts';
import { OpusCodec, OPUS_CLOCK_RATE, OPUS_DEFAULT_PAYLOAD_TYPE, type OpusOptions } from './opus.ts';
import type { Codec } from './types.ts';

export type CodecName = 'PCMU' | 'PCMA' | 'opus';

/** One supported codec's SDP data. */
export interface CodecInfo {
  name: CodecName;
  /** RTP clock rate as in rtpmap. */
  clockRate: number;
  /** The static payload type (G.711), or the usual dynamic one to offer (Opus). */
  defaultPayloadType: number;
  /** Whether the payload type is static (RFC 3551 table 4) or chosen in SDP (96-127). */
  dynamic: boolean;
  /** rtpmap channel count. Opus is always "opus/48000/2" in SDP (RFC 7587 section 7), even mono. */
  channels: number;
  /** fmtp parameters to offer, if any. */
  fmtp?: string;
}

/**
 * Supported codecs, in this daemon's order of preference for offers: PCMU and PCMA first
 * because every carrier and PBX has them and the voice side is narrowband anyway; Opus for
 * peers that prefer it (WebRTC gateways, some PBXs).
 */
export const SUPPORTED_CODECS: readonly CodecInfo[] = Object.freeze([
  { name: 'PCMU', clockRate: G711_CLOCK_RATE, defaultPayloadType: PCMU_PAYLOAD_TYPE, dynamic: false, channels: 1 },
  { name: 'PCMA', clockRate: G711_CLOCK_RATE, defaultPayloadType: PCMA_PAYLOAD_TYPE, dynamic: false, channels: 1 },
  {
    name: 'opus',
    clockRate: OPUS_CLOCK_RATE,
    defaultPayloadType: OPUS_DEFAULT_PAYLOAD_TYPE,
    dynamic: true,
    channels: 2,
    // RFC 7587 section 6.1: we decode and send mono; in-band FEC is accepted.
    fmtp: 'minptime=20;useinbandfec=1;stereo=0;sprop-stereo=0',
  },
] satisfies CodecInfo[]);

/** The SDP data of a codec by its rtpmap name (case-insensitive, as SDP encoding names are). */
export function codecInfo(name: string): CodecInfo | undefined {
  const lower = name.toLowerCase();
  return SUPPORTED_CODECS.find((c) => c.name.toLowerCase() === lower);
}

export interface CreateCodecOptions extends OpusOptions {
  /** Payload type negotiated in SDP; defaults to the codec's defaultPayloadType. */
  payloadType?: number;
}

/**
 * Builds a codec. G.711 codecs are stateless and cheap; an Opus codec holds native encoder and
 * decoder state, so create one per call and close() it.
 * @throws RangeError for an unknown codec name or an invalid payload type / Opus option.
 */
export function createCodec(name: CodecName, options: CreateCodecOptions = {}): Codec {
  const pt = options.payloadType;
  if (pt !== undefined && (!Number.isInteger(pt) || pt < 0 || pt > 127)) throw new RangeError(`payload type must be 0-127, got ${pt}`);
  switch (name) {
    case 'PCMU':
      return createPcmu(pt);
    case 'PCMA':
      return createPcma(pt);
    case 'opus':
      return new OpusCodec(options);
    default:
      throw new RangeError(`unsupported codec: ${String(name)}`);
  }
}
