/**
 * The UAS core for requests outside any dialog (RFC 3261 8.2): a new INVITE is checked (identity
 * lengths), authenticated and routed (inbound-routing.ts), admitted by whoever takes calls
 * (capacity: refused before any provisional response), is told 100 Trying, gets its RTP ports and
 * SDP answer, rings (180; reliably, RFC 3262, when the INVITE requires 100rel) and is handed to whoever registered for calls; OPTIONS is answered 200 with what we support (11.2); a
 * REGISTER goes to the registrar (registrar.ts) when the user agent has one; other methods get
 * 405 with Allow (8.2.1); while draining, INVITEs and OPTIONS get 503 with Retry-After.
 *
 * Every refused INVITE is logged exactly once with why (which trunk matched, which auth step
 * failed, which number had no route), the line PBX admins look for first.
 */
import { createCallRtp, type CallPorts, type PortSource } from '../../media/media-host.ts';
import type { CodecName } from '../../media/codecs.ts';
import type { AuthRateLimiter } from './auth-rate-limit.ts';
import type { ChallengeRateLimiter } from './challenge-rate-limit.ts';
import { clipForLog } from '../../log-fields.ts';
import { SipCall, type CallLogger } from './call.ts';
import type { DialogManager, Dialog } from '../dialog/index.ts';
import type { DigestServer } from '../digest/index.ts';
import { decideInbound, throttled, type InboundDecision, type InboundDirectory, type InboundRoute, type InboundTrunk } from './inbound-routing.ts';
import { createResponse, generateTag, type SipRequest } from '../message/index.ts';
import { isSdpError, LocalSdpSession, SdpNegotiationError, type NegotiatedAnswer, type NegotiatedMedia, type SdpOffer, type SrtpPolicy } from '../sdp/index.ts';
import { buildTrying, type ServerTransaction } from '../transaction/index.ts';
import type { TransactionTimers } from '../transaction/index.ts';
import type { Inbound } from '../transport/index.ts';
import { respond, throttle } from './uas-responses.ts';
import { handleRegister, type RegistrarContext } from './registrar.ts';
import { negotiateSessionTimerUas, peerAllowsUpdate, ReliableProvisionalSender, requiresReliableProvisional, type SessionTimerConfig } from '../dialog/index.ts';

/** Methods we take in a dialog and out of one (Allow, RFC 3261 20.5). */
export const ALLOW = 'INVITE, ACK, CANCEL, BYE, OPTIONS, UPDATE, INFO, REFER, NOTIFY, PRACK';
/** Out of dialog with the registrar on: REGISTER too (never inside a dialog, so not in ALLOW). */
export const ALLOW_WITH_REGISTER = `${ALLOW}, REGISTER`;
export const SUPPORTED = 'timer, replaces, norefersub, 100rel';
/** The option tags an INVITE may Require of us; any other gets 420 Bad Extension (RFC 3261 8.2.2.3). */
const SUPPORTED_TAGS: ReadonlySet<string> = new Set(SUPPORTED.split(', '));

export interface UasLogger extends CallLogger {
  error(obj: object, msg?: string): void;
}

/** Why a routed INVITE is not taken (capacity), answered before any provisional response. */
export interface AdmissionRefusal {
  /** 3xx-6xx, e.g. 503 (the whole service is full) or 486 (this trunk is). */
  status: number;
  reason?: string;
  /** Seconds for a Retry-After header (RFC 3261 20.33), e.g. with a 503. */
  retryAfter?: number;
  /** One sentence for the log line. */
  why: string;
  /** The outcome counted in metrics; default over_limit. */
  outcome?: string;
}

/**
 * Called for each routed INVITE before any provisional response: undefined takes the call,
 * a refusal answers it at once (no 18x: a caller should not hear ringing that ends in busy).
 * It may answer later (a promise: limits counted in a database); the INVITE waits for it. What
 * admission holds for an admitted INVITE is the call's from delivery on, or is given back
 * through AdmissionLapsed when the INVITE ends before it is delivered.
 */
export type AdmitCall = (route: InboundRoute, trunk: InboundTrunk) => AdmissionRefusal | undefined | Promise<AdmissionRefusal | undefined>;

/**
 * An admitted INVITE ended before its call was delivered (refused later, CANCELled, no RTP port,
 * no handler): called once with the route object admission was given, so that whatever
 * admission took for it (a call slot) is given back.
 */
