/**
 * The SIP user agent: transports, transactions, dialogs, inbound auth and routing, calls. This
 * is the whole surface the rest of callbridge uses (DESIGN.md: sip/ hands an authenticated,
 * routed call to whoever registered for it and knows nothing of agents or voice sessions):
 *
 *   const ua = new SipUserAgent({ listen, directory, ports, mediaAddress, logger });
 *   await ua.start();
 *   ua.onInboundCall((call) => { ... call.answer(); });
 *   (with `registrar`, PBXs on digest trunks REGISTER here: registrar.ts)
 *   const result = await ua.dial({ trunk, to, callerId });   // outbound (uac.ts)
 *   ua.drain(30);            // new INVITEs get 503 Retry-After: 30
 *   await ua.close();        // BYE to every call, sockets closed
 */
import { EventEmitter } from 'node:events';
import type { PortSource } from '../../media/media-host.ts';
import { DEFAULT_CODEC_PREFERENCES } from '../sdp/index.ts';
import type { CodecName } from '../../media/codecs.ts';
import { AuthRateLimiter, type AuthRateLimiterOptions } from './auth-rate-limit.ts';
import { ChallengeRateLimiter, type ChallengeRateLimiterOptions } from './challenge-rate-limit.ts';
import type { HangupReason, SipCall } from './call.ts';
import { DialogManager } from '../dialog/index.ts';
import { DigestServer, type DigestAlgorithm } from '../digest/index.ts';
import type { InboundDirectory } from './inbound-routing.ts';
import { resolveTimerConfig, TransactionLayer } from '../transaction/index.ts';
import type { TransactionTimerConfig, TransactionTimers } from '../transaction/index.ts';
import { SipTransportLayer, type SipTransportLayerOptions, type SipTransportListen } from '../transport/index.ts';
import type { Endpoint } from '../transport/index.ts';
import type { SessionTimerConfig } from '../dialog/index.ts';
import { placeCall, type DialOptions, type DialResult, type OutboundContext } from './outbound-call.ts';
import { SipDnsResolver, TargetStatus, type SipDnsOptions } from '../dns/index.ts';
import { TrunkTargets } from './trunk-targets.ts';
import { DEFAULT_FAILOVER_TIMEOUT_MS } from './uac.ts';
import { registrarContext, type RegistrarOptions } from './registrar.ts';
import { handleOutOfDialog, type AdmissionLapsed, type AdmitCall, type UasContext, type UasLogger } from './uas.ts';

export interface SipUserAgentOptions {
  listen: SipTransportListen[];
  /** Bounds and routing of the transport layer (TCP caps and deadlines, trusted proxies); its defaults otherwise. */
  transport?: Pick<SipTransportLayerOptions, 'idleTimeoutMs' | 'maxConnections' | 'maxConnectionsPerSource' | 'messageTimeoutMs' | 'tlsHandshakeTimeoutMs' | 'trustedProxies' | 'outboundTls'>;
  directory: InboundDirectory;
  ports: PortSource;
  /** The address put in our SDP (c=, o=): where peers send RTP. */
  mediaAddress: string;
  /** Digest realm of our challenges. Default "callbridge". */
  realm?: string;
  /** Nonce HMAC key (16+ bytes); random per start when unset. */
  digestSecret?: string;
  /** Offered digest algorithms, most preferred first. Default SHA-256 then MD5 (RFC 8760 2.4). */
  digestAlgorithms?: readonly DigestAlgorithm[];
  authRateLimit?: AuthRateLimiterOptions;
  /** Per-source rate of 401 challenges and blocked 403s (challenge-rate-limit.ts); default 20/s, burst 40; false: none. */
  challengeRateLimit?: ChallengeRateLimiterOptions | false;
  /** Codecs we accept, in order. Default PCMU, PCMA, opus. */
  codecs?: readonly CodecName[];
  /** RTP silence that hangs a call up; 0 disables. Default 30 s. */
  mediaTimeoutMs?: number;
  timers?: TransactionTimerConfig;
  /** User-Agent / Server header. Default "callbridge". */
  userAgent?: string;
  /** Outbound calls not answered within this are cancelled. Default 60 s. */
  ringTimeoutMs?: number;
  /** RFC 4028 session timers: interval granted/asked (default 1800 s) and our Min-SE (default 90 s). */
  sessionTimer?: SessionTimerConfig;
  /** Timers of the calls' session timers (tests pass a virtual clock); default Node's. */
  sessionClock?: TransactionTimers;
  /** Be the registrar of PBXs on digest trunks (registrar.ts); without it REGISTER gets 405. */
  registrar?: RegistrarOptions;
  /** RFC 3263 resolution of trunks' outbound hosts: DNS servers, timeouts, cache (dns/resolver.ts). */
  dns?: Omit<SipDnsOptions, 'logger'>;
  /**
   * Failover between a trunk's targets: silence before the next target (default 4 s, uac.ts) and
   * how long a failed target is tried last (default 60 s).
   */
  failover?: { timeoutMs?: number; deadTargetSecs?: number };
  logger: UasLogger;
}

