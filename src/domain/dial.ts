/**
 * Answering-machine detection for one outbound call (ours: docs/machine-detection.md). off: none;
 * hangup: a machine's call ends at once; leave_message: after the machine's beep (or its
 * greeting and a silence) `message` is spoken, its {{variables}} filled in like a first message,
 * and the call ends.
 */
export interface MachineDetectionConfig {
  mode: 'off' | 'hangup' | 'leave_message';
  message?: string | undefined;
}

export const MACHINE_DETECTION_MODES = ['off', 'hangup', 'leave_message'] as const;

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
   * Answering-machine detection asked for by the dial (its machineDetection option) or by an
   * outbound run (docs/outbound.md); absent: none. Carried to the session (docs/machine-detection.md).
   */
  machineDetection?: MachineDetectionConfig | undefined;
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
  machineDetection?: MachineDetectionConfig | undefined;
}
