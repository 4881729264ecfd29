/**
 * The registry of a daemon's bridged calls and their concurrent-call limits: every call leg the
 * bridge takes (a SIP call in or out, a carrier media stream) becomes a BridgeCore here, is
 * counted until it finishes, and holds its call slot (call-slots.ts) until then.
 *
 *   bridge.max_calls                 this node's count, in memory: full(), admit() -> 503
 *   bridge.max_calls_per_trunk/_org  the store's count across nodes (CallSlots): admit() -> 486
 *
 * Kept apart from the entry points (sip-calls.ts, carrier-streams.ts) because it is the one
 * thing they share: each asks it whether a call fits and hands it the call; and because the
 * limits' rules (which refusal, when a slot goes back) can be tested here without a SIP peer.
 */
import type { Logger } from '../log.ts';
import type { LiveCallMedia } from '../domain/live-call.ts';
import type { AdmissionRefusal, InboundRoute } from '../sip/ua/index.ts';
import { BridgeCore, type BridgeCoreOptions, type CallRecorderSink } from './bridge-core.ts';
import type { BridgeMetrics } from './bridge-metrics.ts';
import type { CallLeg } from './call-leg.ts';
import type { CallRecordWriter } from './call-record-writer.ts';
import type { CallSlots, HeldSlot, SlotResult } from './call-slots.ts';
import type { InboundSession } from './inbound-session.ts';
import type { TurnAudioReports } from '../session/turn-audio.ts';

/** Retry-After of the 503 over bridge.max_calls: calls last minutes, but capacity frees up call by call. */
export const LIMIT_RETRY_AFTER_SECS = 5;

export interface BridgedCallsOptions {
  /** The per-trunk and per-organization limits, counted in the store or in memory (call-slots.ts). */
  slots: CallSlots;
  /** bridge.max_calls: this node's limit (0 = none). */
  maxCalls: number;
  /** Calls not bridged yet that will need room on this node (carrier dials ringing). */
  pendingCalls?: () => number;
  records: CallRecordWriter;
  metrics?: BridgeMetrics | undefined;
  /** A recorder per bridged call (undefined: recording off). */
  recorder?: ((callId: string) => CallRecorderSink | undefined) | undefined;
  /** A session not started within this is given up (default 10 s, bridge-core.ts). */
  connectTimeoutMs?: number | undefined;
  /** Encoded silence while the agent is quiet; default true. */
  sendSilence?: boolean | undefined;
  /** Where each agent turn's first RTP packet is reported (docs/latency.md). */
  turnAudio?: TurnAudioReports | undefined;
}

export class BridgedCalls {
  readonly #o: BridgedCallsOptions;
  readonly #calls = new Set<BridgeCore>();
  /** Slots taken by admit() for INVITEs not delivered yet, by their route object. */
  readonly #admitted = new Map<object, HeldSlot>();
  /** The slot each bridged call holds until it is done. */
  readonly #held = new Map<BridgeCore, HeldSlot>();

  constructor(options: BridgedCallsOptions) {
    this.#o = options;
  }

  /** The per-trunk and per-organization slots (the entry points reserve, adopt and look with them). */
  get slots(): CallSlots {
    return this.#o.slots;
  }

  /** Calls being bridged now. */
  get active(): number {
    return this.#calls.size;
  }

  /** The calls whose media runs now, with their figures so far. */
  live(): LiveCallMedia[] {
    const live: LiveCallMedia[] = [];
    for (const core of this.#calls) {
      const media = core.live();
      if (media !== undefined) live.push(media);
    }
    return live;
  }

  /** Whether this node is at bridge.max_calls (counted here, not in the store). */
  full(): boolean {
    const max = this.#o.maxCalls;
    // Carrier dials ringing are calls too: their streams will need the room.
    return max > 0 && this.#calls.size + (this.#o.pendingCalls?.() ?? 0) >= max;
  }

  /** Counts a refusal by a limit (`global`, or the slots' `trunk` / `org`) in the metrics. */
  refusedBy(limit: 'global' | 'trunk' | 'org'): void {
    this.#o.metrics?.failure(`limit_${limit}`);
  }

  /**
   * Admission of a routed inbound INVITE before it rings (SipUserAgent.onInboundCall's `admit`):
   * over bridge.max_calls 503 with Retry-After (RFC 3261 21.5.4: the whole service is busy, try
   * later), over bridge.max_calls_per_trunk or bridge.max_calls_per_org 486 Busy Here (21.4.24:
   * this trunk, or this organization, is); the UAS sends either before any 18x, so the caller
   * hears no ringing that ends in a refusal. The call slot taken here (the store's count, across
   * nodes) is the call's once it is delivered (takeAdmitted), or given back by admissionLapsed.
   */
  admit(route: Pick<InboundRoute, 'trunkId' | 'orgId'>): AdmissionRefusal | undefined | Promise<AdmissionRefusal | undefined> {
    if (this.full()) {
      this.refusedBy('global');
      return { status: 503, reason: 'Too many calls', retryAfter: LIMIT_RETRY_AFTER_SECS, why: `the concurrent call limit bridge.max_calls (${this.#o.maxCalls}) is reached` };
    }
    if (!this.#o.slots.applies(route.trunkId)) return undefined;
    return this.#o.slots.acquire(route.orgId, route.trunkId).then((r): AdmissionRefusal | undefined => {
      if ('refused' in r) {
        this.refusedBy(r.refused);
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

  /** The slot admit() took for a delivered call's route (undefined: none was taken), now the caller's to hold or release. */
  takeAdmitted(route: object): HeldSlot | undefined {
    const held = this.#admitted.get(route);
    this.#admitted.delete(route);
    return held;
  }

  /** Any leg as a bridged call, counted until it finishes (then its slot, if any, goes back). */
  bridge(leg: CallLeg, log: Logger, openLink: BridgeCoreOptions['openLink'], transferFallback: BridgeCoreOptions['transferFallback']): BridgeCore {
    const core = new BridgeCore({
      leg,
      log,
      openLink,
      records: this.#o.records,
      recorder: this.#o.recorder,
      metrics: this.#o.metrics,
      transferFallback,
      connectTimeoutMs: this.#o.connectTimeoutMs,
      sendSilence: this.#o.sendSilence,
      turnAudio: this.#o.turnAudio,
      onDone: (done) => {
        this.#calls.delete(done);
        this.#held.get(done)?.release();
        this.#held.delete(done);
      },
    });
    this.#calls.add(core);
    return core;
  }

  /** The core holds the slot until it is done (at once when it is done already). */
  hold(core: BridgeCore, held: HeldSlot): void {
    if (this.#calls.has(core)) this.#held.set(core, held);
    else held.release();
  }

  /**
   * The session of a call once its slot is held by the core (given back when the core is done),
   * or a busy refusal when the call's trunk or organization is at its limit.
   */
  async holding(core: BridgeCore, slot: Promise<SlotResult>, session: () => Promise<InboundSession>): Promise<InboundSession> {
    const r = await slot;
    if ('refused' in r) {
      this.refusedBy(r.refused);
      return { refuse: 'busy', why: r.why };
    }
    this.hold(core, r.held);
    return session();
  }
}
