/**
 * Speech output: the agent's turns as the caller hears them. One turn at a time; each turn's
 * text pieces go to TTS and its audio out paced (SpeechTurn, AudioPacer), its text out as
 * response_text: partial while it is spoken, final once the caller has heard all of it or, after
 * a barge-in, with only what was heard.
 *
 * A barge-in is control before data: the turn's model stream and TTS are aborted at once and
 * its queued audio dropped, so the caller hears at most the pacer's lead after cutting in. A
 * closing turn (goodbye, transfer message) and the first message after its
 * first_message_interruption_time cannot be cut.
 */
import { randomUUID } from 'node:crypto';
import { SpeechTurn, type SpeechTurnOptions } from '../speech-turn.ts';
import type { AgentTurn, SpeechEvent, TurnKind } from './events.ts';

/** How each turn is spoken: the voice, its TTS, the pacing (SpeechTurn's settings). */
type SpeechSettings = Pick<SpeechTurnOptions, 'tts' | 'voice' | 'clock' | 'timers' | 'chunkSamples' | 'leadMs'>;

export interface SpeechOutputOptions extends SpeechSettings {
  emit(event: SpeechEvent): void;
}

interface Voiced {
  speech: SpeechTurn;
  abort: AbortController;
}

export class SpeechOutput {
  readonly #o: SpeechOutputOptions;
  readonly #voiced = new WeakMap<AgentTurn, Voiced>();
  /** Turns whose last text was said (`say`), not streamed. */
  readonly #afterSay = new WeakSet<AgentTurn>();
  #current: AgentTurn | undefined;

  constructor(options: SpeechOutputOptions) {
    this.#o = options;
  }

  /** The turn being spoken (undefined between turns). */
  get current(): AgentTurn | undefined {
    return this.#current;
  }

  /** Starts a new agent turn; it is current until heard or cut. */
  open(kind: TurnKind, options: { interruptibleForMs?: number } = {}): AgentTurn {
    const abort = new AbortController();
    const turn: AgentTurn = { turnId: randomUUID(), kind, text: '', signal: abort.signal };
    if (options.interruptibleForMs !== undefined) turn.interruptibleForMs = options.interruptibleForMs;
    const { emit, ...settings } = this.#o;
    const speech = new SpeechTurn({
      ...settings,
      turnId: turn.turnId,
      sendAudio: (turnId, audio, isFinal) => emit({ type: 'audio', turnId, audio, isFinal }),
      onDone: () => this.#played(turn),
      onTtsError: (error, text) => emit({ type: 'tts_failed', error, text }),
      onMark: (mark) => emit({ type: 'mark', turnId: turn.turnId, mark }),
    });
    this.#voiced.set(turn, { speech, abort });
    this.#current = turn;
    emit({ type: 'turn_started', turn });
    return turn;
  }

  /** Speaks a fixed text in the turn, shown at once as not yet committed. */
  say(turn: AgentTurn, text: string): void {
    turn.text = turn.text === '' ? text : `${turn.text} ${text}`;
    this.#afterSay.add(turn);
    this.#speechOf(turn).speak(text);
    this.#partial(turn);
  }

  /** Streamed text of the turn (shown, not yet spoken: `speak` takes whole sentences). */
  append(turn: AgentTurn, delta: string): void {
    // The model's text after a fixed text (a tool's wait message) is a new sentence: keep them apart.
    if (this.#afterSay.delete(turn) && delta !== '' && !/^\s/.test(delta)) turn.text += ' ';
    turn.text += delta;
    this.#partial(turn);
  }

  /** Queues a piece of the turn's text for synthesis, after those before it. */
  speak(turn: AgentTurn, piece: string): void {
    this.#speechOf(turn).speak(piece);
  }

  /** Nothing more to say: once all of it is heard, `heard` is emitted. */
  finish(turn: AgentTurn): void {
    this.#speechOf(turn).finish();
  }

  /** Lets the turn's speech finish, no longer interruptible; `then` runs once it is heard. */
  finishClosing(turn: AgentTurn, then: () => void): void {
    turn.kind = 'closing';
    turn.then = then;
    this.finish(turn);
  }

  /**
   * The caller started speaking (or pressed a key): cuts the current turn if it may be cut,
   * emitting `interrupted` and then its final text, which is only what was heard.
   */
  bargeIn(): boolean {
    const turn = this.#current;
    if (turn === undefined || turn.kind === 'closing') return false;
    if (turn.interruptibleForMs !== undefined) {
      const started = this.#speechOf(turn).audioStartedAt;
      const elapsed = started === undefined ? 0 : this.#o.clock.now() - started;
      if (elapsed >= turn.interruptibleForMs) return false;
    }
    const { heard } = this.cut()!;
    this.#o.emit({ type: 'interrupted', turn, heard });
    this.#o.emit({ type: 'text', turnId: turn.turnId, text: heard, isFinal: true });
    return true;
  }

  /**
   * Stops the current turn at once and quietly (a timeout's transfer, the session's end): its
   * model stream and TTS aborted, its queued audio dropped. Returns it with what was heard.
   */
  cut(): { turn: AgentTurn; heard: string } | undefined {
    const turn = this.#current;
    if (turn === undefined) return undefined;
    this.#current = undefined;
    const v = this.#voiced.get(turn)!;
    v.abort.abort();
    return { turn, heard: v.speech.cut() };
  }

  #played(turn: AgentTurn): void {
    if (this.#current !== turn) return;
    this.#current = undefined;
    this.#o.emit({ type: 'text', turnId: turn.turnId, text: turn.text, isFinal: true });
    this.#o.emit({ type: 'heard', turn });
  }

  #partial(turn: AgentTurn): void {
    this.#o.emit({ type: 'text', turnId: turn.turnId, text: turn.text, isFinal: false });
  }

  #speechOf(turn: AgentTurn): SpeechTurn {
    const v = this.#voiced.get(turn);
    if (v === undefined) throw new Error('SpeechOutput: a turn this output did not open');
    return v.speech;
  }
}
