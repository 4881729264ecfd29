/** An outbound call as the dial route resolves it and the call bridge places it. */
export interface OutboundDial {
  orgId: string;
  agentId: string;
  sipTrunkId: string;
  /** The number to call (normalized dial string). */
  number: string;
  /** Our caller ID before the trunk's transforms. */
  callerId: string;
  firstMessage?: string | undefined;
  prompt?: string | undefined;
  variables: Array<{ key: string; value: string }>;
  /**
   * Answering-machine detection asked for by an outbound run (docs/outbound.md); absent: none.
   * Carried to the bridge as is: what it does with it is the bridge's.
   */
  machineDetection?: { mode: 'off' | 'hangup' | 'leave_message'; message?: string } | undefined;
}

/** A dial from an agent's imported carrier number through the carrier's call API (no SIP trunk). */
export interface CarrierDialRequest {
  orgId: string;
  agentId: string;
  telcoNumberId: string;
  /** The number to call. */
  number: string;
  firstMessage?: string | undefined;
  prompt?: string | undefined;
  variables: Array<{ key: string; value: string }>;
}
