/**
 * Where each agent turn's time went: one recorder per session takes the marks of every agent
 * turn (src/domain/turn-latency.ts) from the stages' events as the runtime routes them, and
 * tells every TurnTimelineObserver (the store writer, the metrics, the traces) once a turn's
 * timeline is complete: the turn was heard to its end, it was cut, or the session ended.
 *
 *   TurnDetector   speech_stopped ........................ speech_end        (the caller's marks wait
 *                  transcript (is_final) ................. transcript_final   for the reply they caused)
 *   ReplyLoop      mark ................................... llm_request, llm_first_token
 *   SpeechOutput   mark ................................... tts_first_sentence, tts_first_audio
 *                  audio (the first of the turn) .......... audio_out_first   (a web session)
 *   the bridge     audioOut() (its first RTP packet) ..... audio_out_first   (a phone call)
 *                  interrupted ............................ bargeInAt
 *
 * On a phone call the session's client is callbridge's own bridge, and what the caller waits for
 * is the first RTP packet, not the first response_audio: the bridge reports that moment through
 * the session's TurnAudioReports (src/session/turn-audio.ts), and a turn that sent audio waits
 * for it (at most AUDIO_OUT_REPORT_GRACE_MS after the turn is over) before it is complete.
 *
 * Marks are epoch milliseconds with sub-millisecond precision (performance.timeOrigin plus the
 * runtime's clock), recorded when the event is routed: events are emitted synchronously at the
 * moment they describe, so no stage needs to carry a time.
 */
import type { TurnMark, TurnTimeline, TurnTimelineObserver } from '../../domain/turn-latency.ts';
import type { Logger } from '../../log.ts';
import { systemClock, systemTimers, type Timers } from '../../media/types.ts';
import type { SessionContext } from '../../session/runtime-contract.ts';
import type { AgentTurn, CallerEvent, ReplyEvent, SpeechEvent } from './events.ts';
import type { RuntimeDeps } from './stages.ts';

/** After a phone call's turn is over, how long its timeline waits for the bridge's first-RTP report. */
export const AUDIO_OUT_REPORT_GRACE_MS = 1000;

export interface TurnTimelineOptions {
  /** The call record's id (the session's id). */
  callId: string;
  observers: readonly TurnTimelineObserver[];
  /** Epoch ms, sub-millisecond. */
  now: () => number;
  timers: Timers;
  /**
   * The client's first response_audio is not what the caller hears first (a phone call through
   * the bridge): audio_out_first comes from audioOut() instead.
   */
  audioOutReported: boolean;
  log: Logger;
}

interface OpenTurn {
  timeline: TurnTimeline;
  /** The first response_audio of the turn went to the client. */
  audioSent: boolean;
  /** The turn is over (heard or cut), waiting for the bridge's report. */
  grace?: unknown;
}

/**
 * The recorder of one session, or undefined when no observer wants timelines (nothing is then
 * recorded at all). A phone call's recorder hears the bridge's reports until close().
 */
export function createTurnTimeline(ctx: SessionContext, deps: RuntimeDeps, log: Logger): TurnTimelineRecorder | undefined {
  const observers = deps.turnTimelineObservers ?? [];
  if (observers.length === 0) return undefined;
  const clock = deps.clock ?? systemClock;
  const audioOutReported = ctx.direction !== 'web' && deps.turnAudio !== undefined;
  const recorder = new TurnTimelineRecorder({
    callId: ctx.sessionId,
    observers,
    now: () => performance.timeOrigin + clock.now(),
    timers: deps.timers ?? systemTimers,
    audioOutReported,
    log,
  });
  if (audioOutReported) recorder.onClose(deps.turnAudio!.register(ctx.sessionId, (at) => recorder.audioOut(at)));
  return recorder;
}

export class TurnTimelineRecorder {
  readonly #o: TurnTimelineOptions;
  readonly #open = new Map<string, OpenTurn>();
  /** The caller's marks of the user turn being heard, then committed, until a reply takes them. */
  #caller: Partial<Record<TurnMark, number>> = {};
  #committed: Partial<Record<TurnMark, number>> | undefined;
  #index = 0;
  #closed = false;
  #onClose: (() => void) | undefined;