export type AdmissionLapsed = (route: InboundRoute) => void;

/** What a new inbound INVITE needs; the user agent owns all of it. */
export interface UasContext {
  dialogs: DialogManager;
  directory: InboundDirectory;
  digest: DigestServer;
  limiter: AuthRateLimiter;
  /** Per-source rate of challenges and blocked refusals (sip.challenge_rate); undefined: none. */
  challenges?: ChallengeRateLimiter | undefined;
  ports: PortSource;
  mediaAddress: string;
  codecs: readonly CodecName[];
  mediaTimeoutMs: number;
  userAgent: string;
  logger: UasLogger;
  /** Seconds for Retry-After while draining; undefined when taking calls. */
  draining(): number | undefined;
  /** RFC 4028 session timer settings (interval we grant, our Min-SE). */
  sessionTimer: SessionTimerConfig;
  /** RFC 3261 T1/T2 (ms) for reliable provisional responses (RFC 3262): the transaction layer's. */
  reliableProvisional: { t1: number; t2: number };
  /** Timers of the calls' session timers and reliable provisional responses; default Node's. */
  sessionClock?: TransactionTimers;
  /** Called with the new call after 180 was sent; returns false when nobody takes calls. */
  deliver(call: SipCall): boolean;
  /** Admission of a routed INVITE before it rings (the call handler's; see AdmitCall). */
  admit: AdmitCall;
  /** An admitted INVITE not delivered (see AdmissionLapsed). */
  admissionLapsed: AdmissionLapsed;
  /** Bookkeeping of setups and failures (metrics). */
  count(outcome: string): void;
  /** An INVITE for a number trunks of different organizations claim (metrics, by trunk ids). */
  ambiguousRoute?(trunkIds: string[], action: 'refused' | 'challenged'): void;
  /** REGISTER handling (registrar.ts); undefined: REGISTER gets 405 like any method we do not take. */
  registrar?: RegistrarContext | undefined;
}

function contactFor(inbound: Inbound<SipRequest>): string {
  const l = inbound.local;
  const host = l.address.includes(':') ? `[${l.address}]` : l.address;
  const t = l.protocol === 'udp' ? '' : `;transport=${l.protocol}`;
  return `<sip:callbridge@${host}:${l.port}${t}>`;
}

/** A request outside any dialog: INVITE, REGISTER, OPTIONS or a method we do not take there. */
export function handleOutOfDialog(ctx: UasContext, tx: ServerTransaction, inbound: Inbound<SipRequest>): void {
  const req = inbound.message;
  const allow = ctx.registrar === undefined ? ALLOW : ALLOW_WITH_REGISTER;
  switch (req.method) {
    case 'INVITE':
      void handleInvite(ctx, tx, inbound).catch((err: unknown) => {
        ctx.logger.error({ err, callId: req.callId }, 'INVITE handling failed');
        if (tx.finalResponse === undefined) respond(tx, req, 500);
      });
      return;
    case 'OPTIONS': {
      // While draining, the answer an INVITE would get (503 + Retry-After): a load balancer's
      // health probe (Kamailio dispatcher, deploy/kamailio) then takes this node out before
      // its INVITEs are refused one by one.
      const retryAfter = ctx.draining();
      if (retryAfter !== undefined) {
        respond(tx, req, 503, 'Service Unavailable', [['Retry-After', String(retryAfter)]]);
        return;
      }
      // 11.2: the capabilities we would answer an INVITE with. Keep-alive pings from PBXs too.
      tx.respond(
        createResponse(req, 200, undefined, {
          toTag: generateTag(),
          headers: [
            ['Allow', allow],
            ['Accept', 'application/sdp'],
            ['Supported', SUPPORTED],
            ['User-Agent', ctx.userAgent],
          ],
        }),
      );
      return;
    }
    case 'BYE':
    case 'UPDATE':
    case 'INFO':
    case 'NOTIFY':
      // In-dialog methods without a To tag name no dialog (12.2.2).
      respond(tx, req, 481);
      return;
    case 'REGISTER':
      if (ctx.registrar === undefined) break;
      try {
        handleRegister(ctx.registrar, tx, inbound);
      } catch (err) {
        ctx.logger.error({ err, callId: req.callId }, 'REGISTER handling failed');
        if (tx.finalResponse === undefined) respond(tx, req, 500);
      }
      return;
  }
  respond(tx, req, 405, undefined, [['Allow', allow]]);
}

