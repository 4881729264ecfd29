/**
 * One call leg as the bridge core sees it, whatever carries it: a SIP call (sip-call-leg.ts), and
 * later a carrier's media stream. The core needs only this surface, so a second transport is one
 * more adapter, not a second bridge:
 *
 *   answer / refuse / hang up          the leg's life, as the session allows it
 *   startMedia -> BridgeMedia          caller frames in (20 ms, 24 kHz), agent audio out
 *   onDtmf / sendDtmf                  keys both ways
 *   transfer                           hand the caller to another number
 *   onHangup, quality                  how it ended, and its reception figures for the call's log line
 *
 * Nothing here names a protocol: refusals are causes, each adapter maps them to its own answer
 * (a SIP status, a carrier's reject reason).
 */
import type { SipDetails } from '../domain/call.ts';
import type { BridgeMedia, BridgeMediaCallbacks } from '../media/bridge-media.ts';

export type LegDirection = 'inbound' | 'outbound';

/** Why the bridge refuses a leg before it is answered. */
export type RefusalCause =
  /** Nothing to bridge to now (no voice session could be opened, or it did not start). */
  | 'service_unavailable'
  /** The agent, or its session, is not there for this call. */
  | 'agent_unavailable'
  /** The leg reached the bridge in a state it cannot handle (a routed call without its route). */
  | 'internal_error'
  /** Its trunk or organization is at its concurrent call limit (bridge.max_calls_per_trunk / _per_org). */
  | 'busy';

/** The agent an inbound leg was routed to. */
export interface LegRoute {
  orgId: string;
  agentId: string;
  /** The trunk the route came through (the session record's sip_trunk_id); null off SIP (a carrier media stream). */
  trunkId: string | null;
}

/** How a leg ended: a stable reason string (call records, logs). */
export interface LegEnd {
  reason: string;
}

/** The leg's reception figures, read when the media did not report its own at the end. */
export interface LegQuality {
  packetsReceived: number;
  packetsLost: number;
  jitterMs: number;
}

export interface LegMediaOptions {
  /** Keep sending encoded silence while the agent is quiet (continuous media). */
  sendSilence: boolean;
  /** Hand each agent frame sent back with the caller frame of the same tick (recording). */
  keepAgentFrames: boolean;
}

export interface CallLeg {
  /** For logs. */
  readonly id: string;
  readonly direction: LegDirection;
  /** The caller's number and the number called. */
  readonly from: string;
  readonly to: string;
  /** Inbound: the routed agent. */
  readonly route: LegRoute | undefined;
  /** The trunk the leg came in or goes out on (per-trunk limits). */
  readonly trunkId: string | undefined;
  readonly state: 'ringing' | 'answered' | 'ended';
  readonly closed: boolean;
  /** The negotiated codec's name, for logs. */
  readonly codec: string;

  /** Answers a ringing inbound leg; false when that is no longer possible. */
  answer(): boolean;
  /** Refuses a ringing leg; `why` goes to the peer where the transport has room for it. */
  refuse(cause: RefusalCause, why: string): void;
  /** Ends the leg (idempotent). */
  hangup(): void;
  /** Once, however the leg ends (including by the bridge's own hangup or refusal). */
  onHangup(listener: (end: LegEnd) => void): void;
  /** Each key the caller presses. */
  onDtmf(listener: (digit: string) => void): void;
  /** Presses one key towards the caller (0-9, A-D, *, #). */
  sendDtmf(digit: string): Promise<void>;
  /** Starts the audio both ways; called once, when the voice session has started. */
  startMedia(options: LegMediaOptions, callbacks: BridgeMediaCallbacks): BridgeMedia;
  /**
   * Hands the caller to `target` through the leg's own transport. Resolves when that attempt is
   * over: the leg is then closed when it worked, still up when it did not. Never rejects.
   */
  transfer(target: string): Promise<void>;
  quality(): LegQuality;
  /**
   * What the transport knows of the call for its trace span (a SIP dialog's Call-ID and final
   * status, a carrier's call sid); read at the start and again at the end. Never a secret.
   */
  traceAttributes?(): Record<string, string | number>;
  /** A SIP leg's Call-ID and the INVITE's final response so far, for the call record; undefined off SIP. */
  sipDetails?(): SipDetails;
}
