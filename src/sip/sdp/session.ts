/**
 * Our o= line across one dialog (RFC 3264 section 8): the session id stays, and the version
 * goes up by one whenever the SDP we send differs from the previous one. When it does not differ
 * (a session-timer refresh, RFC 4028, or a re-INVITE that changes nothing for us) the previous
 * SDP is sent again with its version: "If the version in the origin line does not increment,
 * the SDP MUST be identical to the SDP with that version number" -- and peers that see a new
 * version may rebuild their media path for nothing.
 *
 *   const local = new LocalSdpSession();               // one per dialog
 *   const a1 = local.answer(invite.body, { localAddress, localPort });   // o=- <id> 1
 *   const a2 = local.answer(reInvite.body, { localAddress, localPort, previous: a1 }); // 2 if changed
 */
import {
  createOffer,
  negotiate,
  newSdpSessionId,
  type CreateOfferOptions,
  type NegotiateOptions,
  type NegotiatedAnswer,
  type SdpOffer,
} from './negotiate.ts';
import type { ParsedSdp } from './parse.ts';

export interface LocalSdpSessionOptions {
  /** o= sess-id; a random one by default. */
  sessionId?: string;
  /** Version of the first SDP we send. Default 1. */
  firstVersion?: number;
}

/** The SDP text with the o= version blanked, to compare two SDPs of ours. */
function withoutVersion(sdp: string): string {
  return sdp.replace(/^o=(\S+ \S+ )\S+/m, 'o=$1*');
}

export class LocalSdpSession {
  readonly sessionId: string;
  readonly #firstVersion: number;
  #version: number | undefined;
  #lastKey: string | undefined;

  /** @throws TypeError / RangeError for a non-numeric session id or a bad first version. */
  constructor(options: LocalSdpSessionOptions = {}) {
    this.sessionId = options.sessionId ?? newSdpSessionId();
    if (!/^\d{1,20}$/.test(this.sessionId)) throw new TypeError(`sessionId must be a numeric string, got ${this.sessionId}`);
    this.#firstVersion = options.firstVersion ?? 1;
    if (!Number.isSafeInteger(this.#firstVersion) || this.#firstVersion < 0) throw new RangeError(`firstVersion must be a non-negative integer, got ${this.#firstVersion}`);
  }

  /** Version of the last SDP produced; undefined before the first. */
  get version(): number | undefined {
    return this.#version;
  }

  /**
   * negotiate() with this dialog's o= id and version.
   * @throws as negotiate(): SdpParseError, SdpNegotiationError (the version is then unchanged).
   */
  answer(offer: string | ParsedSdp, options: Omit<NegotiateOptions, 'sessionId' | 'sessionVersion'>): NegotiatedAnswer {
    return this.#stamp((v) => negotiate(offer, { ...options, sessionId: this.sessionId, sessionVersion: v }), (r) => r.answerSdp);
  }

  /** createOffer() with this dialog's o= id and version (initial offer, hold, resume). */
  offer(options: Omit<CreateOfferOptions, 'sessionId' | 'sessionVersion'>): SdpOffer {
    return this.#stamp((v) => createOffer({ ...options, sessionId: this.sessionId, sessionVersion: v }), (r) => r.sdp);
  }

  #stamp<T>(build: (version: number) => T, sdpOf: (result: T) => string): T {
    const last = this.#version;
    const next = last === undefined ? this.#firstVersion : last + 1;
    const result = build(next);
    const key = withoutVersion(sdpOf(result));
    if (last !== undefined && key === this.#lastKey) return build(last);
    this.#version = next;
    this.#lastKey = key;
    return result;
  }
}
