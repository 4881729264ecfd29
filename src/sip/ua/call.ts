/**
 * One phone call as the layers above SIP see it: a dialog, its SDP offer/answer state and the
 * RTP session it negotiated. The call bridge uses only this surface:
 *
 *   ua.onInboundCall((call) => { ...connect the voice session...; call.answer(); });
 *   call.rtp                      the media session (media/RtpSession), already aimed at the peer
 *   call.media                    the negotiated codec, DTMF payload type, hold state
 *   call.on('dtmf', (digit) => ...)   RFC 4733 events and SIP INFO dtmf-relay
 *   call.on('media', (media) => ...)  a re-INVITE/UPDATE changed codec, address or hold
 *   call.on('hangup', (info) => ...)  once, whoever ended it, with why
 *   call.hangup() / call.transfer(target) / call.sendDtmf(digit)
 *
 * What the call does by itself: answers re-INVITE and UPDATE offers (hold: a `sendonly` offer is
 * answered `recvonly`, `inactive` with `inactive`, RFC 3264 8.4; a codec change keeps to the
 * current clock rate so the RTP session carries on), answers OPTIONS/INFO in the dialog, keeps
 * RFC 4028 session timers, hangs up on RTP silence (media timeout) except while on hold, and
 * closes the RTP session when the call ends.
 */
import { EventEmitter } from 'node:events';
import { randomUUID } from 'node:crypto';
import type { CallRtp } from '../../media/media-host.ts';
import type { Dialog, DialogTerminationReason, ReliableProvisionalSender } from '../dialog/index.ts';
import { createResponse, type SipRequest } from '../message/index.ts';
import { isSdpError, SdpNegotiationError, type LocalSdpSession, type NegotiatedMedia, parseAnswer, type SdpOffer, type SrtpPolicy } from '../sdp/index.ts';
import type { CodecName } from '../../media/codecs.ts';
import type { ServerTransaction } from '../transaction/index.ts';
import type { TransactionTimers } from '../transaction/index.ts';
import type { Inbound } from '../transport/index.ts';
import type { InboundRoute } from './inbound-routing.ts';
import { emitSafely } from '../transaction/index.ts';
import {
  negotiateSessionTimerUas,
  refreshSessionByUpdate,
  sessionRefreshHeaders,
  sessionTimerFromUacResponse,
  SessionTimer,
  type NegotiatedSessionTimer,
  type SessionTimerConfig,
} from '../dialog/index.ts';
import type { HeaderValue } from '../message/index.ts';
import { transferByRefer, type TransferOutcome } from '../dialog/index.ts';

export type CallDirection = 'inbound' | 'outbound';

/** Why a call ended; stable strings for call records and metrics. */
export type HangupReason =
  /** hangup() was called (the agent or the bridge ended it). */
  | 'local'
  /** The peer sent BYE. */
  | 'remote_bye'
  /** The caller cancelled before the answer. */
  | 'cancelled'
  /** The call was refused before the answer (reject()). */
  | 'rejected'
  /** No RTP for the media timeout. */
  | 'media_timeout'
  /** Our 2xx was never ACKed (RFC 3261 13.3.1.4). */
  | 'ack_timeout'
  /** An in-dialog request got 481/408 or timed out: the peer forgot the call. */
  | 'remote_gone'
  /** The session timer ran out without refresh (RFC 4028 10). */
  | 'session_expired'
  /** The daemon shut down (drain deadline). */
  | 'shutdown'
  /** Transferred away with REFER. */
  | 'transferred';

export interface HangupInfo {
  reason: HangupReason;
  by: 'local' | 'remote';
  /** The SIP status when the end was a response (reject, an in-dialog 481). */
  status?: number;
}

export type SipCallEvents = {
  answered: [];
  hangup: [info: HangupInfo];
  dtmf: [digit: string, via: 'rfc4733' | 'info'];
  media: [media: NegotiatedMedia];
  hold: [onHold: boolean];
};

export interface CallTrunk {
  id: string;
  orgId: string;
  name: string;
}