export type SipUserAgentEvents = {
  /** A call was set up (inbound: delivered; outbound: answered). */
  call: [call: SipCall];
  /** A call ended. */
  'call-ended': [call: SipCall];
  /** An INVITE or dial outcome was counted (routed, no_route, auth_failed, dial_busy...): metrics. */
  outcome: [outcome: string];
  /**
   * An inbound INVITE for a number claimed by trunks of different organizations: refused, or
   * challenged because a digest trunk claims it (inbound-routing.ts). Trunk ids only.
   */
  'ambiguous-route': [trunkIds: string[], action: 'refused' | 'challenged'];
};

export type InboundCallHandler = (call: SipCall) => void;

export interface InboundCallOptions {
  /** Admission before any provisional response (e.g. concurrent call limits); see AdmitCall. */
  admit?: AdmitCall;
  /** An admitted INVITE ended before delivery: what admission took for it is given back; see AdmissionLapsed. */
  lapsed?: AdmissionLapsed;
}

export class SipUserAgent extends EventEmitter<SipUserAgentEvents> {
  readonly transport: SipTransportLayer;
  readonly layer: TransactionLayer;
  readonly dialogs: DialogManager;
  readonly digest: DigestServer;
  readonly limiter: AuthRateLimiter;
  /** Undefined when challengeRateLimit is false. */
  readonly challenges: ChallengeRateLimiter | undefined;
  /** Trunks' outbound targets (RFC 3263) and which of them are out of service. */
  readonly targets: TrunkTargets;
  readonly #opts: SipUserAgentOptions;
  readonly #outbound: OutboundContext;
  readonly #calls = new Map<string, SipCall>();
  readonly #counters = new Map<string, number>();
  #handler: InboundCallHandler | undefined;
  #admit: AdmitCall | undefined;
  #lapsed: AdmissionLapsed | undefined;
  #retryAfter: number | undefined;
  #started = false;
  #closing: Promise<void> | undefined;

  constructor(opts: SipUserAgentOptions) {
    super();
    this.#opts = opts;
    this.transport = new SipTransportLayer({ ...opts.transport, listen: opts.listen, logger: opts.logger });
    const timerConfig = resolveTimerConfig(opts.timers);
    this.layer = new TransactionLayer({ transport: this.transport, ...(opts.timers ? { timers: opts.timers } : {}), logger: opts.logger });
    this.dialogs = new DialogManager({ layer: this.layer, logger: opts.logger });
    this.digest = new DigestServer({
      realm: opts.realm ?? 'callbridge',
      ...(opts.digestSecret ? { secret: opts.digestSecret } : {}),
      algorithms: opts.digestAlgorithms ?? ['SHA-256', 'MD5'],
    });
    this.limiter = new AuthRateLimiter(opts.authRateLimit);
    this.challenges = opts.challengeRateLimit === false ? undefined : new ChallengeRateLimiter(opts.challengeRateLimit);
    const ctx: UasContext = {
      dialogs: this.dialogs,
      directory: opts.directory,
      digest: this.digest,
      limiter: this.limiter,
      challenges: this.challenges,
      ports: opts.ports,
      mediaAddress: opts.mediaAddress,
      codecs: opts.codecs ?? DEFAULT_CODEC_PREFERENCES,
      mediaTimeoutMs: opts.mediaTimeoutMs ?? 30_000,
      userAgent: opts.userAgent ?? 'callbridge',
      logger: opts.logger,
      draining: () => this.#retryAfter,
      sessionTimer: opts.sessionTimer ?? {},
      reliableProvisional: { t1: timerConfig.t1, t2: timerConfig.t2 },
      ...(opts.sessionClock ? { sessionClock: opts.sessionClock } : {}),
      deliver: (call) => this.#deliver(call),
      admit: (route, trunk) => (this.#handler === undefined ? undefined : this.#admit?.(route, trunk)),
      admissionLapsed: (route) => this.#lapsed?.(route),
      count: (outcome) => this.#count(outcome),
      ambiguousRoute: (trunkIds, action) => void this.emit('ambiguous-route', trunkIds, action),
    };
    if (opts.registrar !== undefined) {
      ctx.registrar = registrarContext(
        {
          directory: opts.directory,
          digest: this.digest,
          limiter: this.limiter,
          challenges: this.challenges,
          logger: opts.logger,
          count: (outcome) => this.#count(outcome),
          holdConnection: (id, ms) => void this.transport.holdConnection(id, ms),
        },
        opts.registrar,
      );
    }
    this.dialogs.on('new-request', (tx, inbound) => handleOutOfDialog(ctx, tx, inbound));
    this.targets = new TrunkTargets({
      transport: this.transport,
      dns: new SipDnsResolver({ ...opts.dns, logger: opts.logger }),
      status: new TargetStatus({ deadMs: (opts.failover?.deadTargetSecs ?? 60) * 1000 }),
    });
    this.#outbound = {
      transport: this.transport,
      layer: this.layer,
      dialogs: this.dialogs,
      ports: opts.ports,
      mediaAddress: opts.mediaAddress,
      codecs: ctx.codecs,
      mediaTimeoutMs: ctx.mediaTimeoutMs,
      ringTimeoutMs: opts.ringTimeoutMs ?? 60_000,
      sessionTimer: ctx.sessionTimer,
      ...(opts.sessionClock ? { sessionClock: opts.sessionClock } : {}),
      userAgent: ctx.userAgent,
      targets: this.targets,
      failoverTimeoutMs: opts.failover?.timeoutMs ?? DEFAULT_FAILOVER_TIMEOUT_MS,
      logger: opts.logger,
    };
  }

