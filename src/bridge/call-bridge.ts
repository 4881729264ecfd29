/**
 * The daemon's call bridge: what src/main.ts wires. It builds the bridge's parts and hands each
 * entry point to the part whose job it is:
 *
 *   admit(route)         a routed INVITE over a limit is refused before it rings   bridged-calls.ts
 *   handleInbound(call)  a routed inbound SIP call: rings until its session starts  sip-calls.ts
 *   dial(request)        POST /v1/agents/{id}/dial through a SIP trunk              sip-calls.ts
 *   handleMediaStream    a carrier media stream (inbound, or an answered dial)      carrier-streams.ts
 *   dialCarrier(req)     POST /v1/agents/{id}/dial through the carrier's call API   carrier-streams.ts
 *   carrierStatus(u)     the carrier's status callbacks                            carrier-streams.ts
 *
 * Every call, whatever its entry, is a BridgeCore (bridge-core.ts) counted in one registry with
 * the concurrent-call limits (bridged-calls.ts). The bridge is a client of the public voice
 * protocol, like any browser; the call record is the session's record (direction, trunk,
 * from/to), to which the bridge adds what only it knows (call-record-writer.ts).
 */
import type { CarrierDialRequest, OutboundDial } from '../domain/dial.ts';
import type { LiveCallMedia } from '../domain/live-call.ts';
import type { Logger } from '../log.ts';
import { MediaTicker } from '../media/media-ticker.ts';
import type { AdmissionRefusal, InboundRoute, SipCall, SipUserAgent } from '../sip/ua/index.ts';
import type { Store } from '../store/index.ts';
import type { StartedStream, StreamSink } from '../telco/twilio-stream-socket.ts';
import type { CarrierCallStatus } from '../telco/twilio-call-status.ts';
import type { CallRecorderSink } from './bridge-core.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import { BridgedCalls } from './bridged-calls.ts';
import { CallRecordWriter } from './call-record-writer.ts';
import { CallSlots, MemorySlots } from './call-slots.ts';
import { CarrierStreams, type CarrierApi } from './carrier-streams.ts';
import type { SessionOpener } from './session-opener.ts';
import type { TurnAudioReports } from '../session/turn-audio.ts';
import { SipCalls } from './sip-calls.ts';
import { trunkTransferDialer, type DialTransfer } from './sip-transfer-fallback.ts';

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
  carrier?: CarrierApi | undefined;
  /** Where each agent turn's first RTP packet (or carrier media frame) is reported: its audio_out_first (docs/latency.md). */
  turnAudio?: TurnAudioReports;
}

export class CallBridge {
  readonly #records: CallRecordWriter;
  readonly #slots: CallSlots;
  readonly #calls: BridgedCalls;
  readonly #sip: SipCalls;
  readonly #carrier: CarrierStreams;

  constructor(o: CallBridgeOptions) {
    const log = o.logger.child({ component: 'bridge' });
    const ticker = o.ticker ?? new MediaTicker();
    this.#records = new CallRecordWriter(o.store.calls, o.sessions.recordsCalls, log);
    const l = o.limits;
    // PostgreSQL: counted in the database, across nodes; SQLite: one node, counted here (call-slots.ts).
    const counter = o.store.client.dialect === 'postgres' ? o.store.callSlots : new MemorySlots();
    this.#slots = new CallSlots(counter, o.nodeId ?? o.store.nodeId ?? 'local', { maxCallsPerTrunk: l?.maxCallsPerTrunk ?? 0, maxCallsPerOrg: l?.maxCallsPerOrg ?? 0 }, log);
    this.#calls = new BridgedCalls({
      slots: this.#slots,
      maxCalls: l?.maxCalls ?? 0,
      // Carrier dials ringing are calls too: their streams will need the room.
      pendingCalls: () => this.#carrier.pendingDials,
      records: this.#records,
      metrics: o.metrics,
      recorder: o.recorder,
      connectTimeoutMs: o.connectTimeoutMs,
      sendSilence: o.sendSilence,
      turnAudio: o.turnAudio,
    });
    const shared = { store: o.store, sessions: o.sessions, logger: o.logger, calls: this.#calls, records: this.#records, ticker, metrics: o.metrics };
    this.#sip = new SipCalls({ ...shared, ua: () => o.ua(), dialTransfer: o.dialTransfer ?? trunkTransferDialer(() => o.ua(), o.store, o.logger) });
    this.#carrier = new CarrierStreams({ ...shared, carrier: o.carrier });
  }

  /** Calls being bridged now. */
  get active(): number {
    return this.#calls.active;
  }

  /** The calls bridged on this node now, with their media figures so far (GET /v1/calls/live). */
  liveCalls(): LiveCallMedia[] {
    return this.#calls.live();
  }

  /** Call slots this node holds (its calls counted against the per-trunk and per-organization limits). */
  slotsHeld(): Promise<number> {
    return this.#slots.held();
  }

  /** The voice webhook's limit check for a carrier call (CarrierStreams.callLimitReached). */
  callLimitReached(orgId: string, callSid: string): Promise<string | undefined> {
    return this.#carrier.callLimitReached(orgId, callSid);
  }

  /** Admission of a routed inbound INVITE before it rings (BridgedCalls.admit). */
  admit(route: Pick<InboundRoute, 'trunkId' | 'orgId'>): AdmissionRefusal | undefined | Promise<AdmissionRefusal | undefined> {
    return this.#calls.admit(route);
  }

  /** An INVITE admit() admitted ended before it was delivered (SipUserAgent's `lapsed`): its slot goes back. */
  admissionLapsed(route: object): void {
    this.#calls.admissionLapsed(route);
  }

  /** Takes a routed inbound call (SipUserAgent.onInboundCall): rings until the session is up. */
  handleInbound(call: SipCall): void {
    this.#sip.handleInbound(call);
  }

  /** POST /v1/agents/{id}/dial through a SIP trunk (SipCalls.dial). @throws DomainError */
  dial(req: OutboundDial): Promise<{ callId: string }> {
    return this.#sip.dial(req);
  }

  /** Takes a carrier media stream whose one-time token was checked (CarrierStreams.handleMediaStream). */
  handleMediaStream(stream: StartedStream): StreamSink {
    return this.#carrier.handleMediaStream(stream);
  }

  /** POST /v1/agents/{id}/dial through the carrier's call API (CarrierStreams.dial). @throws DomainError */
  dialCarrier(req: CarrierDialRequest): Promise<{ callId: string }> {
    return this.#carrier.dial(req);
  }

  /** A verified carrier status callback (CarrierStreams.status). */
  carrierStatus(update: CarrierCallStatus): Promise<void> {
    return this.#carrier.status(update);
  }

  /** Resolves once the call record writes and slot releases issued so far are made (before the store closes). */
  async recordsWritten(): Promise<void> {
    this.#slots.dropReservations();
    await this.#carrier.settled();
    await Promise.all([this.#records.settled(), this.#slots.settled()]);
  }

  /** Ends the carrier dials still ringing (the daemon stops). */
  closeCarrierDials(): void {
    this.#carrier.closeDials();
  }
}
