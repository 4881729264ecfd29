/**
 * Turn detection: the caller's audio in, the caller's turns out.
 *
 *   pcm -> FrameAssembler (20 ms) -> noise suppression -> STT (every frame)
 *                                                      -> VAD -> speech_started / speech_stopped
 *   STT transcripts -> transcript; the final one (or the grace deadline) -> user_turn
 *
 * A user turn starts when the VAD has heard start_secs of speech and ends after stop_secs of
 * silence (both inside the VAD); then the recognizer is asked for its final transcript and the
 * turn is committed when it arrives, or after FINAL_TRANSCRIPT_GRACE_MS with what there is, so a
 * recognizer that never answers cannot hold the conversation. A transcript with no VAD start
 * before it (the recognizer heard what VAD did not) emulates one: `speech_started` with
 * `emulated: true`, ended by the final transcript rather than by VAD.
 */
import { randomUUID } from 'node:crypto';
import type { Timers } from '../../media/types.ts';
import { FrameAssembler } from '../frame-assembler.ts';
import type { NoiseSuppressor, SttOptions, SttProvider, SttStream, Transcript, VoiceActivityDetector } from '../providers/types.ts';
import type { CallerEvent } from './events.ts';

/** After speech stopped, how long to wait for a final transcript before committing what there is. */
export const FINAL_TRANSCRIPT_GRACE_MS = 2000;

export interface TurnDetectorOptions {
  vad: VoiceActivityDetector;
  noise?: NoiseSuppressor | undefined;
  stt: SttProvider;
  sttOptions: SttOptions;
  timers: Timers;
  emit(event: CallerEvent): void;
}

export class TurnDetector {
  readonly #o: TurnDetectorOptions;
  readonly #frames: FrameAssembler;
  readonly #stt: SttStream;
  /** Text of the turn so far: final transcripts and key entries. */
  #text: string[] = [];
  #turnId = randomUUID();
  /** speech_started was emitted for the current utterance (by VAD or emulated). */
  #open = false;
  #emulated = false;
  /** Set while waiting for the final transcript after speech stopped. */
  #grace: unknown;
  #closed = false;

  constructor(options: TurnDetectorOptions) {
    this.#o = options;
    this.#frames = new FrameAssembler((f) => this.#onFrame(f));
    this.#stt = options.stt.open(options.sttOptions, {
      onTranscript: (t) => this.#onTranscript(t),
      onError: (error) => this.#o.emit({ type: 'failed', error }),
    });
  }

  /** Whether the caller is inside a turn (between speech_started and speech_stopped). */
  get speaking(): boolean {
    return this.#open;
  }

  /** Caller audio, any length (framed here). */
  audio(pcm: Int16Array): void {
    if (!this.#closed) this.#frames.push(pcm);
  }

  /** Text that belongs to the caller's turn though it was not spoken (a key entry). */
  addText(text: string): void {
    if (this.#closed) return;
    this.#text.push(text);
    if (!this.#open) this.#commit();
  }

  /** Idempotent; no event afterwards. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#o.timers.clearTimeout(this.#grace);
    this.#stt.close();
    this.#o.noise?.close();
  }

  #onFrame(frame: Int16Array): void {
    const clean = this.#o.noise ? this.#o.noise.process(frame) : frame;
    this.#stt.write(clean);
    const ev = this.#o.vad.process(clean);
    if (ev === 'speech_started') this.#speechStarted(false);
    else if (ev === 'speech_stopped') this.#speechStopped();
  }

  #speechStarted(emulated: boolean): void {
    if (this.#open) {
      // The recognizer was first (emulated start); now VAD hears it too: from here on it is a
      // real utterance, ended by VAD and transcribed to its end.
      if (this.#emulated && !emulated) {
        this.#emulated = false;
        this.#stt.speechStarted();
      }
      return;
    }
    this.#open = true;
    this.#emulated = emulated;
    this.#o.timers.clearTimeout(this.#grace);
    this.#grace = undefined;
    if (!emulated) this.#stt.speechStarted();
    this.#o.emit({ type: 'speech_started', emulated });
  }

  #speechStopped(): void {
    if (!this.#open) return;
    this.#open = false;
    this.#o.emit({ type: 'speech_stopped' });
    if (this.#emulated) {
      this.#commit();
      return;
    }
    this.#stt.speechEnded();
    // The final transcript normally follows; if the recognizer never sends one, commit anyway.
    this.#grace = this.#o.timers.setTimeout(() => this.#commit(), FINAL_TRANSCRIPT_GRACE_MS);
  }

  #onTranscript(t: Transcript): void {
    if (this.#closed) return;
    const awaitingFinal = this.#grace !== undefined;
    if (!this.#open && !this.#o.vad.speaking && t.text.trim() !== '' && !awaitingFinal) this.#speechStarted(true);
    this.#o.emit({ type: 'transcript', text: t.text, turnId: this.#turnId, isFinal: t.isFinal });
    if (!t.isFinal) return;
    if (t.text.trim() !== '') this.#text.push(t.text.trim());
    if (this.#emulated && this.#open) {
      this.#speechStopped();
      return;
    }
    if (!this.#o.vad.speaking) this.#commit();
  }

  #commit(): void {
    this.#o.timers.clearTimeout(this.#grace);
    this.#grace = undefined;
    if (this.#closed) return;
    const text = this.#text.join(' ').trim();
    this.#text = [];
    const turnId = this.#turnId;
    this.#turnId = randomUUID();
    this.#o.emit({ type: 'user_turn', text, turnId });
  }
}
