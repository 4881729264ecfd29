/**
 * An outbound call through a trunk: RTP ports and our SDP offer, the INVITE to the trunk's
 * outbound host with the caller ID after the trunk's transforms (uac.ts does the INVITE
 * transaction, digest 401/407, CANCEL on ring timeout), then the answer's media and a SipCall.
 *
 * Request-URI: sip:<number>@<outbound host>[:port][;transport=tcp|tls], written once and used
 * unchanged as the digest uri (a strict carrier compares the two and loops on 401 otherwise).
 * The outbound host is resolved with RFC 3263 (trunk-targets.ts: NAPTR -> SRV -> A/AAAA), and the
 * INVITE fails over between its targets (uac.ts InviteFailover), remembering dead ones; a DNS
 * failure is the outcome dns_failed. A trunk without outbound_host calls the PBX registered on it
 * instead (registered-route.ts).
 */
import { createCallRtp, type CallPorts, type CallRtp, type PortSource } from '../../media/media-host.ts';
import type { CodecName } from '../../media/codecs.ts';
import { applyCallerIdTransforms, type CallerIdTransform, type Pbx } from '../../domain/sip-trunk.ts';
import { SipCall, type CallLogger } from './call.ts';
import type { DialogManager } from '../dialog/index.ts';
import { parseUri } from '../message/index.ts';
import { LocalSdpSession, parseAnswer, type NegotiatedMedia } from '../sdp/index.ts';
import { peerAllowsUpdate, sessionTimerFromUacResponse, sessionTimerUacHeaders, type SessionTimerConfig } from '../dialog/index.ts';
import type { TransactionLayer } from '../transaction/index.ts';
import type { TransactionTimers } from '../transaction/index.ts';
import type { Endpoint, SipTransportLayer } from '../transport/index.ts';
import { registeredRoute, type RegisteredContact } from './registered-route.ts';
import { sendInvite, type InviteFailureReason, type InviteTarget } from './uac.ts';
import type { TrunkTargets } from './trunk-targets.ts';
import { ALLOW, SUPPORTED } from './uas.ts';

/** The trunk fields an outbound call needs (the store's trunk record has them). */
export interface OutboundTrunk {
  id: string;
  orgId: string;
  name: string;
  pbx: Pbx;
  outbound_host: string;
  caller_id_transforms: readonly CallerIdTransform[];
  /** outbound_sip_username / password, when the trunk has them. */
  credentials?: { username: string; password: string };
  /** The PBX registered on the trunk (its most recent binding): where calls go without outbound_host. */
  registered?: RegisteredContact;
  /** SDES-SRTP policy (docs/sip-trunks.md): require -> TLS and RTP/SAVP only; allow -> SAVP over TLS. Absent: none. */
  media_encryption?: 'none' | 'allow' | 'require';
}

export interface DialOptions {
  trunk: OutboundTrunk;
  /** The number to call: the Request-URI user. */
  to: string;
  /** Our caller ID before the trunk's transforms: the From user. */
  callerId: string;
  /** CANCEL when not answered within this. Default the user agent's ring timeout. */
  ringTimeoutMs?: number;
  signal?: AbortSignal;
  /** 180/183 from the far end (early media SDP applied to the RTP session already). */
  onProgress?: (status: number, reason: string) => void;
}

/**
 * no_outbound_host: neither an outbound_host nor a registered PBX to call. dns_failed: the
 * outbound_host did not resolve (the DNS server did not answer, or no record gave an address).
 */
export type DialFailureReason = InviteFailureReason | 'no_outbound_host' | 'no_rtp_port' | 'no_common_codec' | 'dns_failed' | 'srtp_needs_tls';

export type DialResult =
  | { ok: true; call: SipCall }
  | { ok: false; reason: DialFailureReason; status: number; detail: string; /** The INVITE's Call-ID and the final response's reason phrase, once an INVITE was sent. */ callId?: string; reasonPhrase?: string };

