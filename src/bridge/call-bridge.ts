/**
 * The daemon's call bridge: the registry of bridged calls, the concurrent-call limits, and the
 * entry points where SIP calls become bridged calls:
 *
 *   admit(route)        a routed INVITE over a limit is refused before it rings
 *   handleInbound(call) a routed inbound call: rings until its voice session has started
 *   dial(request)       POST /v1/agents/{id}/dial: the session first, then the call through a trunk
 *   handleMediaStream   a carrier media stream (an inbound call on an imported number, or the
 *                       answered stream of an outbound carrier dial)
 *   dialCarrier(req)    POST /v1/agents/{id}/dial through the carrier's call API (carrier-dial.ts)
 *   carrierStatus(u)    the carrier's status callbacks: dial progress, the end of stream calls
 *
 * Each call is a BridgeCore (bridge-core.ts) over a SipCallLeg (sip-call-leg.ts), a voice link
 * beside the call's media (voice-link.ts) and the SIP transfer fallback (sip-transfer-fallback.ts).
 * The bridge is a client of the public voice protocol, like any browser; the call record is the
 * session's record (direction, trunk, from/to), to which the bridge adds what only it knows.
 */
import type { OutboundDial } from '../domain/dial.ts';
import { notFound, tooMany, unavailable, validation } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import { MediaTicker } from '../media/media-ticker.ts';
import type { SipCall } from '../sip/ua/index.ts';
import type { InboundRoute } from '../sip/ua/index.ts';
import { canCallThrough, outboundTrunkFromStore } from './sip-store-directory.ts';
import type { AdmissionRefusal } from '../sip/ua/index.ts';
import type { SipUserAgent } from '../sip/ua/index.ts';
import type { Store } from '../store/index.ts';
import { BridgeCore, type BridgeCoreOptions, type CallRecorderSink } from './bridge-core.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import { CallRecordWriter } from './call-record-writer.ts';
import { inboundSession } from './inbound-session.ts';
import { callVariables, withCallVariables } from './call-variables.ts';
import type { SessionOpener } from './session-opener.ts';
import { SipCallLeg } from './sip-call-leg.ts';
import { sipTransferFallback, trunkTransferDialer, type DialTransfer } from './sip-transfer-fallback.ts';
import { openVoiceLink } from './voice-link.ts';
import { MediaStreamCallLeg } from './media-stream-call-leg.ts';
import type { CallLeg } from './call-leg.ts';
import type { StartedStream, StreamSink } from '../telco/twilio-stream-socket.ts';
import type { CarrierClient } from '../telco/carrier-client.ts';
import type { CarrierCallStatus } from '../telco/twilio-call-status.ts';
import type { StreamTokens } from '../telco/twilio-stream-tokens.ts';
import { carrierCallControl } from './carrier-call-control.ts';
import { CarrierDials, type CarrierDialRequest } from './carrier-dial.ts';

export interface CallBridgeOptions {
  store: Store;
  /** Opens each call's voice session (this daemon's own by default; see session-opener.ts). */
  sessions: SessionOpener;
  logger: Logger;
  /** The SIP user agent outbound calls are placed with (undefined: SIP disabled or not started). */
  ua(): SipUserAgent | undefined;
  /** A session not started within this is given up: the call is refused (default 10 s). */
  connectTimeoutMs?: number;
  /** Concurrent call limits (0 = none): over them inbound calls get 503 / 486, dials 429. */
  limits?: { maxCalls: number; maxCallsPerTrunk: number };
  metrics?: BridgeMetrics;
  /**
   * Transfer fallback: places a call to `target` for `call` (through its trunk) and resolves with
   * the answered leg, or undefined when it is not answered. Undefined option: no fallback.
   */
  dialTransfer?: DialTransfer;
  /** Encoded silence while the agent is quiet (continuous RTP); default true. */
  sendSilence?: boolean;
  /** Call recording: a recorder per bridged call (undefined: recording off). */
  recorder?: (callId: string) => CallRecorderSink | undefined;
  /** The 20 ms media clock every call's two directions run on (default: one for this bridge). */
  ticker?: MediaTicker;
  /**
   * The carrier's call API (docs/telco.md): outbound dials from carrier numbers, hang-up and
   * transfer of stream calls. Undefined: streams are only closed, dials need a SIP trunk.
   */
  carrier?: { client: CarrierClient; tokens: StreamTokens; publicUrl: string; ringTimeoutSecs: number; watchdogSlackMs?: number } | undefined;
}

/** Retry-After of the 503 over bridge.max_calls: calls last minutes, but capacity frees up call by call. */
const LIMIT_RETRY_AFTER_SECS = 5;

