/**
 * Errors of SDP offer/answer (sdp*.ts). They live beside the SDP code rather than in errors.ts
 * (the message layer's catalogue), but follow its conventions: a stable `code` to switch on, a
 * human message that may change, the SIP status to answer with, and the cause kept as `cause`.
 *
 * Which SIP response each one maps to:
 *
 *   SdpParseError        the body is not SDP we can read      UAS: 400 Bad Request (reason)
 *   SdpNegotiationError  an offer we cannot accept            UAS: 488 Not Acceptable Here with
 *                        (no common codec, no audio, SRTP..)      Warning: 3xx (RFC 3261 20.43)
 *                        an answer that does not fit our offer UAC: ACK, then BYE with Reason
 *                                                                 (RFC 3261 13.2.2.4, RFC 3326)
 *
 * For a re-INVITE the same statuses apply and the session continues unchanged (RFC 3261 14.2).
 */
import { CodedError } from '../../coded-error.ts';

export const SDP_ERROR_CODES = [
  /** The body is not a well-formed session description (RFC 4566 section 5 grammar). */
  'SDP_PARSE',
  /** An audio stream was usable but shares no codec with us (Warning 305). */
  'SDP_NO_COMMON_CODEC',
  /** No audio stream at all, or every audio stream disabled with port 0 (Warning 304). */
  'SDP_NO_AUDIO',
  /** Audio only over a transport we do not speak: SRTP, DTLS-SRTP, TCP (Warning 302). */
  'SDP_INCOMPATIBLE_TRANSPORT',
  /** Audio only on multicast addresses or layered port ranges (Warning 301). */
  'SDP_INCOMPATIBLE_ADDRESS',
  /** An answer that breaks RFC 3264 against our offer (m-line count, media type, transport). */
  'SDP_ANSWER_MISMATCH',
  /** The answer rejected our audio stream (port 0). */
  'SDP_ANSWER_REJECTED',
  /** The trunk requires SRTP (media_encryption "require") and the offer has only plain RTP. */
  'SDP_SRTP_REQUIRED',
  /** SDES keys (RTP/SAVP with a=crypto) over a signalling transport that is not TLS (RFC 4568 8.3). */
  'SDP_SDES_NEEDS_TLS',
  /** RTP/SAVP without an a=crypto line we can use (suite, key, MKI or parameters), or an answer without one. */
  'SDP_NO_CRYPTO',
] as const;

export type SdpErrorCode = (typeof SDP_ERROR_CODES)[number];

export class SdpError extends CodedError<SdpErrorCode> {
  override name = 'SdpError';
}

/** Quotes a string for a quoted-string header parameter (RFC 3261 25.1): escape `"` and `\`. */
function quote(text: string): string {
  return `"${text.replace(/[\\"]/g, (c) => `\\${c}`)}"`;
}

/**
 * The body could not be read as SDP. `reason` is a Reason-Phrase for a 400 ("Bad Request:
 * malformed SDP: ..."): printable ASCII without CR/LF; `message` may say more for logs.
 */
export class SdpParseError extends SdpError {
  override name = 'SdpParseError';
  /** Status code of the response to an INVITE/UPDATE/ACK that carried this body. */
  readonly status = 400;
  readonly reason: string;
  constructor(detail: string, options?: { cause?: unknown }) {
    super('SDP_PARSE', `malformed SDP: ${detail}`, options);
    // Reason-Phrase (RFC 3261 25.1) is TEXT-UTF8 without CR/LF; keep it short and ASCII.
    this.reason = `Bad Request: malformed SDP: ${detail}`.replace(/[^\x20-\x7e]/g, '?').slice(0, 120);
  }

  /** Reason header value (RFC 3326) for a BYE after a 2xx whose answer was unreadable. */
  reasonHeader(): string {
    return `SIP ;cause=400 ;text=${quote('Malformed SDP')}`;
  }
}

/** SIP warn-codes for media problems (RFC 3261 section 20.43). */
export const SDP_WARNINGS = {
  SDP_NO_COMMON_CODEC: { code: 305, text: 'Incompatible media format' },
  SDP_NO_AUDIO: { code: 304, text: 'Media type not available' },
  SDP_INCOMPATIBLE_TRANSPORT: { code: 302, text: 'Incompatible transport protocol' },
  SDP_INCOMPATIBLE_ADDRESS: { code: 301, text: 'Incompatible network address formats' },
  SDP_ANSWER_MISMATCH: { code: 399, text: 'Answer does not match the offer' },
  SDP_ANSWER_REJECTED: { code: 304, text: 'Media type not available' },
  // warn-text is free text (RFC 3261 20.43): these name the reason, as the trunk's admin needs it.
  SDP_SRTP_REQUIRED: { code: 302, text: 'SRTP required by the trunk' },
  SDP_SDES_NEEDS_TLS: { code: 302, text: 'SDES keys only over TLS' },
  SDP_NO_CRYPTO: { code: 302, text: 'No supported SRTP crypto suite (AES_CM_128_HMAC_SHA1_80/32)' },
} as const satisfies Record<Exclude<SdpErrorCode, 'SDP_PARSE'>, { code: number; text: string }>;

export type SdpNegotiationErrorCode = keyof typeof SDP_WARNINGS;

/**
 * An offer we cannot accept, or an answer that does not fit our offer. A UAS answers the
 * offer with `status` 488 Not Acceptable Here (RFC 3261 21.4.26) and
 * `Warning: <warningCode> <agent> "<warningText>"` (`warningHeader(agent)`); a UAC that got
 * such an answer in a 2xx ACKs it and sends BYE with `Reason: reasonHeader()` (RFC 3326).
 */
export class SdpNegotiationError extends SdpError {
  override name = 'SdpNegotiationError';
  readonly status = 488;
  /** The SIP warn-code: 305 "Incompatible media format" when there is no common codec. */
  readonly warningCode: number;
  /** The warn-text, e.g. "Incompatible media format". */
  readonly warningText: string;
  declare readonly code: SdpNegotiationErrorCode;

  constructor(code: SdpNegotiationErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.warningCode = SDP_WARNINGS[code].code;
    this.warningText = SDP_WARNINGS[code].text;
  }

  /**
   * The Warning header field value (RFC 3261 20.43): `305 callbridge "Incompatible media
   * format"`. `agent` is our host name or a pseudonym (warn-agent), without spaces.
   */
  warningHeader(agent = 'callbridge'): string {
    return `${this.warningCode} ${agent.replace(/\s+/g, '') || '-'} ${quote(this.warningText)}`;
  }

  /** Reason header value (RFC 3326) for the BYE or CANCEL of a call whose media failed. */
  reasonHeader(): string {
    return `SIP ;cause=${this.status} ;text=${quote(this.warningText)}`;
  }
}

/** True for any error thrown by the SDP functions (the only ones they throw on bad input). */
export function isSdpError(err: unknown): err is SdpError {
  return err instanceof SdpError;
}