/** Logging, structurally pino's. */
export interface CallLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
}

/** What re-negotiation needs: our SDP identity and where our RTP listens. */
export interface CallSdpContext {
  session: LocalSdpSession;
  localAddress: string;
  localPort: number;
  /** Codec preferences of the daemon (the first negotiation used them too). */
  preferences: readonly CodecName[];
  /** The trunk's SRTP policy and whether the dialog runs over TLS; absent: plain RTP only. */
  srtp?: SrtpPolicy;
}

export interface SipCallInit {
  direction: CallDirection;
  dialog: Dialog;
  media: NegotiatedMedia;
  rtp: CallRtp;
  sdp: CallSdpContext;
  /** The caller's number (From user) and the number called (Request-URI / To user). */
  from: string;
  to: string;
  trunk?: CallTrunk;
  /** Inbound: the routed agent. */
  route?: InboundRoute;
  /** Inbound: the INVITE, whose headers inviteHeader() reads (session variables, docs/bridge.md). */
  invite?: Pick<SipRequest, 'getAll'>;
  /** Inbound: the SDP answer sent by answer() (our offer, for a delayed-offer INVITE). */
  answerSdp?: string;
  /** Inbound delayed offer: our offer in the 2xx, whose answer the ACK brings. */
  pendingOffer?: SdpOffer;
  /** Headers of every 2xx we send (Allow, Supported, User-Agent). */
  answerHeaders?: [string, string][];
  /**
   * RFC 4028: the timer negotiated by the INVITE (inbound: its 2xx headers too), our config, and
   * whether the peer allows UPDATE (then refreshes go by UPDATE, else by re-INVITE).
   */
  sessionTimer?: { negotiated: NegotiatedSessionTimer | undefined; headers: [string, HeaderValue][]; config: SessionTimerConfig; peerAllowsUpdate: boolean };
  /** RTP silence that ends the call; 0 disables. */
  mediaTimeoutMs: number;
  /** Timers of the session timer (RFC 4028); tests pass a virtual clock. Default Node's. */
  sessionClock?: TransactionTimers;
  logger?: CallLogger;
}