  constructor(options: TurnTimelineOptions) {
    this.#o = options;
  }

  caller(e: CallerEvent): void {
    if (e.type === 'speech_stopped') this.#caller.speech_end = this.#o.now();
    else if (e.type === 'transcript' && e.isFinal) this.#caller.transcript_final = this.#o.now();
    else if (e.type === 'user_turn') {
      // Nothing understood: no reply will take these marks.
      this.#committed = e.text === '' ? undefined : this.#caller;
      this.#caller = {};
    }
  }

  reply(e: ReplyEvent): void {
    if (e.type === 'mark') this.#mark(e.turn.turnId, e.mark);
  }

  speech(e: SpeechEvent): void {
    switch (e.type) {
      case 'turn_started':
        this.#opened(e.turn);
        return;
      case 'mark':
        this.#mark(e.turnId, e.mark);
        return;
      case 'audio': {
        const t = this.#open.get(e.turnId);
        if (t === undefined || t.audioSent) return;
        t.audioSent = true;
        if (!this.#o.audioOutReported) this.#mark(e.turnId, 'audio_out_first');
        return;
      }
      case 'interrupted': {
        const t = this.#open.get(e.turn.turnId);
        if (t !== undefined) t.timeline.bargeInAt = this.#o.now();
        this.#over(e.turn.turnId);
        return;
      }
      case 'heard':
        this.#over(e.turn.turnId);
        return;
    }
  }

  /**
   * The bridge sent the first RTP packet of agent audio after a silence, at `at` (epoch ms): the
   * first audio of the turn whose response_audio went out and that has no audio_out_first yet.
   */
  audioOut(at: number): void {
    for (const [turnId, t] of this.#open) {
      if (!t.audioSent || t.timeline.marks.audio_out_first !== undefined) continue;
      t.timeline.marks.audio_out_first = at;
      if (t.grace !== undefined) this.#complete(turnId);
      return;
    }
  }

  /** fn runs at close() (unregistering from the bridge's reports). */
  onClose(fn: () => void): void {
    this.#onClose = fn;
  }

  /** The session ended: every turn still open is complete as it is. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#onClose?.();
    for (const turnId of [...this.#open.keys()]) this.#complete(turnId);
  }

  #opened(turn: AgentTurn): void {
    if (this.#closed) return;
    const marks = turn.kind === 'reply' && this.#committed !== undefined ? { ...this.#committed } : {};
    if (turn.kind === 'reply') this.#committed = undefined;
    this.#open.set(turn.turnId, { timeline: { index: this.#index++, turnId: turn.turnId, kind: turn.kind, marks }, audioSent: false });
  }

  #mark(turnId: string, mark: TurnMark): void {
    const t = this.#open.get(turnId);
    if (t !== undefined) t.timeline.marks[mark] ??= this.#o.now();
  }

  /** Heard or cut: complete now, or once the bridge reported the turn's first RTP packet. */
  #over(turnId: string): void {
    const t = this.#open.get(turnId);
    if (t === undefined || t.grace !== undefined) return;
    if (this.#o.audioOutReported && t.audioSent && t.timeline.marks.audio_out_first === undefined) {
      t.grace = this.#o.timers.setTimeout(() => this.#complete(turnId), AUDIO_OUT_REPORT_GRACE_MS);
      return;
    }
    this.#complete(turnId);
  }

  #complete(turnId: string): void {
    const t = this.#open.get(turnId);
    if (t === undefined) return;
    this.#open.delete(turnId);
    if (t.grace !== undefined) this.#o.timers.clearTimeout(t.grace);
    for (const observer of this.#o.observers) {
      try {
        observer.turnComplete(this.#o.callId, t.timeline);
      } catch (err) {
        // An observer's failure must not reach the conversation.
        this.#o.log.warn({ err, observer: observer.constructor.name }, 'a turn timeline observer failed');
      }
    }
  }
}
