/**
 * The carrier's entry points of the bridge (docs/telco.md): the voice webhook's limit check, a
 * carrier media stream (an inbound call on an imported number, or the answered call of an
 * outbound carrier dial), outbound dials through the carrier's call API (carrier-dial.ts), and
 * the carrier's status callbacks. A stream becomes a bridged call in the registry
 * (bridged-calls.ts) over a MediaStreamCallLeg, hung up and transferred through the call API
 * (carrier-call-control.ts).
 *
 * Apart from the SIP entry points (sip-calls.ts) because it reads the carrier's identifiers
 * (CallSid, stream grants, account) and keeps the carrier's own state: the dials ringing and the
 * stream legs live here, by CallSid, for the status callbacks.
 */
import { tooMany, unavailable } from '../domain/errors.ts';
import type { Logger } from '../log.ts';
import type { MediaTicker } from '../media/media-ticker.ts';
import type { Store } from '../store/index.ts';
import type { CarrierClient } from '../telco/carrier-client.ts';
import type { CarrierCallStatus } from '../telco/twilio-call-status.ts';
import type { StartedStream, StreamSink } from '../telco/twilio-stream-socket.ts';
import { DEFAULT_STREAM_TOKEN_TTL_MS, type StreamTokens } from '../telco/twilio-stream-tokens.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import type { BridgedCalls } from './bridged-calls.ts';
import { carrierCallControl } from './carrier-call-control.ts';
import { CarrierDials, DIAL_STORE_CHECK_MS, type CarrierDialRequest } from './carrier-dial.ts';
import type { CallRecordWriter } from './call-record-writer.ts';
import { callVariables } from './call-variables.ts';
import { inboundSession } from './inbound-session.ts';
import { MediaStreamCallLeg } from './media-stream-call-leg.ts';
import type { SessionOpener } from './session-opener.ts';
import { openVoiceLink } from './voice-link.ts';

/** The carrier's call API and where it reaches us (CallBridgeOptions.carrier). */
export interface CarrierApi {
  client: CarrierClient;
  tokens: StreamTokens;
  publicUrl: string;
  ringTimeoutSecs: number;
  watchdogSlackMs?: number;
  /** How long the voice webhook's stream tokens are valid (the tokens' own TTL): its slot reservations last as long, plus a margin. */
  streamTokenTtlMs?: number;
}

export interface CarrierStreamsOptions {
  store: Store;
  sessions: SessionOpener;
  logger: Logger;
  calls: BridgedCalls;
  records: CallRecordWriter;
  ticker: MediaTicker;
  metrics?: BridgeMetrics | undefined;
  /** Undefined: streams are only closed, dials need a SIP trunk. */
  carrier?: CarrierApi | undefined;
}

/** The call slot the voice webhook reserves for a carrier call's stream: one per CallSid, whichever node reserves or adopts it. */
const streamSlotKey = (callSid: string) => `twilio-stream:${callSid}`;
/** A reservation outlives the stream token it was made with by this much (a stream then can no longer start). */
const RESERVATION_SLACK_MS = 5000;

export class CarrierStreams {
  readonly #o: CarrierStreamsOptions;
  readonly #dials: CarrierDials | undefined;
  /** Live carrier stream legs by CallSid, for the carrier's status callbacks. */
  readonly #legs = new Map<string, { accountSid: string; leg: MediaStreamCallLeg }>();

