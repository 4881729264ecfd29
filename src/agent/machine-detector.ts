/**
 * Answering-machine detection's decision: human, machine or unknown, from what the callee's side
 * of an answered outbound call sounds like in its first seconds (docs/machine-detection.md).
 *
 * Three signals, each optional (the bench compares them):
 *   - cadence, from the VAD's turn edges: a greeting that goes on for more than greetingMs is a
 *     machine ("Hi, you've reached Sam, I can't take your call right now..."); a short one
 *     followed by the VAD's own end-of-turn silence (stop_secs) is a human ("Hello?", then waiting);
 *   - the beep: a steady single tone (ToneDetector, src/media/) is a machine at once;
 *   - the transcript, when a recognizer is configured: a voicemail phrase is a machine at once.
 * No decision by maxMs after the answer: unknown (silence, or speech that began too late to
 * judge). The VAD reports a turn only after start_secs of speech and ends it after stop_secs of
 * silence: the turn's start is back-dated by start_secs, and "longer than greetingMs" is known
 * once the turn is still open greetingMs + stop_secs after its start (a pause shorter than
 * stop_secs does not end a greeting).
 *
 * The VAD may open a turn on the line's noise before the callee speaks (noise suppression lets
 * the first fraction of a second through, and the VAD's floor starts from that quieter first
 * frame): such a turn would run into the callee's "hello?" and look long. So the detector keeps
 * its own view of the raw audio's level: an onset is a frame 9 dB over the quietest level heard
 * since the answer, after at least ONSET_QUIET_MS of frames within 6 dB of it. A turn whose VAD
 * start has no onset near it takes the first onset within its first ONSET_WINDOW_MS as its start.
 *
 * Time is whatever clock the caller reads (`now`, ms); nothing here sets timers.
 */
import { ToneDetector } from '../media/tone-detector.ts';

export type MachineDetectionResult = 'human' | 'machine' | 'unknown';

/** Which signal decided. */
export type DecidedBy = 'long_greeting' | 'short_greeting' | 'beep' | 'transcript' | 'max_time';

export interface MachineDecision {
  result: MachineDetectionResult;
  /** ms from the answer to the decision. */
  decidedAfterMs: number;
  by: DecidedBy;
}

export interface MachineDetectorOptions {
  sampleRate: number;
  /** The VAD's start_secs and stop_secs, in ms. */
  vadStartMs: number;
  vadStopMs: number;
  /** A greeting longer than this is a machine's (default 2000). */
  greetingMs?: number;
  /** Undecided this long after the answer: unknown (default 5000). */
  maxMs?: number;
  /** Signals in use (default all). */
  beep?: boolean;
  transcript?: boolean;
  onDecision(decision: MachineDecision): void;
  /** A beep ended (reported whether or not the decision came first). */
  onBeepEnded?(): void;
}

/** The durations the settings tune (session.amd_greeting_ms, amd_max_ms, amd_beep_wait_ms; the last is the runtime stage's). */
export interface MachineDetectionTuning {
  greetingMs: number;
  maxMs: number;
  beepWaitMs: number;
}

export const DEFAULT_GREETING_MS = 2000;
const ONSET_QUIET_MS = 200;
const ONSET_WINDOW_MS = 1500;
/** An onset this close before the VAD's back-dated start is the same speech. */
const ONSET_SLACK_MS = 150;
export const DEFAULT_MAX_MS = 5000;

/** Phrases of voicemail greetings (English), as a recognizer writes them. */
const MACHINE_PHRASES = /\b(leave (me )?(a|your) (message|name)|not available|unavailable|can'?t (take|come to|answer)|cannot (take|come to|answer)|voice ?mail|after the (tone|beep)|at the (tone|beep)|mailbox|you('ve| have) reached|record your message|get back to you)\b/i;

/** Whether a transcript reads like a voicemail greeting. */
export function soundsLikeVoicemail(text: string): boolean {
  return MACHINE_PHRASES.test(text);
}

