/**
 * The boundary between the /v1/connection server (src/session/) and whatever runs the
 * conversation behind it (the agent runtime, src/agent/runtime/). The server owns the socket,
 * the token and the session record; the runtime owns the conversation. main.ts injects the
 * runtime factory, so the session layer never imports the agent layer.
 *
 *   client --input_audio--> server --inputAudio(pcm)--> runtime --io.send(event)--> server --> client
 *                                  --toolCallOutput()-->        --io.end(reason)--> session_ended,
 *                                                                                   record, close 1000
 *   end stored by this node --analyze()--> runtime (after the session) --analysis--> record
 */
import type { Agent } from '../domain/agent.ts';
import type { CallAnalysis, MachineDetectionOutcome } from '../domain/call.ts';
import type { MachineDetectionConfig } from '../domain/dial.ts';
import type { ServerEvent, SessionEndReason } from './protocol.ts';

export interface SessionVariable {
  key: string;
  value: string;
}

/** Everything a runtime needs to know about its session, resolved by the server at connect. */
export interface SessionContext {
  /** The session (and call record) id; `session_started.data.id`. */
  sessionId: string;
  orgId: string;
  /** The agent as stored when the socket opened. */
  agent: Agent;
  /** The version the session runs (null: the agent has no published version). */
  versionId: string | null;
  /** The version's flow nodes (tool nodes become client tools); [] without a version. */
  nodes: Array<Record<string, unknown>>;
  callerId: string;
  /** Per-session overrides from the session token request or the dial request. */
  firstMessage?: string;
  prompt?: string;
  variables: SessionVariable[];
  /** The dial's answering-machine detection (outbound sessions; absent: off). */
  machineDetection?: MachineDetectionConfig;
  /** web (a WebSocket client), inbound or outbound (a phone call through the bridge). */
  direction: 'web' | 'inbound' | 'outbound';
  /**
   * Whether the client answers `tool_call` with `tool_call_output`. A web session's client does;
   * a phone call's client is callbridge's own bridge, which has nothing to answer with, so its
   * tool calls go to the organization's webhook endpoint (docs/agent-runtime.md, "Tools").
   */
  clientAnswersTools: boolean;
}

export interface TranscriptEntry {
  role: 'agent' | 'user' | 'tool';
  text: string;
  /** ISO 8601 time the entry was committed. */
  at: string;
  turn_id?: string;
  /** true when an agent turn was cut by barge-in: `text` is only what was actually spoken. */
  interrupted?: boolean;
  /**
   * A tool line: the call (no `toolCallOutput`) or its answer (`toolCallOutput` set), as the
   * call record's `tool_call` and `tool_call_output` entries.
   */
  toolCall?: TranscriptToolCall;
  toolCallOutput?: string;
}

export interface TranscriptToolCall {
  callId: string;
  toolName: string;
  /** The arguments by name, as a JSON string. */
  arguments: string;
  output?: string;
  startedAt: string;
  endedAt?: string;
}

/** What the server gives the runtime. */
export interface SessionIo {
  /** Sends one event to the client (dropped quietly once the socket is closed). */
  send(event: ServerEvent): void;
  /**
   * The runtime ended the session: the server sends `session_ended` with this reason, stores
   * the end (reason, transcript), and closes the socket with 1000. Idempotent.
   */
  end(reason: SessionEndReason, details?: { transferNumber?: string }): void;
}

/** What the runtime gives the server. */
export interface SessionRuntime {
  /**
   * PCM16 mono 24 kHz from the client, any length (the runtime frames it). A view of the
   * server's reused buffer, valid only during the call: copy what you keep.
   */
  inputAudio(pcm: Int16Array): void;
  toolCallOutput(toolCallId: string, output: string): void;
  /** A key the caller pressed (extension message `dtmf`, from the call bridge). */
  dtmf?(digit: string): void;
  /** The transcript so far, for the session record. */
  transcript(): TranscriptEntry[];
  /** What answering-machine detection decided, when it ran (stored with the call's end). */
  machineDetection?(): MachineDetectionOutcome | undefined;
  /** The client went away or the server is closing: stop all work at once. Idempotent. */
  close(): void;
  /**
   * The post-call analysis (summarize_calls). The server asks once, after the session ended and
   * only when this node's end was the one stored (one analysis per call, on the node that ended
   * it), and stores what it resolves. Resolves undefined when there is nothing to analyse (off,
   * an empty transcript); rejects when it failed. `signal` aborts it (daemon shutdown).
   */
  analyze?(signal: AbortSignal): Promise<CallAnalysis | undefined>;
}

/**
 * Builds a session's runtime. `describe`, when present, names the STT, LLM and TTS the session of
 * an agent will use (provider and type, never keys): the session's first log line carries it.
 */
export type SessionRuntimeFactory = ((context: SessionContext, io: SessionIo) => SessionRuntime) & { describe?: (agent: Agent) => Record<string, unknown> };