/**
 * Codecs of our offer to an INVITE without one: the 8 kHz ones (PCMU, PCMA), since the RTP
 * session starts before the answer says which codec and must know the clock rate.
 */
function delayedOfferCodecs(codecs: readonly CodecName[]): CodecName[] {
  const g711 = codecs.filter((c) => c !== 'opus');
  return g711.length > 0 ? g711 : ['PCMU', 'PCMA'];
}

/**
 * The media of a call whose offer is ours and whose answer has not come yet: our first codec,
 * no remote address. The answer in the ACK replaces it (SipCall emits 'media' on a change).
 */
function awaitingAnswer(offer: SdpOffer): NegotiatedMedia {
  const c = offer.codecs[0]!;
  const te = offer.telephoneEvents.find((t) => t.clockRate === c.clockRate);
  return {
    mediaIndex: 0,
    codec: { name: c.name, payloadType: c.payloadType, receivePayloadType: c.payloadType, clockRate: c.clockRate, channels: c.channels, fmtpParams: {} },
    ...(te ? { dtmf: { payloadType: te.payloadType, receivePayloadType: te.payloadType, clockRate: te.clockRate, events: '0-15' }, dtmfPayloadType: te.payloadType } : {}),
    remote: { address: '', port: 0 },
    rtcpMux: false,
    direction: offer.direction,
    remoteDirection: 'sendrecv',
    hold: false,
    ptime: offer.ptime,
    codecChanged: false,
    remoteChanged: false,
    holdChanged: false,
    srtpChanged: false,
  };
}

/**
 * The longest From/To user, display name and Request-URI user an INVITE may carry. Telephone
 * numbers are at most 15 digits (E.164) and SIP usernames rarely pass 64 characters; the caller's
 * number and name are stored with the call record and shown to the agent, so they are bounded
 * rather than stored as sent (a 3,000-character From user was).
 */
export const MAX_IDENTITY_LENGTH = 128;

/** Which identity field of the INVITE is too long (the 400's reason phrase names it), if any. */
function identityTooLong(req: SipRequest, user: string, from: string): 'From' | 'To' | 'Request-URI' | undefined {
  if (from.length > MAX_IDENTITY_LENGTH || (req.from.displayName?.length ?? 0) > MAX_IDENTITY_LENGTH) return 'From';
  const to = req.to;
  const toUser = to.uri.kind === 'sip' ? (to.uri.user ?? '') : to.uri.toString();
  if (toUser.length > MAX_IDENTITY_LENGTH || (to.displayName?.length ?? 0) > MAX_IDENTITY_LENGTH) return 'To';
  if (user.length > MAX_IDENTITY_LENGTH) return 'Request-URI';
  return undefined;
}

/** A value for a log line: cut at MAX_IDENTITY_LENGTH, so no field of a request is logged whole however long. */
const clip = (s: string): string => clipForLog(s, MAX_IDENTITY_LENGTH);

/** The option tags the INVITE's Require names that we do not support (a malformed Require: none here; the session timer check answers it 400). */
function unsupportedRequirements(req: SipRequest): string[] {
  let required: string[];
  try {
    required = req.require;
  } catch {
    return [];
  }
  return required.filter((t) => !SUPPORTED_TAGS.has(t.toLowerCase()));
}

/**
 * 180 Ringing, reliably (RFC 3262) when the INVITE requires 100rel: the 200 then waits for its
 * PRACK (SipCall), and without one in 64*T1 the INVITE is rejected 504. With Supported: 100rel only,
 * the 180 goes unreliably: it carries no SDP, so reliability would only add a round trip.
 */
function ring(ctx: UasContext, call: SipCall, req: SipRequest, base: object): void {
  if (!requiresReliableProvisional(req)) {
    call.dialog.provisional(180);
    return;
  }
  const reliable = new ReliableProvisionalSender(call.dialog, {
    ...ctx.reliableProvisional,
    ...(ctx.sessionClock ? { clock: ctx.sessionClock } : {}),
    onUnacknowledged: (res) => {
      ctx.logger.warn({ ...base, id: call.id, status: 504, rseq: res.get('RSeq') }, `INVITE refused (504): no PRACK for the reliable ${res.status} within 64*T1`);
      ctx.count('prack_timeout');
      call.reject(504, 'No PRACK');
    },
  });
  call.useReliableProvisionals(reliable);
  reliable.send(180);
}

