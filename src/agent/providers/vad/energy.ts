/**
 * An energy voice-activity detector with an adaptive noise floor: the "documented energy
 * detector" the agent runtime uses to find turn edges (speech_started / speech_stopped).
 *
 * Algorithm, per frame (20 ms, 480 samples at 24 kHz; other lengths work, durations are
 * counted in samples):
 *
 * 1. Level. L = 10 log10(var(x) / 32768^2) dBFS, where var(x) = E[x^2] - E[x]^2 is the power
 *    with the frame's mean (DC) removed, so a DC offset is not mistaken for energy. A full-scale
 *    square wave reads 0 dBFS, a full-scale sine -3 dBFS. Levels are clamped at FLOOR_MIN_DB
 *    (-100 dBFS) so digital silence has a finite level.
 *
 * 2. Noise floor F: an estimate of the quietest recent level (minimum tracking).
 *    - Downward, quickly: when L < F the floor moves toward L as a one-pole filter *in the power
 *      domain* with time constant `floorFallSecs` (default 0.1 s): up to ~43 dB/s, yet one
 *      lost (all-zero) frame pulls it down by only ~0.9 dB, where a dB-domain or instant minimum
 *      would fall by tens of dB and leave ordinary noise "voiced" for seconds.
 *    - Upward, slowly: when L > F the floor rises toward L by at most `floorRiseDbPerSec`
 *      (default 2 dB/s). A background that grows slower than that (air conditioning starting,
 *      a car accelerating) stays under floor + margin; speech, which has troughs every syllable
 *      or word, keeps pulling the floor back down.
 *    - The first frame initialises F = L (a call usually starts with the line's own noise, and
 *      this makes a steady -40 dBFS background "floor" at once rather than "speech" for the
 *      many seconds an upward-limited floor would need to climb from -100 dBFS).
 *
 * 3. Voiced decision, with hysteresis (a Schmitt trigger on level):
 *      voiced = L > max(absoluteDb, F + marginDb)                         outside a turn
 *      voiced = L > max(absoluteDb - hysteresisDb, F + marginDb - hysteresisDb)   inside a turn
 *    Defaults: absoluteDb -45 dBFS (quieter than any intelligible talker after telephone AGC:
 *    speech arrives at -30..-12 dBFS; -45 rejects line hiss and comfort noise), marginDb 9 dB
 *    (white noise frame levels of 480 samples scatter about +-0.5 dB, pink and babble noise a
 *    few dB; 9 dB above the floor is comfortably outside that, yet below a vowel's peak over
 *    any background of SNR >= 10 dB), hysteresisDb 3 dB (a held vowel decaying a few dB, or
 *    a soft consonant, stays voiced once the turn has started).
 *
 * 4. Turn state machine:
 *    - Not speaking: voiced frames accumulate; unvoiced frames are forgiven as a dropout while
 *      at most `maxDropoutSecs` (default 0.1 s = five frames) of consecutive unvoiced frames
 *      interrupt the run, and do not count toward the total. A longer gap resets the count.
 *      Why 0.1 s rather than a frame or two: the energy between syllables dips 10-20 dB for
 *      50-100 ms, and in noise those dips fall under the threshold, so with a two-frame
 *      allowance speech made of short syllables (< startSecs each) never started a turn at
 *      15-20 dB SNR. Only voiced time counts, so a single burst shorter than startSecs never
 *      starts one; two bursts less than 0.1 s apart are taken as one utterance.
 *      Once the voiced total reaches `startSecs`, `speech_started` is returned (so it fires on
 *      the frame that completes startSecs of voicing: frame index ceil(startSecs / 0.02) - 1
 *      of uninterrupted speech, at least the first frame when startSecs is 0).
 *    - Speaking: consecutive unvoiced time accumulates and any voiced frame resets it; once it
 *      reaches `stopSecs`, `speech_stopped` is returned. Short pauses (< stopSecs) inside a
 *      turn therefore never end it.
 *
 * Limits (why the runtime puts noise suppression in front of it): this measures energy, not
 * speech. A cough, a door, music, a TV or a sudden loud noise that lasts longer than startSecs
 * starts a turn; a new steady noise more than marginDb above the old floor keeps a turn open
 * until the floor has climbed to it (at floorRiseDbPerSec: about 10 s for a 20 dB jump). Quiet
 * speech within marginDb of a loud background is missed: in tests a held vowel is found down to
 * 10 dB SNR, syllabic speech down to a peak SNR of about 15 (pink) to 20 dB (white noise); a
 * vowel held for seconds at 10 dB SNR ends its turn early as the floor climbs toward it. RNNoise in front of it
 * (noise/rnnoise.ts) removes most stationary noise, and the STT's own endpointing and an empty
 * transcript catch the rest.
 *
 * Cost: one pass over the frame (sum and sum of squares) and a log10: well under 1 us per frame.
 * Nothing is allocated per frame.
 */
