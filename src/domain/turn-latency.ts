/**
 * Where one agent turn's time went: the moments of the turn (marks) and the stages between them.
 *
 * The runtime and the bridge record the marks; the store keeps them with the call; GET
 * /v1/calls/{id} returns them in our `latency` extension; the metrics and the traces are built
 * from the same record, so the three never disagree. Marks are wall-clock milliseconds since the
 * epoch with sub-millisecond precision (performance.timeOrigin + performance.now()), so a trace
 * span and a stored stage are the same figure.
 */

/** The moments of a turn, in the order they happen on a reply to the caller's speech. */
export const TURN_MARKS = [
  /** The caller's speech ended (VAD). */
  'speech_end',
  /** The final transcript of the caller's turn arrived. */
  'transcript_final',
  /** The request to the model was sent. */
  'llm_request',
  /** The model's first token arrived. */
  'llm_first_token',
  /** The first sentence went to TTS. */
  'tts_first_sentence',
  /** TTS returned its first audio. */
  'tts_first_audio',
  /** The first audio left for the caller: the first RTP packet of a phone call, the first response_audio of a web session. */
  'audio_out_first',
] as const;
export type TurnMark = (typeof TURN_MARKS)[number];

/** A stage is the time from one mark to the next; named by what the caller waits on. */
export const TURN_STAGES = [
  /** speech_end -> transcript_final */
  'stt',
  /** transcript_final -> llm_request */
  'turn_commit',
  /** llm_request -> llm_first_token */
  'llm',
  /** llm_first_token -> tts_first_sentence */
  'sentence',
  /** tts_first_sentence -> tts_first_audio */
  'tts',
  /** tts_first_audio -> audio_out_first */
  'playout',
] as const;
export type TurnStage = (typeof TURN_STAGES)[number];

/** One agent turn's timeline, as recorded. */
export interface TurnTimeline {
  /** 0-based, in the order the turns started within the call. */
  index: number;
  /** The runtime's turn id (the one on response_text / transcript entries). */
  turnId: string;
  /** first (the first message), reply, reprompt or closing. */
  kind: string;
  /** Epoch ms of each mark the turn had (a first message has no speech_end, transcript_final or llm marks). */
  marks: Partial<Record<TurnMark, number>>;
  /** Epoch ms the caller cut the turn, if they did. */
  bargeInAt?: number;
}

/** Told of each turn once its timeline is complete (its audio went out, it was cut, or the call ended). */
export interface TurnTimelineObserver {
  turnComplete(callId: string, turn: TurnTimeline): void;
}
