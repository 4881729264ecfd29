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
import { inboundSession, type InboundSession } from './inbound-session.ts';
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
import { DEFAULT_STREAM_TOKEN_TTL_MS, type StreamTokens } from '../telco/twilio-stream-tokens.ts';
import { carrierCallControl } from './carrier-call-control.ts';
import { CallSlots, MemorySlots, type HeldSlot, type SlotResult } from './call-slots.ts';
import { CarrierDials, DIAL_STORE_CHECK_MS, type CarrierDialRequest } from './carrier-dial.ts';

export interface CallBridgeOptions {
  store: Store;
  /** Opens each call's voice session (this daemon's own by default; see session-opener.ts). */
  sessions: SessionOpener;
  logger: Logger;
  /** The SIP user agent outbound calls are placed with (undefined: SIP disabled or not started). */
  ua(): SipUserAgent | undefined;
  /** A session not started within this is given up: the call is refused (default 10 s). */
  connectTimeoutMs?: number;
  /**
   * Concurrent call limits (0 = none): over them inbound calls get 503 / 486, dials 429.
   * maxCalls is this node's, counted in memory; the per-trunk and per-organization ones are
   * counted in the store across every node sharing it (call-slots.ts).
   */
  limits?: { maxCalls: number; maxCallsPerTrunk: number; maxCallsPerOrg?: number };
  /** This node's cluster.node_id, on the call slots it takes (default: the store's, else 'local'). */
  nodeId?: string;
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
  carrier?: {
    client: CarrierClient;
    tokens: StreamTokens;
    publicUrl: string;
    ringTimeoutSecs: number;
    watchdogSlackMs?: number;
    /** How long the voice webhook's stream tokens are valid (the tokens' own TTL): its slot reservations last as long, plus a margin. */
    streamTokenTtlMs?: number;
  } | undefined;
}

