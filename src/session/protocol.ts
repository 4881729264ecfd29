/**
 * The voice WebSocket protocol of the API document (Events), with the payloads DESIGN.md fixes
 * where the document leaves them open. Every message is `{ "type": string, "data": object }`.
 *
 * Server events are built by the runtime and serialized here; `response_audio` and
 * `input_audio` carry base64 PCM16 mono 24 kHz.
 */

import type { MachineDetectionOutcome } from '../domain/call.ts';

/**
 * Why a session ended (DESIGN.md: `session_ended` data `{ reason }`). machine_detected and voicemail_left are ours (docs/machine-detection.md): answering-machine
 * detection runs only on outbound phone sessions, which only the call bridge opens, so a
 * WebSocket client of the public protocol never receives them.
 */
export type SessionEndReason = 'agent_hangup' | 'client_closed' | 'timeout' | 'silence_timeout' | 'transfer' | 'error' | 'machine_detected' | 'voicemail_left';

export interface ToolCallArgument {
  name: string;
  type: 'static' | 'resolved';
  dataType: string;
  description: string;
  required: boolean;
  value: unknown;
}

export type ServerEvent =
  | { type: 'session_started'; data: { id: string } }
  | { type: 'response_audio'; data: { turn_id: string; audio: string; is_final: boolean } }
  | { type: 'response_text'; data: { turn_id: string; text: string; is_final: boolean } }
  | { type: 'input_audio_transcript'; data: { transcript: string; turn_id?: string; is_final: boolean } }
  | { type: 'speech_started'; data: { emulated: boolean } }
  | { type: 'speech_stopped'; data: Record<string, never> }
  | { type: 'session_ended'; data: { reason: SessionEndReason; transfer_number?: string } }
  | { type: 'interruption'; data: Record<string, never> }
  | { type: 'tool_call'; data: { toolCallId: string; toolName: string; arguments: ToolCallArgument[] } }
  /**
   * Extension (not in the API document; docs/decisions.md): keys the agent sends into the call
   * (IVRs). Only phone sessions (direction inbound/outbound) offer the model the tool that sends
   * it, so WebSocket clients of the public protocol never receive it.
   */
  | { type: 'dtmf'; data: { digits: string } }
  /**
   * Extension (docs/machine-detection.md): answering-machine detection decided, on an outbound
   * phone session that asked for it (so only the call bridge receives it).
   */
  | { type: 'machine_detection'; data: MachineDetectionOutcome };

export type ServerEventType = ServerEvent['type'];

export type ClientEvent =
  | { type: 'input_audio'; data: { audio: string } }
  | { type: 'tool_call_output'; data: { toolCallId: string; output: string } }
  /** Extension: a key the caller pressed (sent by the call bridge; docs/decisions.md). */
  | { type: 'dtmf'; data: { digit: string } };

/**
 * A server event as one JSON text. `response_audio` is built as a string: base64 needs no JSON
 * escaping and this is about 3x cheaper than JSON.stringify of the object (DESIGN.md, media
 * measurements); everything else goes through JSON.stringify.
 */
export function serializeServerEvent(event: ServerEvent): string {
  if (event.type === 'response_audio') {
    const d = event.data;
    return `{"type":"response_audio","data":{"turn_id":${JSON.stringify(d.turn_id)},"audio":"${d.audio}","is_final":${d.is_final}}}`;
  }
  return JSON.stringify(event);
}

/** WebSocket close codes used by the session server (RFC 6455 7.4.1 and DESIGN.md). */
export const CLOSE = {
  /** The session ended normally (agent hangup, timeout, transfer, client close). */
  NORMAL: 1000,
  /** The daemon is shutting down. */
  GOING_AWAY: 1001,
  /** A binary frame: the protocol is JSON text only. */
  UNSUPPORTED: 1003,
  /** Malformed JSON, missing fields, audio that is not base64 or has an odd byte count. */
  INVALID_PAYLOAD: 1007,
  /** The token was used by another connection first, or the client stopped reading. */
  POLICY_VIOLATION: 1008,
  /** A frame over 1 MiB. */
  TOO_BIG: 1009,
  /** The runtime failed (session_ended reason error was sent first). */
  INTERNAL_ERROR: 1011,
} as const;

/** Largest client frame accepted (DESIGN.md): larger ones close the socket with 1009. */
export const MAX_CLIENT_FRAME_BYTES = 1024 * 1024;
