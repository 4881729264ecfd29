/**
 * A SIP call as a bridge call leg: the adapter between src/sip's SipCall and the transport-neutral
 * CallLeg the bridge core drives. It lives in bridge/ because it joins the two folders (sip/
 * knows nothing of bridging). What is SIP here and nowhere else: refusal causes become final
 * responses, a transfer is a REFER, DTMF goes out as RFC 4733 events on the call's RTP.
 */
import type { Logger } from '../log.ts';
import type { BridgeMedia, BridgeMediaCallbacks, BridgeMediaConfig } from '../media/bridge-media.ts';
import { startBridgeMedia } from '../media/media-host.ts';
import type { MediaTicker } from '../media/media-ticker.ts';
import type { SipDetails } from '../domain/call.ts';
import { defaultReason } from '../sip/message/index.ts';
import type { SipCall } from '../sip/ua/index.ts';
import type { CallLeg, LegEnd, LegMediaOptions, LegQuality, LegRoute, RefusalCause } from './call-leg.ts';

/** The final response of each refusal: 503 the service, 480 the agent (RFC 3261 21.4.18), 500 us. */
const REFUSAL_STATUS: Record<RefusalCause, number> = {
  service_unavailable: 503,
  agent_unavailable: 480,
  internal_error: 500,
  // RFC 3261 21.4.24 Busy Here: this trunk or organization is full, not the whole service.
  busy: 486,
};

/** A Call-ID is the peer's choice of length (often `random@host`): spans keep this much of it. */
const CALL_ID_SPAN_CHARS = 64;

export class SipCallLeg implements CallLeg {
  readonly call: SipCall;
  readonly #ticker: MediaTicker;
  readonly #log: Logger;
  /** The final response to the INVITE, once known (an outbound call's arrives answered: 200). */
  #finalStatus: number | undefined;
  /** Its reason phrase: a refusal's is the bridge's why (what the response carried), else the usual one. */
  #finalReason: string | undefined;

  constructor(call: SipCall, ticker: MediaTicker, log: Logger) {
    this.call = call;
    this.#ticker = ticker;
    this.#log = log;
    if (call.state === 'answered') this.#finalStatus = 200;
    // A caller's CANCEL is answered 487 Request Terminated by the UAS (RFC 3261 9.2).
    call.on('hangup', (info) => (this.#finalStatus ??= info.reason === 'cancelled' ? 487 : undefined));
  }

  get id(): string {
    return this.call.id;
  }
  get direction(): 'inbound' | 'outbound' {
    return this.call.direction;
  }
  get from(): string {
    return this.call.from;
  }
  get to(): string {
    return this.call.to;
  }
  get route(): LegRoute | undefined {
    return this.call.route;
  }
  get trunkId(): string | undefined {
    return this.call.trunk?.id ?? this.call.route?.trunkId;
  }
  get state(): 'ringing' | 'answered' | 'ended' {
    return this.call.state;
  }
  get closed(): boolean {
    return this.call.closed;
  }
  get codec(): string {
    return this.call.media.codec.name;
  }

  answer(): boolean {
    const answered = this.call.answer();
    if (answered) this.#finalStatus = 200;
    return answered;
  }

  refuse(cause: RefusalCause, why: string): void {
    if (this.#finalStatus === undefined) {
      this.#finalStatus = REFUSAL_STATUS[cause];
      this.#finalReason = why;
    }
    this.call.reject(REFUSAL_STATUS[cause], why);
  }

  hangup(): void {
    this.call.hangup('local');
  }

  onHangup(listener: (end: LegEnd) => void): void {
    this.call.on('hangup', (info) => listener({ reason: info.reason }));
  }

  onDtmf(listener: (digit: string) => void): void {
    // RFC 4733 events and SIP INFO alike: the agent only needs the key.
    this.call.on('dtmf', (digit) => listener(digit));
  }

  sendDtmf(digit: string): Promise<void> {
    return this.call.sendDtmf(digit);
  }

  startMedia(options: LegMediaOptions, callbacks: BridgeMediaCallbacks): BridgeMedia {
    const media = this.call.media;
    const config: BridgeMediaConfig = {
      codec: media.codec.name,
      payloadType: media.codec.payloadType,
      receivePayloadType: media.codec.receivePayloadType,
      ...(media.comfortNoisePayloadType !== undefined ? { comfortNoisePayloadType: media.comfortNoisePayloadType } : {}),
      ...options,
    };
    // Where the call's RTP runs (here or a media worker) the media runs too.
    return startBridgeMedia(this.call.rtp, config, callbacks, this.#ticker);
  }

  /** Blind transfer by REFER (RFC 3515); a refused REFER leaves the call up for a fallback. */
  async transfer(target: string): Promise<void> {
    const outcome = await this.call.transfer(target).catch((err: unknown) => {
      this.#log.warn({ err }, 'REFER transfer failed');
      return undefined;
    });
    this.#log.info({ transferNumber: target, outcome }, 'call transfer by REFER done');
  }

  quality(): LegQuality {
    return this.call.rtp.stats();
  }

  sipDetails(): SipDetails {
    const status = this.#finalStatus ?? null;
    return { call_id: this.call.callId, final_status: status, final_reason: status === null ? null : (this.#finalReason ?? defaultReason(status)) };
  }

  traceAttributes(): Record<string, string | number> {
    return {
      'callbridge.call.transport': 'sip',
      'sip.call_id': this.call.callId.slice(0, CALL_ID_SPAN_CHARS),
      ...(this.#finalStatus !== undefined ? { 'sip.final_status': this.#finalStatus } : {}),
    };
  }
}