  constructor(options: CarrierStreamsOptions) {
    this.#o = options;
    const c = options.carrier;
    this.#dials =
      c === undefined
        ? undefined
        : new CarrierDials({
            store: options.store,
            sessions: options.sessions,
            records: options.records,
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

  /** Carrier dials placed here and ringing (they count against bridge.max_calls). */
  get pendingDials(): number {
    return this.#dials?.pending ?? 0;
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
    if (this.#o.calls.full()) return 'bridge.max_calls';
    const r = await this.#o.calls.slots.reserve(orgId, streamSlotKey(callSid), (this.#o.carrier?.streamTokenTtlMs ?? DEFAULT_STREAM_TOKEN_TTL_MS) + RESERVATION_SLACK_MS);
    return r?.refused === 'org' ? 'bridge.max_calls_per_org' : undefined;
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
    const calls = this.#o.calls;
    const outbound = grant.outbound;
    // A dial placed here is no longer pending; one placed by another node is attached here all the same.
    const placedHere = outbound !== undefined ? this.#dials?.streamStarted(outbound.callId, grant.callSid) : undefined;
    const log = placedHere?.log ?? this.#o.logger.child(outbound !== undefined ? { component: 'bridge', callId: outbound.callId, orgId: grant.orgId, callSid: grant.callSid } : { component: 'bridge', callId: streamSid });
    const carrier = this.#o.carrier;
    const control = carrier && carrierCallControl(carrier.client, this.#o.store.telcoNumbers, { orgId: grant.orgId, numberId: grant.numberId, callSid: grant.callSid }, log);
    const leg = new MediaStreamCallLeg({
      id: streamSid,
      from: grant.from,
      to: grant.to,
      route: { orgId: grant.orgId, agentId: grant.agentId, trunkId: null },
      transport,
      ticker: this.#o.ticker,
      log,
      direction: outbound !== undefined ? 'outbound' : 'inbound',
      control,
    });
    this.#legs.set(grant.callSid, { accountSid: grant.accountSid, leg });
    leg.onHangup(() => this.#legs.delete(grant.callSid));
    const openLink = (url: string, recording: boolean, events: Parameters<typeof openVoiceLink>[3], headers: Record<string, string>) => openVoiceLink(undefined, url, recording, events, headers);
    if (outbound !== undefined) {
      // The grant was redeemed, so the dial had not ended: its session (opened by the placing
      // node) is attached through this node's own session opener, with the grant's connect token.
      if (placedHere === undefined) log.info('media stream of an outbound carrier call placed by another node: its session is attached here');
      const core = calls.bridge(leg, log, openLink, undefined);
      core.attach(outbound.callId, this.#o.sessions.connectUrl(outbound.sessionToken));
      // Counted (not refused: it is answered; the dial was checked when it was placed).
      calls.slots.acquire(grant.orgId, null, true).then(
        (r) => 'held' in r && calls.hold(core, r.held),
        (err: unknown) => log.warn({ err }, 'counting the call against bridge.max_calls_per_org failed'),
      );
      return leg;
    }
    if (calls.full()) {
      log.warn({ limit: 'global' }, 'media stream refused: concurrent call limit reached');
      calls.refusedBy('global');
      leg.refuse('service_unavailable', 'too many calls');
      return leg;
    }
    const base = this.#o.sessions;
    const sessions: SessionOpener = { recordsCalls: base.recordsCalls, open: (input) => base.open({ ...input, source: 'twilio', carrierCallId: grant.callSid }), connectUrl: (token) => base.connectUrl(token) };
    // caller_number and called_number, as for a SIP call (no trunk on this path).
    const variables = callVariables({ callerNumber: grant.from, calledNumber: grant.to });
    const core = calls.bridge(leg, log, openLink, undefined);
    // The slot the voice webhook reserved for this call (on any node), else one taken now.
    void core.start(calls.holding(core, calls.slots.adopt(grant.orgId, streamSlotKey(grant.callSid)), () => inboundSession(this.#o.store.agents, sessions, leg, variables)));
    return leg;
  }

  /**
   * POST /v1/agents/{id}/dial from an agent's carrier number, through the carrier's call API
   * (carrier-dial.ts). @throws DomainError (503 not configured, 429 over a limit, 404, 400, 502).
   */
  async dial(req: CarrierDialRequest): Promise<{ callId: string }> {
    const dials = this.#dials;
    if (dials === undefined) throw unavailable('the carrier call API is not configured on this daemon');
    const calls = this.#o.calls;
    if (calls.full()) {
      calls.refusedBy('global');
      throw tooMany('too many calls in progress: try again later');
    }
    // A look: the answered call's stream takes its slot (handleMediaStream).
    if ((await calls.slots.wouldRefuse(req.orgId, null)) !== undefined) {
      calls.refusedBy('org');
      throw tooMany('too many calls in progress for this organization: try again later');
    }
    return dials.dial(req);
  }

  /**
   * A verified carrier status callback (src/telco/twilio-call-status.ts): a ringing dial's
   * progress (placed here, or by another node: read from the store), or a stream call's end.
   */
  async status(update: CarrierCallStatus): Promise<void> {
    if (await this.#dials?.status(update)) return;
    const live = this.#legs.get(update.callSid);
    if (live !== undefined) {
      if (live.accountSid === update.accountSid && update.progress.kind === 'ended') live.leg.carrierEnded(update.progress.status);
      return;
    }
    await this.#dials?.statusElsewhere(update);
  }

  /** Resolves once the dials' give-ups under way are done. */
  settled(): Promise<void> {
    return this.#dials?.settled() ?? Promise.resolve();
  }

  /** Ends the carrier dials still ringing (the daemon stops). */
  closeDials(): void {
    this.#dials?.close();
  }
}