function userOf(req: SipRequest): string {
  return req.uri.kind === 'sip' ? (req.uri.user ?? '') : req.uri.kind === 'tel' ? req.uri.toString().slice(4).split(';')[0]! : '';
}

function fromUser(req: SipRequest): string {
  const u = req.from.uri;
  return u.kind === 'sip' ? (u.user ?? '') : u.toString();
}

async function handleInvite(ctx: UasContext, tx: ServerTransaction, inbound: Inbound<SipRequest>): Promise<void> {
  const req = inbound.message;
  const src = inbound.source.address;
  const user = userOf(req);
  const from = fromUser(req);
  const base = { callId: clip(req.callId), source: `${inbound.source.protocol}:${src}:${inbound.source.port}`, user: clip(user), from: clip(from) };

  const retryAfter = ctx.draining();
  if (retryAfter !== undefined) {
    ctx.logger.info({ ...base, status: 503 }, 'INVITE refused: draining for shutdown');
    ctx.count('draining');
    respond(tx, req, 503, 'Service Unavailable', [['Retry-After', String(retryAfter)]]);
    return;
  }
  if (req.uri.kind !== 'sip' && req.uri.kind !== 'tel') {
    ctx.logger.info({ ...base, status: 416 }, 'INVITE refused: Request-URI scheme not supported');
    ctx.count('bad_request');
    respond(tx, req, 416);
    return;
  }
  if (req.uri.kind === 'sip' && req.uri.scheme === 'sips' && inbound.source.protocol !== 'tls') {
    // SIPS means TLS on every hop (RFC 3261 26.2); a sips: request that reached us in the clear
    // broke that promise. Refused with 480 and Warning 381 "SIPS Required" (the Warning code
    // RFC 5630 defines), as pjsip answers it (pjproject#1735); never taken as a plain call.
    ctx.logger.info({ ...base, status: 480 }, 'INVITE refused: sips: Request-URI over a non-TLS transport');
    ctx.count('bad_request');
    respond(tx, req, 480, 'Temporarily Unavailable', [['Warning', `381 callbridge "SIPS Required: a sips: Request-URI must arrive over TLS, not ${inbound.source.protocol.toUpperCase()}"`]]);
    return;
  }
  // Before authentication: nothing of an over-long identity is routed, stored or logged whole.
  // Within the source's challenge rate, since it is as cheap to send as an INVITE to be challenged.
  const tooLong = identityTooLong(req, user, from);
  if (tooLong !== undefined) {
    const over = throttled(ctx, src, { field: tooLong });
    if (over !== undefined) return throttle(ctx, tx, inbound, base, over);
    ctx.logger.info({ ...base, status: 400, field: tooLong }, `INVITE refused (400): the ${tooLong} user or display name is longer than ${MAX_IDENTITY_LENGTH} characters`);
    ctx.count('bad_request');
    respond(tx, req, 400, `${tooLong} too long`);
    return;
  }

  const decision = await decideInbound(ctx, {
    method: req.method,
    requestUri: req.uri.toString(),
    user,
    toUser: req.to.uri.kind === 'sip' ? (req.to.uri.user ?? '') : '',
    authorization: req.getAll('Authorization'),
    sourceAddress: src,
  });
  if (tx.finalResponse !== undefined || tx.terminated) return; // CANCELled while we looked
  if (decision.kind === 'throttle') return throttle(ctx, tx, inbound, base, decision);
  if (decision.kind === 'reject') {
    const line = { ...base, ...decision.detail, status: decision.status };
    if (decision.unlogged === true) {
      // counted below, not logged (a blocked source's refusals after the first of the block)
    } else if (decision.quiet) ctx.logger.debug(line, `INVITE challenged: ${decision.why}`);
    else ctx.logger.warn(line, `INVITE refused (${decision.status}): ${decision.why}`);
    // A challenge is part of every login and not counted, unless it names its own outcome (an ambiguous number's).
    if (!decision.quiet || decision.outcome !== undefined) ctx.count(decision.outcome ?? (decision.status === 404 ? 'no_route' : decision.status === 480 ? 'agent_inactive' : 'auth_failed'));
    if (decision.ambiguousTrunks !== undefined) ctx.ambiguousRoute?.(decision.ambiguousTrunks, decision.status === 401 ? 'challenged' : 'refused');
    respond(tx, req, decision.status, undefined, decision.headers);
    return;
  }

  const unsupported = unsupportedRequirements(req);
  if (unsupported.length > 0) {
    ctx.logger.warn({ ...base, status: 420, unsupported }, 'INVITE refused (420): it requires an extension we do not support');
    ctx.count('bad_extension');
    respond(tx, req, 420, undefined, [['Unsupported', unsupported.join(', ')]]);
    return;
  }

  const pending = ctx.admit(decision.route, decision.trunk);
  const refusal = pending instanceof Promise ? await pending : pending;
  if (refusal !== undefined) {
    ctx.logger.warn({ ...base, trunkId: decision.trunk.id, agentId: decision.route.agentId, status: refusal.status }, `INVITE refused (${refusal.status}): ${refusal.why}`);
    ctx.count(refusal.outcome ?? 'over_limit');
    respond(tx, req, refusal.status, refusal.reason, refusal.retryAfter === undefined ? [] : [['Retry-After', String(refusal.retryAfter)]]);
    return;
  }
  // From here the INVITE holds what admission took for it until its call is delivered.
  let delivered = false;
  try {
    delivered = await setUpAdmitted(ctx, tx, inbound, decision, { base, user, from });
  } finally {
    if (!delivered) ctx.admissionLapsed(decision.route);
  }
}