import { RUNTIME_SAMPLE_RATE, type VadEvent, type VadSettings, type VoiceActivityDetector } from '../types.ts';

/** Lowest level the detector reports (digital silence), dBFS. */
export const FLOOR_MIN_DB = -100;

export interface EnergyVadTuning {
  /** Voiced frames must exceed this level, dBFS. Default -45. */
  absoluteDb?: number;
  /** Voiced frames must exceed the noise floor by this much, dB. Default 9. */
  marginDb?: number;
  /** Both thresholds drop by this much while a turn is open, dB. Default 3. */
  hysteresisDb?: number;
  /** Fastest upward drift of the noise floor, dB per second. Default 2. */
  floorRiseDbPerSec?: number;
  /** Time constant of the noise floor's fall (power domain), seconds. Default 0.1. */
  floorFallSecs?: number;
  /** Unvoiced time forgiven inside the startSecs run, seconds. Default 0.04 (two frames). */
  maxDropoutSecs?: number;
  /** Sample rate of the frames. Default 24000 (the runtime's rate). */
  sampleRate?: number;
}

export type EnergyVadOptions = VadSettings & EnergyVadTuning;

export const ENERGY_VAD_DEFAULTS: Readonly<Required<EnergyVadTuning>> = Object.freeze({
  absoluteDb: -45,
  marginDb: 9,
  hysteresisDb: 3,
  floorRiseDbPerSec: 2,
  floorFallSecs: 0.1,
  maxDropoutSecs: 0.1,
  sampleRate: RUNTIME_SAMPLE_RATE,
});

/** Durations are compared in samples; this absorbs float error in secs * rate. */
const SAMPLE_EPSILON = 1e-6;
const FULL_SCALE_POWER = 32768 * 32768;

export class EnergyVad implements VoiceActivityDetector {
  private readonly startSamples: number;
  private readonly stopSamples: number;
  private readonly dropoutSamples: number;
  private readonly tuning: Readonly<Required<EnergyVadTuning>>;

  private inTurn = false;
  /** Noise floor in dBFS; NaN until the first frame. */
  private floorDb = Number.NaN;
  /** Voiced samples counted toward startSecs. */
  private voicedRun = 0;
  /** Current run of unvoiced samples (a dropout before the start; silence inside a turn). */
  private unvoicedRun = 0;
  private lastLevelDb = Number.NaN;
  private lastVoiced = false;

  /**
   * @throws RangeError when a duration is negative or not finite, or a tuning value is out of
   *   range (sampleRate and floorFallSecs must be positive).
   */
  constructor(options: EnergyVadOptions) {
    const t = { ...ENERGY_VAD_DEFAULTS };
    for (const key of Object.keys(ENERGY_VAD_DEFAULTS) as (keyof EnergyVadTuning)[]) {
      const v = options[key];
      if (v !== undefined) t[key] = v;
    }
    for (const [name, v] of Object.entries({ startSecs: options.startSecs, stopSecs: options.stopSecs, ...t })) {
      if (!Number.isFinite(v)) throw new RangeError(`EnergyVad: ${name} must be a finite number, got ${String(v)}`);
    }
    if (options.startSecs < 0 || options.stopSecs < 0) {
      throw new RangeError(`EnergyVad: startSecs and stopSecs must be >= 0, got ${options.startSecs}, ${options.stopSecs}`);
    }
    if (t.sampleRate <= 0 || t.floorFallSecs <= 0 || t.floorRiseDbPerSec < 0 || t.maxDropoutSecs < 0 || t.hysteresisDb < 0) {
      throw new RangeError('EnergyVad: sampleRate and floorFallSecs must be > 0; floorRiseDbPerSec, maxDropoutSecs, hysteresisDb >= 0');
    }
    this.tuning = Object.freeze(t);
    this.startSamples = options.startSecs * t.sampleRate;
    this.stopSamples = options.stopSecs * t.sampleRate;
    this.dropoutSamples = t.maxDropoutSecs * t.sampleRate;
  }

