/**
 * One spoken agent turn: text pieces go to TTS, their audio to the pacer in sentence order, and
 * the turn remembers which text maps to which stretch of audio so that, when the caller barges
 * in, it can say what was heard.
 *
 * The next piece's synthesis starts while the current one is still streaming (one piece ahead,
 * its audio held until its turn): a vendor's time to first byte (a few hundred ms) then overlaps
 * audio already queued instead of following it, which left a silence after every short sentence
 * ("Sure." is 400 ms of audio). Never more than two requests at once: a long answer must not
 * fire one request per sentence, all of them wasted by a barge-in.
 *
 *   pieces:  "Hello there."       "How can I help?"
 *   audio:   |---- 0..900 ms ----|----- 900..2100 ms -----|
 *   played 1300 ms -> heard: "Hello there. How can"   (the cut piece by its share of words)
 */
import { pcm16ToBase64 } from '../media/pcm.ts';
import type { Clock, Timers } from '../media/types.ts';
import { AudioPacer } from './audio-pacer.ts';
import { RUNTIME_SAMPLE_RATE, type TtsProvider, type TtsRequest } from './providers/types.ts';

export interface SpeechTurnOptions {
  turnId: string;
  tts: TtsProvider;
  voice: Omit<TtsRequest, 'text' | 'signal'>;
  clock: Clock;
  timers: Timers;
  chunkSamples: number;
  leadMs: number;
  /** Sends one response_audio event. */
  sendAudio(turnId: string, audioBase64: string, isFinal: boolean): void;
  /** Every piece was synthesized and the client has played all of it. */
  onDone(): void;
  /** A piece could not be synthesized (it is skipped; the turn goes on). */
  onTtsError(err: unknown, text: string): void;
  /** The turn's first piece went to TTS; TTS's first audio of the turn arrived (each once). */
  onMark?(mark: 'tts_first_sentence' | 'tts_first_audio'): void;
}

interface Piece {
  text: string;
  startMs: number;
  durMs: number;
  /** Synthesis finished: durMs is the piece's whole duration. */
  complete: boolean;
}

/** A piece's synthesis, started ahead of its turn: the audio so far and how it ended. */
interface Synthesis {
  chunks: Int16Array[];
  ended: boolean;
  error?: { err: unknown };
  /** Wakes the piece's player when a chunk arrives or the synthesis ends. */
  wake: (() => void) | undefined;
}

/**
 * Speaking rate assumed for a piece still being synthesized when the caller cut in (its length
 * is not known yet): about 15 characters per second, typical of TTS voices at normal speed.
 */
const ESTIMATED_MS_PER_CHAR = 65;

export class SpeechTurn {
  readonly turnId: string;
  readonly #o: SpeechTurnOptions;
  readonly #abort = new AbortController();
  readonly #pacer: AudioPacer;
  readonly #pieces: Piece[] = [];
  /** Pieces spoken and not yet playing, in order, each with its synthesis once started. */
  readonly #queued: Array<{ text: string; synthesis: Synthesis | undefined }> = [];
  /** Whether a piece is playing (its audio going to the pacer) now. */
  #playing = false;
  #chain: Promise<void> = Promise.resolve();
  #audioMs = 0;
  #closed = false;
  #synthesisStarted = false;
  #synthesisAnswered = false;
  /** performance-clock time the first audio went out (undefined before). */
  audioStartedAt: number | undefined;