export interface OutboundContext {
  transport: SipTransportLayer;
  layer: TransactionLayer;
  dialogs: DialogManager;
  ports: PortSource;
  mediaAddress: string;
  codecs: readonly CodecName[];
  mediaTimeoutMs: number;
  ringTimeoutMs: number;
  sessionTimer: SessionTimerConfig;
  sessionClock?: TransactionTimers;
  userAgent: string;
  /** RFC 3263 resolution of outbound_host and the dead-target memory (trunk-targets.ts). */
  targets: TrunkTargets;
  /** Silence from a target before the INVITE goes to the next one (uac.ts InviteFailover). */
  failoverTimeoutMs: number;
  logger: CallLogger;
}

function hostPort(host: string, port: number | undefined): string {
  const h = host.includes(':') && !host.startsWith('[') ? `[${host}]` : host;
  return port === undefined ? h : `${h}:${port}`;
}

function newRtp(ctx: OutboundContext, ports: CallPorts, media: NegotiatedMedia): CallRtp {
  return createCallRtp(ports, {
    clockRate: media.codec.clockRate,
    remote: media.remote,
    ...(media.dtmf ? { dtmfPayloadType: media.dtmf.receivePayloadType } : {}),
    rtcpMux: media.rtcpMux,
    mediaTimeoutMs: ctx.mediaTimeoutMs,
    ...(media.srtp ? { srtp: media.srtp } : {}),
    logger: ctx.logger,
  });
}

/** Where the INVITE goes: the trunk's outbound_host, else its registered PBX (registered-route.ts). */
interface CallRoute {
  destination: Endpoint;
  /** Failover targets after `destination` (RFC 3263: more SRV targets or addresses). */
  more: Endpoint[];
  requestUri: string;
  /** host[:port] of the To header. */
  toHost: string;
  /** A sips: trunk: sips: Request-URI and Contact, TLS only. */
  secure?: boolean;
}

async function routeOf(ctx: OutboundContext, trunk: OutboundTrunk, to: string): Promise<CallRoute | Extract<DialResult, { ok: false }>> {
  const log = { trunkId: trunk.id, to };
  let resolved;
  try {
    resolved = await ctx.targets.resolve(trunk);
  } catch (err) {
    const detail = err instanceof Error ? err.message : String(err);
    ctx.logger.warn({ ...log, outboundHost: trunk.outbound_host, err: detail }, 'outbound call failed: DNS resolution of outbound_host failed');
    return { ok: false, reason: 'dns_failed', status: 503, detail };
  }
  if (resolved === undefined) {
    if (trunk.registered === undefined) return { ok: false, reason: 'no_outbound_host', status: 0, detail: `trunk ${trunk.id} has no usable outbound_host and no registered PBX` };
    try {
      const route = await registeredRoute(ctx.transport, trunk.registered);
      ctx.logger.debug({ ...log, contact: route.requestUri, reusesConnection: route.reusesConnection }, 'outbound call to the registered PBX');
      return { ...route, more: [] };
    } catch (err) {
      ctx.logger.warn({ ...log, err }, 'outbound call failed: the registered Contact cannot be reached');
      return { ok: false, reason: 'unreachable', status: 503, detail: `cannot reach the registered Contact ${trunk.registered.contact}` };
    }
  }
  const { target, targets } = resolved;
  const [first, ...rest] = targets.map((t) => t.destination);
  if (targets.length > 1) ctx.logger.debug({ ...log, targets: targets.map((t) => `${t.via} ${t.name} ${t.destination.protocol}:${t.destination.address}:${t.destination.port}`) }, 'outbound call: targets (RFC 3263)');
  const destination = first!;
  // sips: trunk: a sips: Request-URI without ;transport=tls (RFC 5630 deprecates transport=tls).
  const transportParam = target.secure === true || target.transport === 'udp' ? '' : `;transport=${target.transport}`;
  const toHost = hostPort(target.host, target.port);
  // Through parseUri and back, so the text is exactly what the serializer writes on the wire.
  return { destination, more: rest, requestUri: parseUri(`${target.secure === true ? 'sips' : 'sip'}:${to}@${toHost}${transportParam}`).toString(), toHost, secure: target.secure === true };
}