  /** Whether a turn is open (between speech_started and speech_stopped). */
  get speaking(): boolean {
    return this.inTurn;
  }

  /** The current noise floor estimate, dBFS (NaN before the first frame). For logs and tests. */
  get noiseFloorDb(): number {
    return this.floorDb;
  }

  /** The level of the last frame, dBFS (NaN before the first frame). */
  get levelDb(): number {
    return this.lastLevelDb;
  }

  /** Whether the last frame was classified voiced. */
  get voiced(): boolean {
    return this.lastVoiced;
  }

  /**
   * Classifies one frame and advances the turn state.
   * @returns 'speech_started' or 'speech_stopped' on the frame where a turn edge is decided.
   */
  process(frame: Int16Array): VadEvent | undefined {
    const n = frame.length;
    if (n === 0) return undefined;
    const t = this.tuning;

    // 1. Level (DC removed).
    let sum = 0;
    let sumSq = 0;
    for (let i = 0; i < n; i++) {
      const v = frame[i]!;
      sum += v;
      sumSq += v * v;
    }
    const mean = sum / n;
    const power = Math.max(0, sumSq / n - mean * mean);
    const level = power > 0 ? Math.max(FLOOR_MIN_DB, 10 * Math.log10(power / FULL_SCALE_POWER)) : FLOOR_MIN_DB;
    this.lastLevelDb = level;

    // 2. Voiced decision against the floor as it stood before this frame (so a loud frame does
    // not raise its own bar), with hysteresis inside a turn.
    if (Number.isNaN(this.floorDb)) this.floorDb = level;
    const h = this.inTurn ? t.hysteresisDb : 0;
    const voiced = level > Math.max(t.absoluteDb - h, this.floorDb + t.marginDb - h);
    this.lastVoiced = voiced;

    // 3. Floor update: fast fall in the power domain, slow rate-limited rise in dB.
    const secs = n / t.sampleRate;
    if (level < this.floorDb) {
      const a = 1 - Math.exp(-secs / t.floorFallSecs);
      const floorPow = Math.pow(10, this.floorDb / 10);
      const levelPow = Math.pow(10, level / 10);
      this.floorDb = Math.max(FLOOR_MIN_DB, 10 * Math.log10(floorPow + a * (levelPow - floorPow)));
    } else {
      this.floorDb = Math.min(level, this.floorDb + t.floorRiseDbPerSec * secs);
    }

    // 4. Turn state.
    if (!this.inTurn) {
      if (voiced) {
        this.voicedRun += n;
        this.unvoicedRun = 0;
        if (this.voicedRun + SAMPLE_EPSILON >= this.startSamples) {
          this.inTurn = true;
          this.voicedRun = 0;
          return 'speech_started';
        }
      } else if (this.voicedRun > 0) {
        this.unvoicedRun += n;
        if (this.unvoicedRun > this.dropoutSamples + SAMPLE_EPSILON) {
          this.voicedRun = 0;
          this.unvoicedRun = 0;
        }
      }
      return undefined;
    }
    if (voiced) {
      this.unvoicedRun = 0;
      return undefined;
    }
    this.unvoicedRun += n;
    if (this.unvoicedRun + SAMPLE_EPSILON >= this.stopSamples) {
      this.inTurn = false;
      this.unvoicedRun = 0;
      this.voicedRun = 0;
      return 'speech_stopped';
    }
    return undefined;
  }

  /** Forgets everything: the turn, the counters and the noise floor (re-learnt from the next frame). */
  reset(): void {
    this.inTurn = false;
    this.floorDb = Number.NaN;
    this.voicedRun = 0;
    this.unvoicedRun = 0;
    this.lastLevelDb = Number.NaN;
    this.lastVoiced = false;
  }
}