  constructor(options: SpeechTurnOptions) {
    this.#o = options;
    this.turnId = options.turnId;
    this.#pacer = new AudioPacer({
      clock: options.clock,
      timers: options.timers,
      chunkSamples: options.chunkSamples,
      leadMs: options.leadMs,
      send: (pcm, isFinal) => {
        this.audioStartedAt ??= options.clock.now();
        options.sendAudio(this.turnId, pcm16ToBase64(pcm), isFinal);
      },
      onDrained: () => {
        if (!this.#closed) options.onDone();
      },
    });
  }

  get signal(): AbortSignal {
    return this.#abort.signal;
  }

  /** Queues a piece of text to be spoken after those before it. */
  speak(text: string): void {
    if (this.#closed || text.trim() === '') return;
    this.#queued.push({ text, synthesis: undefined });
    this.#startAhead();
    this.#chain = this.#chain.then(() => this.#play());
  }

  /** No more text: once everything queued is spoken and played, onDone fires. */
  finish(): void {
    this.#chain = this.#chain.then(() => {
      if (!this.#closed) this.#pacer.finish();
    });
  }

  /**
   * Stops at once (barge-in or session end): TTS aborted, queued audio dropped.
   * Returns the text the client has heard.
   */
  cut(): string {
    if (this.#closed) return '';
    this.#closed = true;
    this.#abort.abort();
    return heardText(this.#pieces, this.#pacer.clear());
  }

  /** Plays the first queued piece: its audio to the pacer as it comes, in turn. */
  async #play(): Promise<void> {
    const next = this.#queued.shift();
    if (next === undefined || this.#closed) return;
    const synthesis = next.synthesis ?? this.#startSynthesis(next.text);
    this.#playing = true;
    this.#startAhead();
    const piece: Piece = { text: next.text, startMs: this.#audioMs, durMs: 0, complete: false };
    this.#pieces.push(piece);
    try {
      for (;;) {
        const pcm = synthesis.chunks.shift();
        if (pcm === undefined) {
          if (synthesis.ended) break;
          await new Promise<void>((resolve) => (synthesis.wake = resolve));
          continue;
        }
        if (this.#closed) return;
        const ms = (pcm.length * 1000) / RUNTIME_SAMPLE_RATE;
        piece.durMs += ms;
        this.#audioMs += ms;
        this.#pacer.push(pcm);
      }
      if (synthesis.error !== undefined) {
        if (!this.#closed) this.#o.onTtsError(synthesis.error.err, next.text);
      } else piece.complete = true;
    } finally {
      this.#playing = false;
    }
  }

  /** While a piece plays, the one right after it synthesizes; the others wait their turn. */
  #startAhead(): void {
    const ahead = this.#queued[0];
    if (this.#playing && ahead !== undefined) ahead.synthesis ??= this.#startSynthesis(ahead.text);
  }

  /** Starts a piece's TTS request; its audio collects in the returned Synthesis. */
  #startSynthesis(text: string): Synthesis {
    const s: Synthesis = { chunks: [], ended: false, wake: undefined };
    if (!this.#synthesisStarted) {
      this.#synthesisStarted = true;
      this.#o.onMark?.('tts_first_sentence');
    }
    const wake = () => {
      const w = s.wake;
      s.wake = undefined;
      w?.();
    };
    void (async () => {
      try {
        for await (const pcm of this.#o.tts.synthesize({ ...this.#o.voice, text, signal: this.#abort.signal })) {
          if (this.#closed) break;
          if (!this.#synthesisAnswered) {
            this.#synthesisAnswered = true;
            this.#o.onMark?.('tts_first_audio');
          }
          s.chunks.push(pcm);
          wake();
        }
      } catch (err) {
        s.error = { err };
      }
      s.ended = true;
      wake();
    })();
    return s;
  }
}

/**
 * The text of the pieces heard within `playedMs`, the cut piece by its share of words (a piece
 * still being synthesized by its estimated length).
 */
export function heardText(pieces: readonly { text: string; startMs: number; durMs: number; complete: boolean }[], playedMs: number): string {
  const out: string[] = [];
  for (const p of pieces) {
    const durMs = p.complete ? p.durMs : Math.max(p.durMs, p.text.length * ESTIMATED_MS_PER_CHAR);
    if (playedMs >= p.startMs + durMs) {
      out.push(p.text);
      continue;
    }
    if (playedMs > p.startMs && durMs > 0) {
      const words = p.text.split(/\s+/);
      const n = Math.floor((words.length * (playedMs - p.startMs)) / durMs);
      if (n > 0) out.push(words.slice(0, n).join(' '));
    }
    break;
  }
  return out.join(' ');
}