/** The call slot the voice webhook reserves for a carrier call's stream: one per CallSid, whichever node reserves or adopts it. */
const streamSlotKey = (callSid: string) => `twilio-stream:${callSid}`;
/** A reservation outlives the stream token it was made with by this much (a stream then can no longer start). */
const RESERVATION_SLACK_MS = 5000;

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
  readonly #slots: CallSlots;
  /** Slots taken by admit() for INVITEs not delivered yet, by their route object. */
  readonly #admitted = new Map<object, HeldSlot>();
  /** The slot each bridged call holds until it is done. */
  readonly #held = new Map<BridgeCore, HeldSlot>();

  constructor(options: CallBridgeOptions) {
    this.#o = options;
    this.#ticker = options.ticker ?? new MediaTicker();
    this.#dialTransfer = options.dialTransfer ?? trunkTransferDialer(() => options.ua(), options.store, options.logger);
    this.#records = new CallRecordWriter(options.store.calls, options.sessions.recordsCalls, options.logger.child({ component: 'bridge' }));
    const l = options.limits;
    // PostgreSQL: counted in the database, across nodes; SQLite: one node, counted here (call-slots.ts).
    const counter = options.store.client.dialect === 'postgres' ? options.store.callSlots : new MemorySlots();
    this.#slots = new CallSlots(counter, options.nodeId ?? options.store.nodeId ?? 'local', { maxCallsPerTrunk: l?.maxCallsPerTrunk ?? 0, maxCallsPerOrg: l?.maxCallsPerOrg ?? 0 }, options.logger.child({ component: 'bridge' }));
    const c = options.carrier;
    this.#carrierDials =
      c === undefined
        ? undefined
        : new CarrierDials({
            store: options.store,
            sessions: options.sessions,
            records: this.#records,
            client: c.client,
            tokens: c.tokens,
            publicUrl: c.publicUrl,
            ringTimeoutSecs: c.ringTimeoutSecs,
            log: options.logger,
            metrics: options.metrics,
            watchdogSlackMs: c.watchdogSlackMs,
            // Sharing the store, another node may take a dial placed here (its stream, its end).
            storeCheckMs: options.store.client.dialect === 'postgres' ? DIAL_STORE_CHECK_MS : 0,
          });
  }

  /** Calls being bridged now. */
  get active(): number {
    return this.#calls.size;
  }

  /** Call slots this node holds (its calls counted against the per-trunk and per-organization limits). */
  slotsHeld(): Promise<number> {
    return this.#slots.held();
  }

  /**
   * The carrier's voice webhook for a call of this organization (no trunk): which concurrent call
   * limit it would exceed now, as the setting's name, or undefined when it fits. When it fits
   * and bridge.max_calls_per_org applies, a slot is reserved for the call (bound to its CallSid,
   * across nodes on PostgreSQL) that its media stream adopts on whichever node it starts, and
   * that is freed if no stream comes before the stream token expires. bridge.max_calls, this
   * node's count, is a look: the stream may start on another node.
   */
  async callLimitReached(orgId: string, callSid: string): Promise<string | undefined> {
    if (this.#full()) return 'bridge.max_calls';
    const r = await this.#slots.reserve(orgId, streamSlotKey(callSid), (this.#o.carrier?.streamTokenTtlMs ?? DEFAULT_STREAM_TOKEN_TTL_MS) + RESERVATION_SLACK_MS);
    return r?.refused === 'org' ? 'bridge.max_calls_per_org' : undefined;
  }

  /**
   * Admission of a routed inbound INVITE before it rings (SipUserAgent.onInboundCall's `admit`):
   * over bridge.max_calls 503 with Retry-After (RFC 3261 21.5.4: the whole service is busy, try
   * later), over bridge.max_calls_per_trunk or bridge.max_calls_per_org 486 Busy Here (21.4.24:
   * this trunk, or this organization, is); the UAS sends either before any 18x, so the caller
   * hears no ringing that ends in a refusal. The call slot taken here (the store's count, across
   * nodes) is the call's once it is delivered (handleInbound), or given back by admissionLapsed.
   */
  admit(route: Pick<InboundRoute, 'trunkId' | 'orgId'>): AdmissionRefusal | undefined | Promise<AdmissionRefusal | undefined> {
    if (this.#full()) {
      this.#o.metrics?.failure('limit_global');
      return { status: 503, reason: 'Too many calls', retryAfter: LIMIT_RETRY_AFTER_SECS, why: `the concurrent call limit bridge.max_calls (${this.#o.limits!.maxCalls}) is reached` };
    }
    if (!this.#slots.applies(route.trunkId)) return undefined;
    return this.#slots.acquire(route.orgId, route.trunkId).then((r): AdmissionRefusal | undefined => {
      if ('refused' in r) {
        this.#o.metrics?.failure(`limit_${r.refused}`);
        return { status: 486, reason: r.refused === 'org' ? 'Organization busy' : 'Trunk busy', why: r.why };
      }
      this.#admitted.set(route, r.held);
      return undefined;
    });
  }

  /** An INVITE admit() admitted ended before it was delivered (SipUserAgent's `lapsed`): its slot goes back. */
  admissionLapsed(route: object): void {
    this.#admitted.get(route)?.release();
    this.#admitted.delete(route);
  }

  /** Takes a routed inbound call (SipUserAgent.onInboundCall): rings until the session is up. */
  handleInbound(call: SipCall): void {
    const route = call.route;
    // The slot admit() took for it (none when no per-trunk/per-organization limit applies).
    const admitted = route === undefined ? undefined : this.#admitted.get(route);
    if (route !== undefined) this.#admitted.delete(route);
    // admit() refused calls over bridge.max_calls before they rang; this catches the few admitted
    // meanwhile (between admission and delivery the UAS allocates RTP ports, which may await).
    if (this.#full()) {
      admitted?.release();
      this.#o.logger.warn({ callId: call.id, from: call.from, to: call.to, trunkId: route?.trunkId, limit: 'global' }, 'INVITE refused: global concurrent call limit reached');
      this.#o.metrics?.failure('limit_global');
      // RFC 3261 21.5.4: 503 with Retry-After for the whole service.
      call.reject(503, 'Too many calls', [['Retry-After', String(LIMIT_RETRY_AFTER_SECS)]]);
      return;
    }
    // Counted at once (#track); what it routes to is read from the store meanwhile.
    const core = this.#track(call);
    // A call delivered without admission (none asked) takes its slot now.
    const slot: Promise<SlotResult> = admitted !== undefined ? Promise.resolve({ held: admitted }) : route === undefined ? Promise.resolve({ held: { release: () => undefined } }) : this.#slots.acquire(route.orgId, route.trunkId);
    void core.start(
      this.#holding(core, slot, () => this.#inboundVariables(call).then((variables) => inboundSession(this.#o.store.agents, this.#o.sessions, call, variables))),
    );
  }

  /**
   * The session of a call once its slot is held by the core (given back when the core is done),
   * or a busy refusal when the call's trunk or organization is at its limit.
   */
  async #holding(core: BridgeCore, slot: Promise<SlotResult>, session: () => Promise<InboundSession>): Promise<InboundSession> {
    const r = await slot;
    if ('refused' in r) {
      this.#o.metrics?.failure(`limit_${r.refused}`);
      return { refuse: 'busy', why: r.why };
    }
    this.#hold(core, r.held);
    return session();
  }

  /** The core holds the slot until it is done (at once when it is done already). */
  #hold(core: BridgeCore, held: HeldSlot): void {
    if (this.#calls.has(core)) this.#held.set(core, held);
    else held.release();
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
    const outbound = grant.outbound;
    // A dial placed here is no longer pending; one placed by another node is attached here all the same.
    const placedHere = outbound !== undefined ? this.#carrierDials?.streamStarted(outbound.callId, grant.callSid) : undefined;
    const log = placedHere?.log ?? this.#o.logger.child(outbound !== undefined ? { component: 'bridge', callId: outbound.callId, orgId: grant.orgId, callSid: grant.callSid } : { component: 'bridge', callId: streamSid });
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
      direction: outbound !== undefined ? 'outbound' : 'inbound',
      control,
    });
    this.#streamLegs.set(grant.callSid, { accountSid: grant.accountSid, leg });
    leg.onHangup(() => this.#streamLegs.delete(grant.callSid));
    if (outbound !== undefined) {
      // The grant was redeemed, so the dial had not ended: its session (opened by the placing
      // node) is attached through this node's own session opener, with the grant's connect token.
      if (placedHere === undefined) log.info('media stream of an outbound carrier call placed by another node: its session is attached here');
      const core = this.#core(leg, log, (url, recording, events) => openVoiceLink(undefined, url, recording, events), undefined);
      core.attach(outbound.callId, this.#o.sessions.connectUrl(outbound.sessionToken));
      // Counted (not refused: it is answered; the dial was checked when it was placed).
      this.#slots.acquire(grant.orgId, null, true).then(
        (r) => 'held' in r && this.#hold(core, r.held),
        (err: unknown) => log.warn({ err }, 'counting the call against bridge.max_calls_per_org failed'),
      );
      return leg;
    }
    if (this.#full()) {
      log.warn({ limit: 'global' }, 'media stream refused: concurrent call limit reached');
      this.#o.metrics?.failure('limit_global');
      leg.refuse('service_unavailable', 'too many calls');
      return leg;
    }
    const base = this.#o.sessions;
    const sessions: SessionOpener = { recordsCalls: base.recordsCalls, open: (input) => base.open({ ...input, source: 'twilio', carrierCallId: grant.callSid }), connectUrl: (token) => base.connectUrl(token) };
    // caller_number and called_number, as for a SIP call (no trunk on this path).
    const variables = callVariables({ callerNumber: grant.from, calledNumber: grant.to });
    const core = this.#core(leg, log, (url, recording, events) => openVoiceLink(undefined, url, recording, events), undefined);
    // The slot the voice webhook reserved for this call (on any node), else one taken now.
    void core.start(this.#holding(core, this.#slots.adopt(grant.orgId, streamSlotKey(grant.callSid)), () => inboundSession(this.#o.store.agents, sessions, leg, variables)));
    return leg;
  }

  /**
   * POST /v1/agents/{id}/dial from an agent's carrier number, through the carrier's call API
   * (carrier-dial.ts). @throws DomainError (503 not configured, 429 over a limit, 404, 400, 502).
   */
  async dialCarrier(req: CarrierDialRequest): Promise<{ callId: string }> {
    const dials = this.#carrierDials;
    if (dials === undefined) throw unavailable('the carrier call API is not configured on this daemon');
    if (this.#full()) {
      this.#o.metrics?.failure('limit_global');
      throw tooMany('too many calls in progress: try again later');
    }
    // A look: the answered call's stream takes its slot (handleMediaStream).
    if ((await this.#slots.wouldRefuse(req.orgId, null)) !== undefined) {
      this.#o.metrics?.failure('limit_org');
      throw tooMany('too many calls in progress for this organization: try again later');
    }
    return dials.dial(req);
  }

  /**
   * A verified carrier status callback (src/telco/twilio-call-status.ts): a ringing dial's
   * progress (placed here, or by another node: read from the store), or a stream call's end.
   */
  async carrierStatus(update: CarrierCallStatus): Promise<void> {
    if (await this.#carrierDials?.status(update)) return;
    const live = this.#streamLegs.get(update.callSid);
    if (live !== undefined) {
      if (live.accountSid === update.accountSid && update.progress.kind === 'ended') live.leg.carrierEnded(update.progress.status);
      return;
    }
    await this.#carrierDials?.statusElsewhere(update);
  }

  /** Resolves once the call record writes and slot releases issued so far are made (before the store closes). */
  async recordsWritten(): Promise<void> {
    this.#slots.dropReservations();
    await this.#carrierDials?.settled();
    await Promise.all([this.#records.settled(), this.#slots.settled()]);
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
      onDone: (done) => {
        this.#calls.delete(done);
        this.#held.get(done)?.release();
        this.#held.delete(done);
      },
    });
    this.#calls.add(core);
    return core;
  }

  /** Whether this node is at bridge.max_calls (counted here, not in the store). */
  #full(): boolean {
    const max = this.#o.limits?.maxCalls ?? 0;
    // Carrier dials ringing are calls too: their streams will need the room.
    return max > 0 && this.#calls.size + (this.#carrierDials?.pending ?? 0) >= max;
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
    if (this.#full()) {
      this.#o.metrics?.failure('limit_global');
      throw tooMany('too many calls in progress: try again later');
    }
    const slot = await this.#slots.acquire(req.orgId, trunk.id);
    if ('refused' in slot) {
      this.#o.metrics?.failure(`limit_${slot.refused}`);
      throw tooMany(slot.refused === 'trunk' ? `too many calls in progress on SIP trunk "${trunk.name}": try again later` : 'too many calls in progress for this organization: try again later');
    }
    try {
      return await this.#placeDial(req, trunk, slot.held, ua);
    } catch (err) {
      slot.held.release();
      throw err;
    }
  }

  /** dial() once the call fits: the session, then the call through the trunk; the slot goes with the call. */
  async #placeDial(req: OutboundDial, trunk: NonNullable<Awaited<ReturnType<typeof outboundTrunkFromStore>>>, held: HeldSlot, ua: SipUserAgent): Promise<{ callId: string }> {
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
          held.release();
          this.#o.metrics?.failure(`dial_${result.reason}`);
          void this.#records.failedDial(sessionId, result.reason, result.status);
          log.info({ reason: result.reason, status: result.status }, 'outbound call not answered');
          return;
        }
        const core = this.#track(result.call);
        this.#hold(core, held);
        core.attach(sessionId, connectUrl);
      },
      (err: unknown) => {
        held.release();
        log.error({ err }, 'outbound call failed');
        void this.#records.failedDial(sessionId, 'unreachable');
      },
    );
    return { callId: sessionId };
  }
}