export async function placeCall(ctx: OutboundContext, opts: DialOptions): Promise<DialResult> {
  const { trunk } = opts;
  const log = { trunkId: trunk.id, to: opts.to };
  const route = await routeOf(ctx, trunk, opts.to);
  if ('ok' in route) return route;
  const { destination, requestUri } = route;
  // SDES keys go only over TLS (RFC 4568 8.3): a require trunk must be dialled over TLS; an
  // allow trunk offers SRTP when it is (docs/sip-trunks.md). Failover targets over another
  // transport cannot carry this offer and are left out.
  const encryption = trunk.media_encryption ?? 'none';
  if (encryption === 'require' && destination.protocol !== 'tls') {
    const detail = `trunk ${trunk.id} requires SRTP (media_encryption require), which needs SIP over TLS; its outbound target is ${destination.protocol.toUpperCase()} (use ;transport=tls in outbound_host)`;
    ctx.logger.warn({ ...log, transport: destination.protocol }, 'outbound call refused: SRTP required but the trunk is not dialled over TLS');
    return { ok: false, reason: 'srtp_needs_tls', status: 0, detail };
  }
  const offerSrtp = encryption !== 'none' && destination.protocol === 'tls';
  if (offerSrtp) route.more = route.more.filter((e) => e.protocol === 'tls');

  let ports: CallPorts;
  try {
    ports = await ctx.ports.allocate();
  } catch (err) {
    ctx.logger.warn({ ...log, err }, 'outbound call failed: no RTP port');
    return { ok: false, reason: 'no_rtp_port', status: 503, detail: 'no free RTP port' };
  }

  const sdp = new LocalSdpSession();
  const offer = sdp.offer({ localAddress: ctx.mediaAddress, localPort: ports.rtpPort, codecs: ctx.codecs, srtp: offerSrtp });
  let local;
  try {
    local = ctx.transport.localEndpoint(destination.protocol, destination.address.includes(':') ? 6 : 4);
  } catch (err) {
    ports.close();
    ctx.logger.warn({ ...log, err }, `outbound call failed: no ${destination.protocol} listener`);
    return { ok: false, reason: 'unreachable', status: 503, detail: `no ${destination.protocol.toUpperCase()} listener to send from` };
  }
  const localHost = hostPort(local.address, local.port);
  // A sips: trunk gets a sips: Contact (RFC 3261 8.1.1.8: a SIPS Request-URI needs one).
  const contactFor = (l: { address: string; port: number; protocol: string }): string =>
    route.secure === true ? `<sips:callbridge@${hostPort(l.address, l.port)}>` : `<sip:callbridge@${hostPort(l.address, l.port)}${l.protocol === 'udp' ? '' : `;transport=${l.protocol}`}>`;
  // Each failover target gets the Contact of the listener it is sent from (its transport may differ).
  const more: InviteTarget[] = [];
  for (const e of route.more) {
    try {
      more.push({ destination: e, contact: contactFor(ctx.transport.localEndpoint(e.protocol, e.address.includes(':') ? 6 : 4)) });
    } catch {
      // no listener for it: not a target we can use
    }
  }
  const callerId = applyCallerIdTransforms(opts.callerId, trunk.caller_id_transforms);

  let rtp: CallRtp | undefined;
  let early: NegotiatedMedia | undefined;
  const outcome = await sendInvite({
    layer: ctx.layer,
    dialogs: ctx.dialogs,
    destination,
    requestUri,
    from: { user: callerId, host: localHost },
    to: { user: opts.to, host: route.toHost },
    contact: contactFor(local),
    sdp: offer.sdp,
    ...(trunk.credentials ? { credentials: trunk.credentials } : {}),
    ringTimeoutMs: opts.ringTimeoutMs ?? ctx.ringTimeoutMs,
    ...(opts.signal ? { signal: opts.signal } : {}),
    allow: ALLOW,
    supported: SUPPORTED.split(', '),
    headers: [...sessionTimerUacHeaders(ctx.sessionTimer).filter(([n]) => n !== 'Supported'), ['User-Agent', ctx.userAgent]],
    failover: {
      targets: more,
      timeoutMs: ctx.failoverTimeoutMs,
      onTarget: (destination, result) => (result === 'failed' ? ctx.targets.status.failed(destination) : ctx.targets.status.answered(destination)),
    },
    onProvisional: (status, reason, body) => {
      if (body !== undefined && early === undefined) {
        // Early media (RFC 3960): start RTP toward the far end's announced address now.
        try {
          early = parseAnswer(body, offer);
          rtp = newRtp(ctx, ports, early);
        } catch (err) {
          ctx.logger.debug({ ...log, err }, 'unusable early-media SDP ignored');
        }
      }
      opts.onProgress?.(status, reason);
    },
    logger: ctx.logger,
  });

  if (!outcome.ok) {
    rtp?.close();
    ports.close();
    return { ok: false, reason: outcome.reason, status: outcome.status, detail: outcome.detail, callId: outcome.callId, reasonPhrase: outcome.reasonPhrase };
  }
  let media: NegotiatedMedia;
  try {
    if (outcome.sdp === undefined) {
      if (early === undefined) throw new Error('the 2xx has no SDP answer and there was no early one');
      media = early;
    } else {
      media = parseAnswer(outcome.sdp, offer, early);
    }
  } catch (err) {
    // RFC 3264 / 3261 13.2.2.4: the 2xx is ACKed already; an unusable answer ends the session.
    ctx.logger.warn({ ...log, err }, 'outbound call answered with unusable SDP: BYE');
    outcome.dialog.bye({ headers: [['Reason', 'SIP;cause=488;text="Not Acceptable Here"']] });
    rtp?.close();
    ports.close();
    return { ok: false, reason: 'no_common_codec', status: 488, detail: err instanceof Error ? err.message : String(err) };
  }
  if (rtp === undefined) {
    rtp = newRtp(ctx, ports, media);
  } else if (rtp.clockRate !== media.codec.clockRate) {
    // The early-media session runs at another clock rate than the answer's codec: a far end
    // that changes its answer this way is not one we can follow on the same ports.
    ctx.logger.warn({ ...log, early: rtp.clockRate, answer: media.codec.clockRate }, 'outbound call: the 2xx answer changes the clock rate of early media: BYE');
    outcome.dialog.bye({ headers: [['Reason', 'SIP;cause=488;text="Not Acceptable Here"']] });
    rtp.close();
    return { ok: false, reason: 'no_common_codec', status: 488, detail: 'the answer changed the clock rate of the early media' };
  } else if (media.remoteChanged) {
    rtp.setRemote(media.remote);
  }
  if (media.srtpChanged) rtp.setSrtp(media.srtp); // the 2xx re-keyed the early media
  let timer;
  try {
    timer = sessionTimerFromUacResponse(outcome.response);
  } catch {
    timer = undefined;
  }
  const call = new SipCall({
    direction: 'outbound',
    dialog: outcome.dialog,
    media,
    rtp,
    sdp: { session: sdp, localAddress: ctx.mediaAddress, localPort: ports.rtpPort, preferences: ctx.codecs, srtp: { mode: encryption, sdesAllowed: offerSrtp } },
    from: callerId,
    to: opts.to,
    trunk: { id: trunk.id, orgId: trunk.orgId, name: trunk.name },
    answerHeaders: [['Allow', ALLOW], ['Supported', SUPPORTED], ['User-Agent', ctx.userAgent]],
    sessionTimer: { negotiated: timer, headers: [], config: ctx.sessionTimer, peerAllowsUpdate: peerAllowsUpdate(outcome.response) },
    mediaTimeoutMs: ctx.mediaTimeoutMs,
    ...(ctx.sessionClock ? { sessionClock: ctx.sessionClock } : {}),
    logger: ctx.logger,
  });
  ctx.logger.info({ ...log, id: call.id, callId: call.callId, codec: media.codec.name, attempts: outcome.attempts }, 'outbound call answered');
  return { ok: true, call };
}