export class CallBridge {
  readonly #o: CallBridgeOptions;
  readonly #calls = new Set<BridgeCore>();
  readonly #ticker: MediaTicker;
  readonly #dialTransfer: DialTransfer;
  readonly #records: CallRecordWriter;
  readonly #carrierDials: CarrierDials | undefined;
  /** Live carrier stream legs by CallSid, for the carrier's status callbacks. */
  readonly #streamLegs = new Map<string, { accountSid: string; leg: MediaStreamCallLeg }>();

  constructor(options: CallBridgeOptions) {
    this.#o = options;
    this.#ticker = options.ticker ?? new MediaTicker();
    this.#dialTransfer = options.dialTransfer ?? trunkTransferDialer(() => options.ua(), options.store, options.logger);
    this.#records = new CallRecordWriter(options.store.calls, options.sessions.recordsCalls, options.logger.child({ component: 'bridge' }));
    const c = options.carrier;
    this.#carrierDials =
      c === undefined
        ? undefined
        : new CarrierDials({ store: options.store, sessions: options.sessions, records: this.#records, client: c.client, tokens: c.tokens, publicUrl: c.publicUrl, ringTimeoutSecs: c.ringTimeoutSecs, log: options.logger, metrics: options.metrics, watchdogSlackMs: c.watchdogSlackMs });
  }

  /** Calls being bridged now. */
  get active(): number {
    return this.#calls.size;
  }

  /** Whether one more call fits under bridge.max_calls (the carrier webhook rejects busy otherwise). */
  get hasRoom(): boolean {
    return this.#overLimit(undefined) === undefined;
  }

  /**
   * Admission of a routed inbound INVITE before it rings (SipUserAgent.onInboundCall's `admit`):
   * over bridge.max_calls 503 with Retry-After (RFC 3261 21.5.4: the whole service is busy, try
   * later), over bridge.max_calls_per_trunk 486 Busy Here (21.4.24: this trunk is); the UAS sends
   * either before any 18x, so the caller hears no ringing that ends in a refusal.
   */
  admit(route: Pick<InboundRoute, 'trunkId'>): AdmissionRefusal | undefined {
    const over = this.#overLimit(route.trunkId);
    if (over === undefined) return undefined;
    this.#o.metrics?.failure(`limit_${over}`);
    const l = this.#o.limits!;
    return over === 'global'
      ? { status: 503, reason: 'Too many calls', retryAfter: LIMIT_RETRY_AFTER_SECS, why: `the concurrent call limit bridge.max_calls (${l.maxCalls}) is reached` }
      : { status: 486, reason: 'Trunk busy', why: `the concurrent call limit of trunk ${route.trunkId} (bridge.max_calls_per_trunk ${l.maxCallsPerTrunk}) is reached` };
  }

  /** Takes a routed inbound call (SipUserAgent.onInboundCall): rings until the session is up. */
  handleInbound(call: SipCall): void {
    // admit() refused calls over the limits before they rang; this catches the few admitted
    // meanwhile (between admission and delivery the UAS allocates RTP ports, which may await).
    const over = this.#overLimit(call.route?.trunkId);
    if (over !== undefined) {
      this.#o.logger.warn({ callId: call.id, from: call.from, to: call.to, trunkId: call.route?.trunkId, limit: over }, `INVITE refused: ${over} concurrent call limit reached`);
      this.#o.metrics?.failure(`limit_${over}`);
      // RFC 3261 21.5.4 / 21.4.24: 503 with Retry-After for the whole service, 486 for one trunk.
      if (over === 'global') call.reject(503, 'Too many calls', [['Retry-After', String(LIMIT_RETRY_AFTER_SECS)]]);
      else call.reject(486, 'Trunk busy');
      return;
    }
    // Counted at once (#track); what it routes to is read from the store meanwhile.
    const core = this.#track(call);
    void core.start(this.#inboundVariables(call).then((variables) => inboundSession(this.#o.store.agents, this.#o.sessions, call, variables)));
  }

  /**
   * The session variables of a routed inbound call (call-variables.ts). The trunk is read within
   * the route's organization, so no other organization's header_variables can apply.
   */
  async #inboundVariables(call: SipCall): Promise<ReturnType<typeof callVariables>> {
    const route = call.route;
    if (route === undefined) return [];
    const trunk = await this.#o.store.sipTrunks.get(route.orgId, route.trunkId);
    return callVariables({ callerNumber: call.from, calledNumber: route.number, trunk, header: (name) => call.inviteHeader(name) });
  }

  /**
   * Takes a carrier media stream whose one-time token was checked (src/telco/twilio-stream-socket.ts):
   * an inbound call the voice webhook routed, or the answered call of an outbound carrier dial
   * (its session exists: attached, not opened). Bridged by the same core as a SIP call, through a
   * MediaStreamCallLeg, its media on this thread, hung up and transferred through the carrier's
   * call API (carrier-call-control.ts). Its record is source twilio with the carrier's CallSid; it
   * is recorded like a SIP call (bridge.recording).
   */
  handleMediaStream(stream: StartedStream): StreamSink {
    const { grant, streamSid, transport } = stream;
    const outbound = grant.outbound !== undefined ? this.#carrierDials?.streamStarted(grant.outbound.callId, grant.callSid) : undefined;
    const log = outbound?.log ?? this.#o.logger.child({ component: 'bridge', callId: streamSid });
    const carrier = this.#o.carrier;
    const control = carrier && carrierCallControl(carrier.client, this.#o.store.telcoNumbers, { orgId: grant.orgId, numberId: grant.numberId, callSid: grant.callSid }, log);
    const leg = new MediaStreamCallLeg({
      id: streamSid,
      from: grant.from,
      to: grant.to,
      route: { orgId: grant.orgId, agentId: grant.agentId, trunkId: null },
      transport,
      ticker: this.#ticker,
      log,
      direction: grant.outbound !== undefined ? 'outbound' : 'inbound',
      control,
    });
    this.#streamLegs.set(grant.callSid, { accountSid: grant.accountSid, leg });
    leg.onHangup(() => this.#streamLegs.delete(grant.callSid));
    if (grant.outbound !== undefined) {
      // The dial counted against the limits while it rang; its pending entry is gone now.
      if (outbound === undefined) {
        log.warn({ callSid: grant.callSid }, 'media stream of an outbound call that is no longer pending: closed');
        leg.refuse('agent_unavailable', 'call no longer pending');
        return leg;
      }
      this.#core(leg, log, (url, recording, events) => openVoiceLink(undefined, url, recording, events), undefined).attach(outbound.callId, outbound.connectUrl);
      return leg;
    }
    const over = this.#overLimit(undefined);
    if (over !== undefined) {
      log.warn({ limit: over }, 'media stream refused: concurrent call limit reached');
      this.#o.metrics?.failure(`limit_${over}`);
      leg.refuse('service_unavailable', 'too many calls');
      return leg;
    }
    const base = this.#o.sessions;
    const sessions: SessionOpener = { recordsCalls: base.recordsCalls, open: (input) => base.open({ ...input, source: 'twilio', carrierCallId: grant.callSid }) };
    // caller_number and called_number, as for a SIP call (no trunk on this path).
    const variables = callVariables({ callerNumber: grant.from, calledNumber: grant.to });
    void this.#core(leg, log, (url, recording, events) => openVoiceLink(undefined, url, recording, events), undefined).start(inboundSession(this.#o.store.agents, sessions, leg, variables));
    return leg;
  }

  /**
   * POST /v1/agents/{id}/dial from an agent's carrier number, through the carrier's call API
   * (carrier-dial.ts). @throws DomainError (503 not configured, 429 over a limit, 404, 400, 502).
   */
  async dialCarrier(req: CarrierDialRequest): Promise<{ callId: string }> {
    const dials = this.#carrierDials;
    if (dials === undefined) throw unavailable('the carrier call API is not configured on this daemon');
    const over = this.#overLimit(undefined);
    if (over !== undefined) {
      this.#o.metrics?.failure(`limit_${over}`);
      throw tooMany('too many calls in progress: try again later');
    }
    return dials.dial(req);
  }

  /** A verified carrier status callback (src/telco/twilio-call-status.ts): a ringing dial's progress, or a stream call's end. */
  carrierStatus(update: CarrierCallStatus): void {
    if (this.#carrierDials?.status(update)) return;
    const live = this.#streamLegs.get(update.callSid);
    if (live === undefined || live.accountSid !== update.accountSid) return;
    if (update.progress.kind === 'ended') live.leg.carrierEnded(update.progress.status);
  }

  /** Resolves once the call record writes issued so far are made (before the store closes). */
  recordsWritten(): Promise<void> {
    return this.#records.settled();
  }

  /** Ends the carrier dials still ringing (the daemon stops). */
  closeCarrierDials(): void {
    this.#carrierDials?.close();
  }

  /** A SIP call as a bridged call, counted until it finishes. */
  #track(call: SipCall): BridgeCore {
    const log = this.#o.logger.child({ component: 'bridge', callId: call.id });
    return this.#core(new SipCallLeg(call, this.#ticker, log), log, (url, recording, events) => openVoiceLink(call.rtp, url, recording, events), sipTransferFallback(call, this.#dialTransfer));
  }

  /** Any leg as a bridged call, counted until it finishes. */
  #core(leg: CallLeg, log: Logger, openLink: BridgeCoreOptions['openLink'], transferFallback: BridgeCoreOptions['transferFallback']): BridgeCore {
    const core = new BridgeCore({
      leg,
      log,
      openLink,
      records: this.#records,
      recorder: this.#o.recorder,
      metrics: this.#o.metrics,
      transferFallback,
      connectTimeoutMs: this.#o.connectTimeoutMs,
      sendSilence: this.#o.sendSilence,
      onDone: (done) => this.#calls.delete(done),
    });
    this.#calls.add(core);
    return core;
  }

  /** Which limit a new call on `trunkId` would exceed, if any. */
  #overLimit(trunkId: string | undefined): 'global' | 'trunk' | undefined {
    const l = this.#o.limits;
    if (l === undefined) return undefined;
    // Carrier dials ringing are calls too: their streams will need the room.
    if (l.maxCalls > 0 && this.#calls.size + (this.#carrierDials?.pending ?? 0) >= l.maxCalls) return 'global';
    if (l.maxCallsPerTrunk > 0 && trunkId !== undefined) {
      let n = 0;
      for (const c of this.#calls) if (c.trunkId === trunkId) n++;
      if (n >= l.maxCallsPerTrunk) return 'trunk';
    }
    return undefined;
  }

  /**
   * Places an outbound call through a SIP trunk for an agent (POST /v1/agents/{id}/dial). The
   * session record (direction outbound, the call record) exists when this returns; the call
   * rings in the background, and is bridged when answered, or its record ends with busy,
   * no_answer or failed.
   * @throws DomainError (404, 400, 503) when the call cannot be placed at all.
   */
  async dial(req: OutboundDial): Promise<{ callId: string }> {
    const ua = this.#o.ua();
    if (ua === undefined || !ua.listening) throw unavailable('outbound calling needs the SIP user agent (sip.enabled is false, or it is draining)');
    const trunk = await outboundTrunkFromStore(this.#o.store, req.orgId, req.sipTrunkId);
    if (trunk === undefined) throw notFound('sip trunk');
    if (!canCallThrough(trunk)) {
      throw validation(`SIP trunk "${trunk.name}" has no outbound_host, and no PBX is registered on it: set outbound_host, or let the PBX REGISTER with the trunk's inbound_sip_username`);
    }
    const over = this.#overLimit(trunk.id);
    if (over !== undefined) {
      this.#o.metrics?.failure(`limit_${over}`);
      throw tooMany(over === 'global' ? 'too many calls in progress: try again later' : `too many calls in progress on SIP trunk "${trunk.name}": try again later`);
    }
    const agent = await this.#o.store.agents.get(req.orgId, req.agentId);
    if (agent === undefined || agent.status !== 'active') throw notFound('active agent');
    const { sessionId, connectUrl } = await this.#o.sessions.open({
      orgId: req.orgId,
      agentId: agent.id,
      versionId: agent.active_version_id,
      callerId: req.callerId,
      callTo: req.number,
      direction: 'outbound',
      sipTrunkId: trunk.id,
      firstMessage: req.firstMessage ?? null,
      prompt: req.prompt ?? null,
      // Ours (caller_number, called_number, trunk_id, trunk_name) under the user's, which win.
      variables: withCallVariables(callVariables({ callerNumber: req.callerId, calledNumber: req.number, trunk: { id: trunk.id, name: trunk.name, header_variables: [] } }), req.variables),
    });
    const log = this.#o.logger.child({ component: 'bridge', sessionId });
    log.info({ trunk: trunk.name, to: req.number }, 'placing outbound call');
    void ua.dial({ trunk, to: req.number, callerId: req.callerId }).then(
      (result) => {
        if (!result.ok) {
          this.#o.metrics?.failure(`dial_${result.reason}`);
          this.#records.failedDial(sessionId, result.reason, result.status);
          log.info({ reason: result.reason, status: result.status }, 'outbound call not answered');
          return;
        }
        this.#track(result.call).attach(sessionId, connectUrl);
      },
      (err: unknown) => {
        log.error({ err }, 'outbound call failed');
        this.#records.failedDial(sessionId, 'unreachable');
      },
    );
    return { callId: sessionId };
  }
}
