/**
 * An outbound call through a trunk: RTP ports and our SDP offer, the INVITE to the trunk's
 * outbound host with the caller ID after the trunk's transforms (uac.ts does the INVITE
 * transaction, digest 401/407, CANCEL on ring timeout), then the answer's media and a SipCall.
 *
 * Request-URI: sip:<number>@<outbound host>[:port][;transport=tcp|tls], written once and used
 * unchanged as the digest uri (a strict carrier compares the two and loops on 401 otherwise).
 * A trunk without outbound_host calls the PBX registered on it instead (registered-route.ts).
 */
import { createCallRtp, type CallPorts, type CallRtp, type PortSource } from '../../media/media-host.ts';
import type { CodecName } from '../../media/codecs.ts';
import { applyCallerIdTransforms, outboundTarget, type CallerIdTransform, type Pbx } from '../../domain/sip-trunk.ts';
import { SipCall, type CallLogger } from './call.ts';
import type { DialogManager } from '../dialog/index.ts';
import { parseUri } from '../message/index.ts';
import { LocalSdpSession, parseAnswer, type NegotiatedMedia } from '../sdp/index.ts';
import { peerAllowsUpdate, sessionTimerFromUacResponse, sessionTimerUacHeaders, type SessionTimerConfig } from '../dialog/index.ts';
import type { TransactionLayer } from '../transaction/index.ts';
import type { TransactionTimers } from '../transaction/index.ts';
import type { Endpoint, SipTransportLayer } from '../transport/index.ts';
import { registeredRoute, type RegisteredContact } from './registered-route.ts';
import { resolveDestination, sendInvite, type InviteFailureReason } from './uac.ts';
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

/** no_outbound_host: neither an outbound_host nor a registered PBX to call. */
export type DialFailureReason = InviteFailureReason | 'no_outbound_host' | 'no_rtp_port' | 'no_common_codec';

export type DialResult =
  | { ok: true; call: SipCall }
  | { ok: false; reason: DialFailureReason; status: number; detail: string };

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
    logger: ctx.logger,
  });
}

/** Where the INVITE goes: the trunk's outbound_host, else its registered PBX (registered-route.ts). */
interface CallRoute {
  destination: Endpoint;
  requestUri: string;
  /** host[:port] of the To header. */
  toHost: string;
}

async function routeOf(ctx: OutboundContext, trunk: OutboundTrunk, to: string): Promise<CallRoute | Extract<DialResult, { ok: false }>> {
  let target;
  try {
    target = outboundTarget(trunk);
  } catch {
    target = undefined;
  }
  const log = { trunkId: trunk.id, to };
  if (target === undefined) {
    if (trunk.registered === undefined) return { ok: false, reason: 'no_outbound_host', status: 0, detail: `trunk ${trunk.id} has no usable outbound_host and no registered PBX` };
    try {
      const route = await registeredRoute(ctx.transport, trunk.registered);
      ctx.logger.debug({ ...log, contact: route.requestUri, reusesConnection: route.reusesConnection }, 'outbound call to the registered PBX');
      return route;
    } catch (err) {
      ctx.logger.warn({ ...log, err }, 'outbound call failed: the registered Contact cannot be reached');
      return { ok: false, reason: 'unreachable', status: 503, detail: `cannot reach the registered Contact ${trunk.registered.contact}` };
    }
  }
  let destination;
  try {
    destination = await resolveDestination(target.host, target.port, target.transport);
  } catch (err) {
    ctx.logger.warn({ ...log, err }, 'outbound call failed: outbound_host does not resolve');
    return { ok: false, reason: 'unreachable', status: 503, detail: `cannot resolve ${target.host}` };
  }
  const transportParam = target.transport === 'udp' ? '' : `;transport=${target.transport}`;
  const toHost = hostPort(target.host, target.port);
  // Through parseUri and back, so the text is exactly what the serializer writes on the wire.
  return { destination, requestUri: parseUri(`sip:${to}@${toHost}${transportParam}`).toString(), toHost };
}

export async function placeCall(ctx: OutboundContext, opts: DialOptions): Promise<DialResult> {
  const { trunk } = opts;
  const log = { trunkId: trunk.id, to: opts.to };
  const route = await routeOf(ctx, trunk, opts.to);
  if ('ok' in route) return route;
  const { destination, requestUri } = route;

  let ports: CallPorts;
  try {
    ports = await ctx.ports.allocate();
  } catch (err) {
    ctx.logger.warn({ ...log, err }, 'outbound call failed: no RTP port');
    return { ok: false, reason: 'no_rtp_port', status: 503, detail: 'no free RTP port' };
  }

  const sdp = new LocalSdpSession();
  const offer = sdp.offer({ localAddress: ctx.mediaAddress, localPort: ports.rtpPort, codecs: ctx.codecs });
  let local;
  try {
    local = ctx.transport.localEndpoint(destination.protocol, destination.address.includes(':') ? 6 : 4);
  } catch (err) {
    ports.close();
    ctx.logger.warn({ ...log, err }, `outbound call failed: no ${destination.protocol} listener`);
    return { ok: false, reason: 'unreachable', status: 503, detail: `no ${destination.protocol.toUpperCase()} listener to send from` };
  }
  const localHost = hostPort(local.address, local.port);
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
    contact: `<sip:callbridge@${localHost}${local.protocol === 'udp' ? '' : `;transport=${local.protocol}`}>`,
    sdp: offer.sdp,
    ...(trunk.credentials ? { credentials: trunk.credentials } : {}),
    ringTimeoutMs: opts.ringTimeoutMs ?? ctx.ringTimeoutMs,
    ...(opts.signal ? { signal: opts.signal } : {}),
    allow: ALLOW,
    supported: SUPPORTED.split(', '),
    headers: [...sessionTimerUacHeaders(ctx.sessionTimer).filter(([n]) => n !== 'Supported'), ['User-Agent', ctx.userAgent]],
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
    return { ok: false, reason: outcome.reason, status: outcome.status, detail: outcome.detail };
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
    sdp: { session: sdp, localAddress: ctx.mediaAddress, localPort: ports.rtpPort, preferences: ctx.codecs },
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