const DTMF_RELAY_SIGNAL = /^\s*Signal\s*=\s*([0-9A-Da-d*#])\s*$/im;

function dialogEndReason(r: DialogTerminationReason): HangupInfo {
  switch (r) {
    case 'bye-received':
      return { reason: 'remote_bye', by: 'remote' };
    case 'cancelled':
      return { reason: 'cancelled', by: 'remote' };
    case 'ack-timeout':
      return { reason: 'ack_timeout', by: 'remote' };
    case 'remote-gone':
      return { reason: 'remote_gone', by: 'remote' };
    case 'rejected':
      return { reason: 'rejected', by: 'local' };
    default:
      return { reason: 'local', by: 'local' };
  }
}

export class SipCall extends EventEmitter<SipCallEvents> {
  /** Our id for the call (call records, logs). */
  readonly id = randomUUID();
  readonly direction: CallDirection;
  readonly dialog: Dialog;
  readonly rtp: CallRtp;
  readonly from: string;
  readonly to: string;
  readonly trunk: CallTrunk | undefined;
  readonly route: InboundRoute | undefined;
  readonly startedAt = new Date();
  answeredAt: Date | undefined;
  endedAt: Date | undefined;
  #media: NegotiatedMedia;
  #end: HangupInfo | undefined;
  readonly #sdp: CallSdpContext;
  readonly #answerSdp: string | undefined;
  readonly #invite: Pick<SipRequest, 'getAll'> | undefined;
  readonly #answerHeaders: [string, string][];
  readonly #timerInit: SipCallInit['sessionTimer'];
  readonly #sessionClock: TransactionTimers | undefined;
  #timer: SessionTimer | undefined;
  #timerState: NegotiatedSessionTimer | undefined;
  readonly #mediaTimeoutMs: number;
  readonly #logger: CallLogger | undefined;
  /** Our offer in a 2xx to an offer-less re-INVITE, answered in the ACK (RFC 3264 with 3261 13.2.1). */
  #pendingOffer: SdpOffer | undefined;
  /** Inbound with 100rel: the reliable 18x, whose PRACK the 200 waits for. */
  #reliable: ReliableProvisionalSender | undefined;
  /** answer() was called while a reliable 18x waited for its PRACK. */
  #answerHeld = false;
  /** Hooks other modules attach (session timer, transfer) run when the call ends. */
  readonly #cleanups: (() => void)[] = [];

  constructor(init: SipCallInit) {
    super();
    this.direction = init.direction;
    this.dialog = init.dialog;
    this.rtp = init.rtp;
    this.#media = init.media;
    this.#sdp = init.sdp;
    this.from = init.from;
    this.to = init.to;
    this.trunk = init.trunk;
    this.route = init.route;
    this.#answerSdp = init.answerSdp;
    this.#invite = init.invite;
    this.#pendingOffer = init.pendingOffer;
    this.#answerHeaders = init.answerHeaders ?? [];
    this.#timerInit = init.sessionTimer;
    this.#sessionClock = init.sessionClock;
    this.#timerState = init.sessionTimer?.negotiated;
    this.#mediaTimeoutMs = init.mediaTimeoutMs;
    this.#logger = init.logger;
    const d = this.dialog;
    d.on('terminated', (r) => this.#ended(dialogEndReason(r)));
    d.on('reinvite', (tx, inbound) => this.#onOffer(tx, inbound, 'INVITE'));
    d.on('update', (tx, inbound) => this.#onOffer(tx, inbound, 'UPDATE'));
    d.on('info', (tx, inbound) => this.#onInfo(tx, inbound.message));
    d.on('ack', (inbound) => this.#onAck(inbound.message));
    this.rtp.on('dtmf', (d) => this.#emit('dtmf', [d.digit, 'rfc4733']));
    this.rtp.on('timeout', () => {
      if (this.#media.hold || this.#end !== undefined || this.answeredAt === undefined) return;
      this.#logger?.warn({ callId: this.id, mediaTimeoutMs: this.#mediaTimeoutMs }, 'no RTP from the peer: hanging up');
      this.#hangup({ reason: 'media_timeout', by: 'remote' });
    });
    this.rtp.setMediaTimeout(this.#mediaTimeoutMs);
    if (this.direction === 'outbound') {
      this.answeredAt = new Date();
      this.#startSessionTimer();
    }
  }

  /** The SIP Call-ID. */
  get callId(): string {
    return this.dialog.callId;
  }

  get media(): NegotiatedMedia {
    return this.#media;
  }

  get state(): 'ringing' | 'answered' | 'ended' {
    if (this.#end !== undefined) return 'ended';
    return this.answeredAt === undefined ? 'ringing' : 'answered';
  }

  /** Inbound: every value of a header of the INVITE (any case, compact forms too); [] outbound. */
  inviteHeader(name: string): string[] {
    return this.#invite?.getAll(name) ?? [];
  }

  /** How the call ended; undefined while it goes on. */
  get endInfo(): HangupInfo | undefined {
    return this.#end;
  }

  get closed(): boolean {
    return this.#end !== undefined;
  }

  /**
   * Inbound: the 18x of this call are sent reliably (RFC 3262); answer() holds the 200 back until
   * the outstanding one is PRACKed (section 3 forbids a second reliable 1xx before that, and waiting
   * keeps the offer/answer of section 5 simple: our answer goes in the 200 alone, after the PRACK).
   */
  useReliableProvisionals(sender: ReliableProvisionalSender): void {
    this.#reliable = sender;
  }

  /**
   * Inbound: answers 200 OK with the negotiated SDP. False when it is too late (cancelled, ended).
   * While a reliable 18x waits for its PRACK, true: the 200 goes when the PRACK comes (the state
   * stays 'ringing' until then; no PRACK in 64*T1 and the INVITE is rejected instead).
   */
  answer(): boolean {
    if (this.direction !== 'inbound' || this.#end !== undefined || this.answeredAt !== undefined) return false;
    const reliable = this.#reliable;
    if (reliable?.pending === true) {
      if (!this.#answerHeld) {
        this.#answerHeld = true;
        reliable.whenAcknowledged(() => void this.#sendAnswer());
      }
      return true;
    }
    return this.#sendAnswer();
  }

  #sendAnswer(): boolean {
    if (this.#end !== undefined || this.answeredAt !== undefined) return false;
    this.#reliable?.close();
    try {
      const headers: [string, HeaderValue][] = [...this.#answerHeaders, ...(this.#timerInit?.headers ?? [])];
      this.dialog.answer({ body: this.#answerSdp ?? '', contentType: 'application/sdp', headers });
    } catch (err) {
      this.#logger?.warn({ err, callId: this.id }, 'could not answer');
      return false;
    }
    this.answeredAt = new Date();
    this.#startSessionTimer();
    this.#emit('answered', []);
    return true;
  }

  /** Inbound before answer: a final 3xx-6xx (default 480 Temporarily Unavailable), with extra headers (Retry-After). */
  reject(status = 480, reason?: string, headers: [string, string][] = []): void {
    if (this.direction !== 'inbound' || this.#end !== undefined || this.answeredAt !== undefined) return;
    this.#end = { reason: 'rejected', by: 'local', status };
    try {
      this.dialog.reject(status, { ...(reason === undefined ? {} : { reason }), ...(headers.length > 0 ? { headers } : {}) });
    } catch (err) {
      this.#logger?.debug({ err, callId: this.id }, 'reject not sent');
    }
    this.#finish();
  }

  /** Ends the call: BYE once answered, 480 before (inbound). Idempotent. */
  hangup(reason: HangupReason = 'local'): void {
    this.#hangup({ reason, by: 'local' });
  }

  /**
   * Blind transfer with REFER (RFC 3515): `target` is a number (sent as
   * sip:<number>@<the peer's host>, which PBXs and carriers route like a dialled number) or a
   * sip:/sips:/tel: URI. On a 2xx sipfrag (the transferee reached the target) or an accepted REFER
   * without progress reports, the call ends with reason 'transferred'. A refused REFER
   * ('rejected') leaves the call up: the caller may bridge a new outbound leg itself.
   */
  async transfer(target: string, opts: { timeoutMs?: number; onProgress?: (status: number, reason: string) => void } = {}): Promise<TransferOutcome> {
    if (this.#end !== undefined || this.answeredAt === undefined) {
      return { outcome: 'ended', reason: 'closed', accepted: false };
    }
    const referTo = /^(sips?|tel):/i.test(target) ? target : `sip:${target}@${this.#peerHost()}`;
    const outcome = await transferByRefer(this.dialog, {
      referTo,
      referredBy: this.dialog.localContact.uri.toString(),
      ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
      ...(opts.onProgress ? { onProgress: opts.onProgress } : {}),
      ...(this.#logger ? { logger: this.#logger } : {}),
    });
    this.#logger?.info({ callId: this.id, referTo, ...outcome }, 'transfer by REFER finished');
    if (outcome.outcome === 'success' || outcome.outcome === 'accepted') this.#hangup({ reason: 'transferred', by: 'local' });
    else if (outcome.outcome === 'ended' && outcome.accepted) this.#ended({ reason: 'transferred', by: 'remote' });
    return outcome;
  }

  /** The host (and port) of the peer's URI in the dialog, for a number turned into a Refer-To URI. */
  #peerHost(): string {
    const u = this.dialog.remote.uri;
    if (u.kind === 'sip') return u.port === undefined ? u.host : `${u.host.includes(':') ? `[${u.host}]` : u.host}:${u.port}`;
    return 'invalid';
  }

  /** RFC 4733 DTMF to the peer (for IVRs). */
  async sendDtmf(digit: string, durationMs = 100): Promise<void> {
    if (this.#end !== undefined) return;
    const pt = this.#media.dtmfPayloadType;
    if (pt === undefined) throw new Error('the peer did not agree to telephone-event (RFC 4733): no DTMF can be sent');
    await this.rtp.sendDtmf(digit, durationMs, pt);
  }

  /** Runs fn when the call ends (modules that attach to a call clean up with it). */
  onEnd(fn: () => void): void {
    if (this.#end !== undefined) fn();
    else this.#cleanups.push(fn);
  }

  /** A re-negotiation that happened outside the call's own handlers (UAC re-INVITE). */
  setMedia(media: NegotiatedMedia): void {
    this.#applyMedia(media);
  }

  /** A summary for logs and call records. */
  toJSON(): Record<string, unknown> {
    return {
      id: this.id,
      callId: this.callId,
      direction: this.direction,
      from: this.from,
      to: this.to,
      trunkId: this.trunk?.id,
      agentId: this.route?.agentId,
      codec: this.#media.codec.name,
      state: this.state,
      end: this.#end,
    };
  }

  // --- internals ---------------------------------------------------------------------------

  #hangup(info: HangupInfo): void {
    if (this.#end !== undefined) return;
    if (this.direction === 'inbound' && this.answeredAt === undefined) {
      this.#end = info;
      try {
        this.dialog.reject(info.reason === 'shutdown' ? 503 : 480);
      } catch (err) {
        this.#logger?.debug({ err, callId: this.id }, 'reject not sent');
      }
      this.#finish();
      return;
    }
    this.#end = info;
    try {
      this.dialog.bye();
    } catch (err) {
      this.#logger?.debug({ err, callId: this.id }, 'BYE not sent');
    }
    this.#finish();
  }

  #ended(info: HangupInfo): void {
    if (this.#end !== undefined) return;
    this.#end = info;
    this.#finish();
  }

  #finish(): void {
    this.endedAt = new Date();
    this.#timer?.close();
    this.dialog.close();
    this.rtp.close();
    for (const fn of this.#cleanups.splice(0)) {
      try {
        fn();
      } catch (err) {
        this.#logger?.warn({ err, callId: this.id }, 'call cleanup failed');
      }
    }
    this.#emit('hangup', [this.#end!]);
  }

  /** A re-INVITE or UPDATE from the peer: answer its offer, or make one when it has none. */
  #onOffer(tx: ServerTransaction, inbound: Inbound<SipRequest>, method: 'INVITE' | 'UPDATE'): void {
    const req = inbound.message;
    const timer = this.#negotiateRefresh(req);
    if (timer === undefined) {
      tx.respond(createResponse(req, 400, 'Bad Session-Expires', { toTag: this.dialog.localTag }));
      return;
    }
    if ('reject' in timer) {
      tx.respond(createResponse(req, timer.reject.status, timer.reject.reason, { toTag: this.dialog.localTag, headers: timer.reject.headers }));
      return;
    }
    const headers: [string, HeaderValue][] = [...this.#answerHeaders, ...timer.headers];
    if (req.body.length === 0) {
      if (method === 'UPDATE') {
        // A session refresh without SDP (RFC 4028 / RFC 3311): nothing changes.
        tx.respond(createResponse(req, 200, undefined, { toTag: this.dialog.localTag, headers: [['Contact', this.dialog.localContact.clone()], ...headers] }));
        timer.commit();
        return;
      }
      // Offer-less re-INVITE: our current SDP is the offer in the 2xx, the answer comes in the ACK.
      const offer = this.#sdp.session.offer({ localAddress: this.#sdp.localAddress, localPort: this.#sdp.localPort, previous: this.#media, codecs: this.#sameRateCodecs(), srtp: this.#media.srtp !== undefined });
      this.#pendingOffer = offer;
      this.dialog.answer({ body: offer.sdp, contentType: 'application/sdp', headers }, tx);
      timer.commit();
      return;
    }
    try {
      const answer = this.#sdp.session.answer(req.body.toString('utf8'), {
        localAddress: this.#sdp.localAddress,
        localPort: this.#sdp.localPort,
        previous: this.#media,
        preferences: this.#sameRateCodecs(),
        ...(this.#sdp.srtp ? { srtp: this.#sdp.srtp } : {}),
      });
      if (method === 'INVITE') {
        this.dialog.answer({ body: answer.answerSdp, contentType: 'application/sdp', headers }, tx);
      } else {
        tx.respond(
          createResponse(req, 200, undefined, {
            toTag: this.dialog.localTag,
            headers: [['Contact', this.dialog.localContact.clone()], ...headers],
            body: answer.answerSdp,
            contentType: 'application/sdp',
          }),
        );
      }
      timer.commit();
      this.#applyMedia(answer);
    } catch (err) {
      if (!isSdpError(err)) throw err;
      // RFC 3264 8: a rejected re-offer leaves the session as it was.
      // Warning and Reason name why (e.g. "SRTP required by the trunk"), as for an initial INVITE.
      const warning: [string, string][] = err instanceof SdpNegotiationError ? [['Warning', err.warningHeader()], ['Reason', err.reasonHeader()]] : [];
      this.#logger?.info({ callId: this.id, err: err.message }, `${method} offer refused: the call keeps its media`);
      tx.respond(createResponse(req, 488, undefined, { toTag: this.dialog.localTag, headers: warning }));
    }
  }

  /**
   * RFC 4028 on a re-INVITE/UPDATE from the peer: the 2xx headers, or a 422/400. `commit()` once
   * the 2xx went out: the refresh counts and the timer re-arms (RFC 4028 10).
   */
  #negotiateRefresh(req: SipRequest): { headers: [string, HeaderValue][]; commit: () => void } | { reject: { status: number; reason: string; headers: [string, HeaderValue][] } } | undefined {
    const init = this.#timerInit;
    if (init === undefined) return { headers: [], commit: () => {} };
    const d = negotiateSessionTimerUas(req, init.config, this.#timerState);
    if (d.action === 'reject') return { reject: { status: d.status, reason: d.reason, headers: d.headers } };
    return {
      headers: d.headers,
      commit: () => {
        this.#timerState = d.timer;
        if (d.timer === undefined) {
          this.#timer?.close();
          this.#timer = undefined;
        } else if (this.#timer === undefined || this.#timer.closed) {
          this.#startSessionTimer();
        } else {
          this.#timer.refreshed(d.timer.interval, d.timer.refresher);
        }
      },
    };
  }

  #startSessionTimer(): void {
    const t = this.#timerState;
    if (t === undefined || this.#end !== undefined) return;
    this.#timer?.close();
    this.#timer = new SessionTimer({
      interval: t.interval,
      refresher: t.refresher,
      dialog: this.dialog,
      refresh: () => this.#refreshSession(),
      expired: () => {
        this.#logger?.warn({ callId: this.id, interval: this.#timerState?.interval }, 'session timer expired without refresh (RFC 4028 10): hanging up');
        this.#hangup({ reason: 'session_expired', by: 'remote' });
      },
      ...(this.#logger ? { logger: this.#logger } : {}),
      ...(this.#sessionClock ? { clock: this.#sessionClock } : {}),
    });
  }

  /** We are the refresher: UPDATE without SDP when the peer allows it, else a re-INVITE with our SDP. */
  async #refreshSession(): Promise<boolean> {
    const init = this.#timerInit;
    const state = this.#timerState;
    if (init === undefined || state === undefined || this.#end !== undefined) return false;
    const minSE = init.config.minSE;
    const byUpdate = await refreshSessionByUpdate(this.dialog, { timer: state, ...(minSE !== undefined ? { minSE } : {}), peerAllowsUpdate: init.peerAllowsUpdate });
    if (byUpdate.ok) {
      this.#timerState = byUpdate.timer;
      this.#timer?.refreshed(byUpdate.timer.interval, byUpdate.timer.refresher);
      return true;
    }
    if (byUpdate.reason !== 'update-not-allowed' && !(byUpdate.reason === 'rejected' && (byUpdate.status === 405 || byUpdate.status === 501))) return false;
    // Re-INVITE with the SDP we last sent (same version: nothing changed, RFC 3264 8).
    try {
      // Only the agreed codec: offering every same-rate codec would change the SDP and bump o=.
      const offer = this.#sdp.session.offer({ localAddress: this.#sdp.localAddress, localPort: this.#sdp.localPort, previous: this.#media, codecs: [this.#media.codec.name], direction: this.#media.direction, srtp: this.#media.srtp !== undefined });
      const tx = this.dialog.request('INVITE', { body: offer.sdp, contentType: 'application/sdp', headers: [...this.#answerHeaders, ...sessionRefreshHeaders(state, minSE)] });
      const res = await tx.finalResponse;
      if (res.status < 200 || res.status >= 300) return false;
      this.dialog.ack(res);
      if (res.body.length > 0) this.#applyMedia(parseAnswer(res.body.toString('utf8'), offer, this.#media));
      const next = sessionTimerFromUacResponse(res) ?? state;
      this.#timerState = next;
      this.#timer?.refreshed(next.interval, next.refresher);
      return true;
    } catch (err) {
      this.#logger?.warn({ err, callId: this.id }, 'session refresh by re-INVITE failed');
      return false;
    }
  }

  /** The ACK of our 2xx to an offer-less re-INVITE carries the answer. */
  #onAck(ack: SipRequest): void {
    const offer = this.#pendingOffer;
    if (offer === undefined) return;
    this.#pendingOffer = undefined;
    try {
      if (ack.body.length === 0) throw new Error('the ACK carries no SDP answer');
      this.#applyMedia(parseAnswer(ack.body.toString('utf8'), offer, this.#media));
    } catch (err) {
      // The offer/answer failed in the ACK: RFC 3261 13.3.1.4 says end the session.
      this.#logger?.warn({ callId: this.id, err }, 'unusable SDP answer in ACK: hanging up');
      this.#hangup({ reason: 'local', by: 'local' });
    }
  }

  /** INFO: application/dtmf-relay ("Signal=5") is DTMF from PBXs that do not send RFC 4733. */
  #onInfo(tx: ServerTransaction, req: SipRequest): void {
    const type = req.contentType?.toString().toLowerCase() ?? '';
    if (type.startsWith('application/dtmf-relay') || type.startsWith('application/dtmf')) {
      const body = req.body.toString('utf8');
      const m = DTMF_RELAY_SIGNAL.exec(body) ?? /^\s*([0-9A-Da-d*#])\s*$/.exec(body);
      if (m) this.#emit('dtmf', [m[1]!.toUpperCase(), 'info']);
    }
    tx.respond(createResponse(req, 200));
  }

  #applyMedia(next: NegotiatedMedia): void {
    const prev = this.#media;
    this.#media = next;
    if (next.remoteChanged) this.rtp.setRemote(next.remote);
    // New SDES keys (RFC 4568 7.1.4): new SRTP contexts in the media session.
    if (next.srtpChanged) this.rtp.setSrtp(next.srtp);
    if (next.holdChanged) {
      this.rtp.setMediaTimeout(next.hold ? 0 : this.#mediaTimeoutMs);
      this.#emit('hold', [next.hold]);
    }
    if (next.codecChanged || next.remoteChanged || next.holdChanged || prev.direction !== next.direction) this.#emit('media', [next]);
  }

  /** Re-offers keep the clock rate: the RTP session's timestamps run at it. */
  #sameRateCodecs(): CodecName[] {
    const rate = this.#media.codec.clockRate;
    const same = this.#sdp.preferences.filter((c) => (c === 'opus' ? 48000 : 8000) === rate);
    return same.length > 0 ? same : [this.#media.codec.name];
  }

  #emit<K extends keyof SipCallEvents>(event: K, args: SipCallEvents[K]): void {
    emitSafely(this as unknown as EventEmitter, event, args, this.#logger);
  }
}