/** An admitted INVITE: media, dialog, 180, delivery. True once the call was delivered to the handler. */
async function setUpAdmitted(
  ctx: UasContext,
  tx: ServerTransaction,
  inbound: Inbound<SipRequest>,
  decision: Extract<InboundDecision, { kind: 'accept' }>,
  { base, user, from }: { base: Record<string, string>; user: string; from: string },
): Promise<boolean> {
  const req = inbound.message;
  if (tx.finalResponse !== undefined || tx.terminated) return false; // CANCELled while admission was asked

  const type = req.contentType?.toString().toLowerCase() ?? '';
  // No body: a delayed offer (RFC 3261 13.2.1): our offer goes in the 2xx, the answer in the ACK.
  const delayedOffer = req.body.length === 0;
  if (!delayedOffer && !type.startsWith('application/sdp')) {
    ctx.logger.warn({ ...base, status: 415, contentType: type }, 'INVITE refused (415): the body is not SDP');
    ctx.count('bad_request');
    respond(tx, req, 415, undefined, [['Accept', 'application/sdp']]);
    return false;
  }
  const timer = negotiateSessionTimerUas(req, ctx.sessionTimer);
  if (timer.action === 'reject') {
    ctx.logger.warn({ ...base, status: timer.status, sessionExpires: req.get('Session-Expires') }, `INVITE refused (${timer.status}): ${timer.reason} (RFC 4028)`);
    ctx.count('session_interval');
    respond(tx, req, timer.status, timer.reason, timer.headers.map(([n, v]) => [n, String(v)]));
    return false;
  }

  // Accepted as far as this thread can tell: say so now (RFC 3261 17.2.1 lets the TU send 100
  // Trying itself). The RTP ports come from a media thread, and under load that hop is the
  // longest part of an INVITE's wait for its 180; the 100 stops the peer's retransmissions
  // (Timer A) meanwhile. Only here, after authentication and admission, so a source that is
  // refused or throttled never gets a 100 it could use to measure or amplify.
  if (tx.lastResponse === undefined) tx.respond(buildTrying(req));

  let ports: CallPorts;
  try {
    ports = await ctx.ports.allocate();
  } catch (err) {
    ctx.logger.error({ ...base, err, status: 503 }, 'INVITE refused (503): no RTP port');
    ctx.count('no_rtp_port');
    respond(tx, req, 503, 'Service Unavailable', [['Retry-After', '5']]);
    return false;
  }
  if (tx.finalResponse !== undefined || tx.terminated) {
    ports.close();
    return false;
  }

  const sdp = new LocalSdpSession();
  // The trunk's media_encryption, and whether this INVITE came over TLS: SDES keys travel in
  // the SDP, so they are taken and given only over TLS (RFC 4568 8.3; docs/sip-trunks.md).
  const srtp: SrtpPolicy = { mode: decision.trunk.mediaEncryption ?? 'none', sdesAllowed: inbound.source.protocol === 'tls' };
  let answer: NegotiatedAnswer;
  let pendingOffer: SdpOffer | undefined;
  try {
    if (delayedOffer) {
      // Our offer in the 2xx: SRTP when the trunk requires it, or allows it and this is TLS.
      if (srtp.mode === 'require' && !srtp.sdesAllowed) throw new SdpNegotiationError('SDP_SDES_NEEDS_TLS', 'the trunk requires SRTP and the INVITE without SDP came over a transport that is not TLS');
      const offerSrtp = srtp.sdesAllowed && srtp.mode !== 'none';
      pendingOffer = sdp.offer({ localAddress: ctx.mediaAddress, localPort: ports.rtpPort, codecs: delayedOfferCodecs(ctx.codecs), srtp: offerSrtp });
      answer = { ...awaitingAnswer(pendingOffer), answerSdp: pendingOffer.sdp, sessionId: pendingOffer.sessionId, sessionVersion: pendingOffer.sessionVersion };
    } else {
      answer = sdp.answer(req.body.toString('utf8'), { localAddress: ctx.mediaAddress, localPort: ports.rtpPort, preferences: ctx.codecs, srtp });
    }
  } catch (err) {
    ports.close();
    if (!isSdpError(err)) throw err;
    // Warning (RFC 3261 20.43) and Reason (RFC 3326) both name why, e.g. "SRTP required by the trunk".
    const headers: [string, string][] = err instanceof SdpNegotiationError ? [['Warning', err.warningHeader()], ['Reason', err.reasonHeader()]] : [];
    // err.message names suites and counts, never a key.
    ctx.logger.warn({ ...base, trunkId: decision.trunk.id, status: 488, sdp: err.message, mediaEncryption: srtp.mode, transport: inbound.source.protocol }, 'INVITE refused (488): no usable media in the offer');
    ctx.count('no_common_codec');
    respond(tx, req, 488, undefined, headers);
    return false;
  }

  let dialog: Dialog;
  try {
    dialog = ctx.dialogs.fromInvite(tx, inbound, { localContact: contactFor(inbound) });
  } catch (err) {
    ports.close();
    ctx.logger.warn({ ...base, err, status: 400 }, 'INVITE refused (400): cannot create a dialog');
    ctx.count('bad_request');
    respond(tx, req, 400, 'Bad Request (no Contact)');
    return false;
  }
  const logger = ctx.logger;
  const rtp = createCallRtp(ports, {
    clockRate: answer.codec.clockRate,
    // Delayed offer: the peer's address comes with the answer in the ACK.
    ...(pendingOffer ? {} : { remote: answer.remote }),
    ...(answer.dtmf ? { dtmfPayloadType: answer.dtmf.receivePayloadType } : {}),
    rtcpMux: answer.rtcpMux,
    mediaTimeoutMs: ctx.mediaTimeoutMs,
    ...(answer.srtp ? { srtp: answer.srtp } : {}),
    logger,
  });
  const call = new SipCall({
    direction: 'inbound',
    dialog,
    media: answer,
    rtp,
    sdp: { session: sdp, localAddress: ctx.mediaAddress, localPort: ports.rtpPort, preferences: ctx.codecs, srtp },
    from,
    to: user,
    trunk: { id: decision.trunk.id, orgId: decision.trunk.orgId, name: decision.trunk.name },
    route: decision.route,
    invite: req,
    answerSdp: answer.answerSdp,
    ...(pendingOffer ? { pendingOffer } : {}),
    answerHeaders: [['Allow', ALLOW], ['Supported', SUPPORTED], ['User-Agent', ctx.userAgent]],
    sessionTimer: { negotiated: timer.timer, headers: timer.headers, config: ctx.sessionTimer, peerAllowsUpdate: peerAllowsUpdate(req) },
    mediaTimeoutMs: ctx.mediaTimeoutMs,
    ...(ctx.sessionClock ? { sessionClock: ctx.sessionClock } : {}),
    logger,
  });
  ring(ctx, call, req, base);
  ctx.logger.info(
    { ...base, id: call.id, trunkId: decision.trunk.id, auth: decision.auth, agentId: decision.route.agentId, via: decision.route.via, codec: answer.codec.name },
    'inbound call routed',
  );
  ctx.count('routed');
  if (!ctx.deliver(call)) {
    ctx.logger.warn({ ...base, id: call.id, status: 480 }, 'INVITE refused (480): no call handler is registered');
    call.reject(480, 'No Call Handler');
    return false;
  }
  return true;
}