export class MachineDetector {
  readonly #o: MachineDetectorOptions;
  readonly #tones: ToneDetector | undefined;
  readonly #answeredAt: number;
  readonly #greetingMs: number;
  readonly #maxMs: number;
  /** The open VAD turn's back-dated start. */
  #turnStart: number | undefined;
  /** Whether the open turn's start was matched with an onset of the raw audio. */
  #turnOnset = false;
  #floorDb = Number.POSITIVE_INFINITY;
  #quietMs = 0;
  #lastOnset: number | undefined;
  #decision: MachineDecision | undefined;
  #beep = false;

  constructor(o: MachineDetectorOptions, answeredAt: number) {
    this.#o = o;
    this.#answeredAt = answeredAt;
    this.#greetingMs = o.greetingMs ?? DEFAULT_GREETING_MS;
    this.#maxMs = o.maxMs ?? DEFAULT_MAX_MS;
    this.#tones = o.beep === false ? undefined : new ToneDetector({ sampleRate: o.sampleRate });
  }

  get decision(): MachineDecision | undefined {
    return this.#decision;
  }

  /** A beep was heard (so far). */
  get beep(): boolean {
    return this.#beep;
  }

  /** A beep is sounding now. */
  get beeping(): boolean {
    return this.#tones?.sounding ?? false;
  }

  /** The callee's audio (kept listening for the beep after the decision). */
  audio(pcm: Int16Array, now: number): void {
    this.#level(pcm, now);
    for (const e of this.#tones?.push(pcm) ?? []) {
      if (e.type === 'started') {
        this.#beep = true;
        this.#decide('machine', 'beep', now);
      } else {
        this.#o.onBeepEnded?.();
      }
    }
    this.tick(now);
  }

  /** Time passed: the greeting's length and the cap are checked. */
  tick(now: number): void {
    if (this.#decision) return;
    if (this.#turnStart !== undefined && now - this.#turnStart >= this.#greetingMs + this.#o.vadStopMs) this.#decide('machine', 'long_greeting', now);
    else if (now - this.#answeredAt >= this.#maxMs) this.#decide('unknown', 'max_time', now);
  }

  speechStarted(now: number): void {
    if (this.#turnStart === undefined) {
      this.#turnStart = now - this.#o.vadStartMs;
      this.#turnOnset = this.#lastOnset !== undefined && this.#lastOnset >= this.#turnStart - ONSET_SLACK_MS;
    }
    this.tick(now);
  }

  /** The raw audio's level: onsets (see the module's comment). */
  #level(pcm: Int16Array, now: number): void {
    if (pcm.length === 0) return;
    let e = 0;
    for (let i = 0; i < pcm.length; i++) e += pcm[i]! * pcm[i]!;
    const db = Math.max(-90, 10 * Math.log10(e / pcm.length / 32768 ** 2 + 1e-12));
    const ms = (pcm.length / this.#o.sampleRate) * 1000;
    this.#floorDb = Math.min(this.#floorDb, db);
    if (db < this.#floorDb + 6) {
      this.#quietMs += ms;
      return;
    }
    if (db <= this.#floorDb + 9) return;
    if (this.#quietMs >= ONSET_QUIET_MS) {
      const onset = now - ms;
      this.#lastOnset = onset;
      // A turn opened on the line's noise: its speech starts here.
      if (this.#turnStart !== undefined && !this.#turnOnset && onset - this.#turnStart <= ONSET_WINDOW_MS) {
        this.#turnStart = onset;
        this.#turnOnset = true;
      }
    }
    this.#quietMs = 0;
  }

  speechStopped(now: number): void {
    const start = this.#turnStart;
    this.#turnStart = undefined;
    if (start === undefined || this.#decision) return;
    const voicedMs = now - this.#o.vadStopMs - start;
    this.#decide(voicedMs > this.#greetingMs ? 'machine' : 'human', voicedMs > this.#greetingMs ? 'long_greeting' : 'short_greeting', now);
  }

  transcript(text: string, now: number): void {
    if (this.#o.transcript !== false && soundsLikeVoicemail(text)) this.#decide('machine', 'transcript', now);
  }

  #decide(result: MachineDetectionResult, by: DecidedBy, now: number): void {
    if (this.#decision) return;
    this.#decision = { result, by, decidedAfterMs: Math.max(0, Math.round(now - this.#answeredAt)) };
    this.#o.onDecision(this.#decision);
  }
}
