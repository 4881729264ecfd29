/**
 * The interfaces every vendor adapter of the agent runtime implements. One small interface per
 * stage (pipecat-like): the runtime (src/agent/runtime/) only ever sees these, so a vendor is
 * added by writing one adapter and one config entry.
 *
 * Audio everywhere in the runtime is PCM16 mono at 24 kHz (the voice protocol's rate), as
 * Int16Array. Adapters that speak another rate to their vendor resample inside the adapter
 * (src/media/resampler.ts).
 *
 * Cancellation: every request takes an AbortSignal. An interruption (barge-in) aborts the
 * signal; the adapter must stop at once: close the HTTP request or socket, stop yielding.
 */

/** The runtime's audio rate. */
export const RUNTIME_SAMPLE_RATE = 24_000;
/** The runtime's frame: 20 ms at 24 kHz. */
export const FRAME_SAMPLES = 480;

// --- speech-to-text ---------------------------------------------------------------------------

export interface Transcript {
  text: string;
  /** false: an interim hypothesis that a later transcript refines. */
  isFinal: boolean;
}

export interface SttOptions {
  /** Agent default_language: `multi`, `en`, `es`, ... (passed to the vendor as is). */
  language: string;
  /** Agent keyterms, boosted where the vendor supports it. */
  keyterms: string[];
}

export interface SttHandlers {
  onTranscript(t: Transcript): void;
  /** A failure of the vendor (connection lost, HTTP error). The stream is unusable afterwards. */
  onError(err: Error): void;
}

/**
 * One session's recognizer. The runtime writes every 20 ms frame of the caller's audio (after
 * noise suppression) while the session lasts, calls `speechStarted()` / `speechEnded()` at the
 * VAD's turn edges, and expects a final transcript of the utterance after `speechEnded()`.
 * Batch providers buffer from speechStarted to speechEnded (plus a little pre-roll) and post
 * it; streaming providers send everything and use speechEnded to ask for a final result.
 */
export interface SttStream {
  write(frame: Int16Array): void;
  speechStarted(): void;
  speechEnded(): void;
  /** Idempotent. No handler is called afterwards. */
  close(): void;
}

export interface SttProvider {
  readonly name: string;
  open(options: SttOptions, handlers: SttHandlers): SttStream;
}

// --- language model ---------------------------------------------------------------------------

export interface ToolCallRequest {
  /** The vendor's id of the call (generated when the vendor gives none). */
  id: string;
  name: string;
  /** The arguments as the model wrote them: a JSON object text. */
  arguments: string;
}

export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  | { role: 'assistant'; content: string; toolCalls?: ToolCallRequest[] }
  | { role: 'tool'; toolCallId: string; name: string; content: string };

export interface ToolSpec {
  name: string;
  description: string;
  /** JSON Schema of the arguments object. */
  parameters: Record<string, unknown>;
}

export interface LlmRequest {
  /** The model name within the provider (the part after `provider/`). */
  model: string;
  messages: ChatMessage[];
  tools: ToolSpec[];
  signal: AbortSignal;
}

/** What a model streams: text as it is written, then complete tool calls, then the end. */
export type LlmDelta =
  | { type: 'text'; text: string }
  | { type: 'tool_call'; call: ToolCallRequest }
  | { type: 'done' };

export interface LlmProvider {
  /** The provider name of `provider/model`. */
  readonly name: string;
  /**
   * Streams one completion. Errors (HTTP status, bad stream, network) are thrown from the
   * iterator as LlmError; an aborted signal ends the iteration quietly or with an AbortError.
   */
  stream(request: LlmRequest): AsyncIterable<LlmDelta>;
}

// --- text-to-speech ---------------------------------------------------------------------------

export interface TtsRequest {
  text: string;
  /** voice_settings.id */
  voiceId: string;
  /** Agent default_language. */
  language: string;
  /** voice_settings tuning, passed where the vendor supports it (0 or absent = vendor default). */
  speed?: number;
  stability?: number;
  similarityBoost?: number;
  volume?: number;
  signal: AbortSignal;
}

export interface TtsProvider {
  readonly name: string;
  /**
   * Synthesizes one piece of text (a sentence or clause) and yields PCM16 mono 24 kHz chunks of
   * any length as they become available. Errors are thrown as TtsError.
   */
  synthesize(request: TtsRequest): AsyncIterable<Int16Array>;
}

// --- voice activity and noise -----------------------------------------------------------------

export interface VadSettings {
  /** Seconds of speech before a turn is considered started. */
  startSecs: number;
  /** Seconds of silence before the end of the turn. */
  stopSecs: number;
}

export type VadEvent = 'speech_started' | 'speech_stopped';

/** Fed every 20 ms frame (24 kHz); says when a turn starts or stops. */
export interface VoiceActivityDetector {
  process(frame: Int16Array): VadEvent | undefined;
  /** Whether the detector is currently inside a turn. */
  readonly speaking: boolean;
  reset(): void;
}

/** Fed every 20 ms frame (24 kHz) before VAD and STT; returns the cleaned frame (same length). */
export interface NoiseSuppressor {
  process(frame: Int16Array): Int16Array;
  close(): void;
}