  /**
   * Calls `to` through a trunk (outbound.ts): resolves once answered (a SipCall, tracked until it
   * ends) or failed (busy, no_answer, auth_failed, not_found, rejected, timeout, unreachable...).
   * Refused at once while draining or closed.
   */
  async dial(opts: DialOptions): Promise<DialResult> {
    if (this.#retryAfter !== undefined || !this.listening) return { ok: false, reason: 'unreachable', status: 503, detail: 'the SIP user agent is draining or closed' };
    this.#count('dial');
    const result = await placeCall(this.#outbound, opts);
    if (result.ok) {
      if (this.#closing !== undefined) {
        result.call.hangup('shutdown');
        return { ok: false, reason: 'cancelled', status: 503, detail: 'the SIP user agent closed while the call was set up' };
      }
      this.track(result.call);
    } else {
      this.#count(`dial_${result.reason}`);
    }
    return result;
  }

  /** Binds every listener. @throws SipTransportError when one cannot be bound. */
  async start(): Promise<void> {
    await this.transport.start();
    this.#started = true;
  }

  /** True once listening and not closing (readiness). */
  get listening(): boolean {
    return this.#started && this.#closing === undefined && !this.transport.closed;
  }

  /** The bound endpoints (ports resolved). */
  get endpoints(): Endpoint[] {
    return this.transport.endpoints;
  }

  /** Calls in progress (ringing or answered). */
  get calls(): SipCall[] {
    return [...this.#calls.values()];
  }

  /** Counters of INVITE outcomes (routed, no_route, auth_failed, draining...). */
  counters(): Record<string, number> {
    return Object.fromEntries(this.#counters);
  }

  /**
   * Who takes inbound calls. Without a handler, routed calls are refused 480. `admit` is asked
   * about each routed INVITE before it rings, so a refusal (503 Retry-After, 486) comes without
   * a 180.
   */
  onInboundCall(handler: InboundCallHandler | undefined, opts: InboundCallOptions = {}): void {
    this.#handler = handler;
    this.#admit = opts.admit;
    this.#lapsed = opts.lapsed;
  }

  /** From now on new INVITEs get 503 with Retry-After: `retryAfterSecs`; calls go on. */
  drain(retryAfterSecs: number): void {
    this.#retryAfter = Math.max(0, Math.round(retryAfterSecs));
  }

  get draining(): boolean {
    return this.#retryAfter !== undefined;
  }

  /** Ends every call (BYE, or 503 before answer). */
  hangupAll(reason: HangupReason = 'shutdown'): void {
    for (const c of this.calls) c.hangup(reason);
  }

  /** Hangs up every call, then closes dialogs, transactions and sockets. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#retryAfter ??= 0;
      this.hangupAll('shutdown');
      // Let the BYEs leave before the sockets close.
      await new Promise((r) => setTimeout(r, this.#calls.size > 0 || this.dialogs.size > 0 ? 50 : 0));
      this.dialogs.close();
      this.layer.close();
      await this.transport.close();
    })();
    return this.#closing;
  }

  /** @internal A call the UAS or UAC set up: track it until it ends. */
  track(call: SipCall): void {
    this.#calls.set(call.id, call);
    call.once('hangup', (info) => {
      this.#calls.delete(call.id);
      this.#count(`ended_${info.reason}`);
      this.#opts.logger.info({ id: call.id, callId: call.callId, ...info, direction: call.direction }, 'call ended');
      this.emit('call-ended', call);
    });
    this.emit('call', call);
  }

  #deliver(call: SipCall): boolean {
    const handler = this.#handler;
    if (handler === undefined || this.#closing !== undefined) return false;
    this.track(call);
    try {
      handler(call);
    } catch (err) {
      this.#opts.logger.error({ err, id: call.id }, 'the inbound call handler threw: rejecting the call');
      call.reject(500);
    }
    return true;
  }

  #count(outcome: string): void {
    this.#counters.set(outcome, (this.#counters.get(outcome) ?? 0) + 1);
    if (this.listenerCount('outcome') > 0) this.emit('outcome', outcome);
  }
}
