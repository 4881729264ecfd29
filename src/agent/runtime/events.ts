/**
 * The typed events between the runtime's stages, and the agent turn they share.
 *
 * A stage takes its inputs as method calls and reports what happened as events; it never calls
 * another stage. The runtime (agent-runtime.ts) routes every event: to the client (SessionIo),
 * to another stage, or to the end of the session. That keeps each stage small enough to build
 * and test alone on virtual time (test/agent/runtime/), and puts every rule that joins two
 * stages (a caller's speech cuts the agent, a heard turn arms the silence timer) in one place.
 *
 *   caller audio  -> TurnDetector       --CallerEvent--> runtime -> client; SpeechOutput.bargeIn;
 *                                                                   ReplyLoop (committed user turn)
 *   caller's keys -> DtmfCollector      --KeyEvent-----> runtime -> SpeechOutput.bargeIn;
 *                                                                   TurnDetector.addText (an entry)
 *   user turn     -> ReplyLoop          --ReplyEvent---> runtime -> SpeechOutput (text, sentences);
 *                                                                   client (tool_call, dtmf); end
 *   agent turn    -> SpeechOutput       --SpeechEvent--> runtime -> client (response_text/_audio,
 *                                                                   interruption); timers; next turn
 *   time passing  -> ConversationTimers --TimerEvent---> runtime -> reprompt, end or transfer
 *   end stored    -> analyze()          --------------> the server stores the analysis
 */
import type { TimeoutSettings } from '../../domain/agent.ts';
import type { ToolCallArgument } from '../../session/protocol.ts';

export type TurnKind = 'first' | 'reply' | 'reprompt' | 'closing';

/**
 * One agent turn. SpeechOutput opens it and speaks it, the ReplyLoop writes the model's answer
 * into it, the runtime settles it. A plain object rather than a class so that stages depend on
 * its shape only.
 */
export interface AgentTurn {
  readonly turnId: string;
  /** closing: no longer interruptible; `then` runs once it has been heard. */
  kind: TurnKind;
  /** What the turn says so far (response_text; committed with is_final once heard or cut). */
  text: string;
  /** Index in the model history of this turn's last assistant message, once it is there. */
  messageIndex?: number;
  /** Aborted when the turn is cut: stops its model stream, its pending client tool and its TTS. */
  readonly signal: AbortSignal;
  /** First message: interruptible during this many ms of its audio (undefined: no limit). */
  interruptibleForMs?: number;
  /** What happens once a closing turn has been heard (end or transfer). */
  then?: () => void;
}

/** TurnDetector: what the caller does. */
export type CallerEvent =
  /** A user turn started (VAD, or emulated from a transcript VAD did not hear). */
  | { type: 'speech_started'; emulated: boolean }
  | { type: 'speech_stopped' }
  | { type: 'transcript'; text: string; turnId: string; isFinal: boolean }
  /** The user turn is over and its text settled ('' when nothing was understood). */
  | { type: 'user_turn'; text: string; turnId: string }
  /** The recognizer failed; it is unusable from here on. */
  | { type: 'failed'; error: Error };

/** DtmfCollector: the caller's keys. */
export type KeyEvent =
  /** A key was pressed; `first` of an entry (it cuts the agent like speech would). */
  | { type: 'key'; first: boolean }
  /** An entry is complete ('#' or a pause): `text` is what the model reads as the caller's words. */
  | { type: 'entry'; digits: string; text: string };

/** ReplyLoop: the model's answer to the conversation so far, for one agent turn. */
export type ReplyEvent =
  /** Streamed text of the answer (appended to the turn's text). */
  | { type: 'text'; turn: AgentTurn; delta: string }
  /** A piece of the answer complete enough to be synthesized on its own. */
  | { type: 'sentence'; turn: AgentTurn; text: string }
  /** A fixed text to say in the turn (the apology when the model failed). */
  | { type: 'say'; turn: AgentTurn; text: string }
  /** Nothing more to say in this turn. */
  | { type: 'done'; turn: AgentTurn }
  /**
   * A tool is called (kept in the transcript); `toClient`: sent to the client as tool_call, which
   * answers it (otherwise the runtime carries it out: send_dtmf, a webhook tool). `rawArguments`:
   * the model's arguments as written, for a built-in tool (which has no declared parameters).
   */
  | { type: 'tool_call'; toolCallId: string; toolName: string; arguments: ToolCallArgument[]; toClient: boolean; rawArguments?: string }
  /** A tool's result, now in the model's history (kept in the transcript too). */
  | { type: 'tool_result'; toolCallId: string; name: string; output: string }
  /** send_dtmf: keys for the phone line. */
  | { type: 'dtmf'; digits: string }
  /** The model hung up (end_call) after what it said in the turn. */
  | { type: 'end_call'; turn: AgentTurn }
  /** The model transferred the call (transfer_call) after what it said in the turn. */
  | { type: 'transfer'; turn: AgentTurn }
  /** The model failed (primary and fallback); fatal after too many failed turns in a row. */
  | { type: 'failed'; turn: AgentTurn; failures: number; fatal: boolean }
  /** A moment of the turn's timeline (turn-timeline.ts): the model was asked, its first delta came. */
  | { type: 'mark'; turn: AgentTurn; mark: 'llm_request' | 'llm_first_token' };

/** SpeechOutput: the agent's turns as the caller hears them. */
export type SpeechEvent =
  | { type: 'turn_started'; turn: AgentTurn }
  /** response_text: partial while the turn is spoken, final (is_final) once heard or cut. */
  | { type: 'text'; turnId: string; text: string; isFinal: boolean }
  /** response_audio: one paced chunk, base64 PCM16 24 kHz. */
  | { type: 'audio'; turnId: string; audio: string; isFinal: boolean }
  /** A piece could not be synthesized; it is skipped and the turn goes on. */
  | { type: 'tts_failed'; error: unknown; text: string }
  /** The turn was spoken to its end and the client has played all of it. */
  | { type: 'heard'; turn: AgentTurn }
  /** The caller cut in: the turn stopped, `heard` is what the caller heard of it. */
  | { type: 'interrupted'; turn: AgentTurn; heard: string }
  /** A moment of the turn's timeline (turn-timeline.ts): its first piece went to TTS, TTS's first audio came. */
  | { type: 'mark'; turnId: string; mark: 'tts_first_sentence' | 'tts_first_audio' };

/** ConversationTimers: time passing without the conversation moving on. */
export type TimerEvent =
  /** silence_timeout_secs of caller silence after the agent's turn, before the last strike. */
  | { type: 'reprompt'; strike: number }
  /** The silence_counter-th strike: apply silence_timeout_action. */
  | { type: 'silence_timeout'; strikes: number; action: TimeoutSettings['timeout_action'] }
  /** default_timeout reached: apply timeout_action. */
  | { type: 'max_duration'; action: TimeoutSettings['timeout_action'] };
