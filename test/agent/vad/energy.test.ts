import { describe, expect, it } from 'vitest';
import { EnergyVad, ENERGY_VAD_DEFAULTS, type EnergyVadOptions } from '../../../src/agent/providers/vad/energy.ts';
import type { VadEvent } from '../../../src/agent/providers/types.ts';
import { prng } from '../../helpers/prng.ts';
import { concat, FRAME, frames, mix, pinkNoise, samples, silence, voice, whiteNoise } from './signals.ts';

interface Run {
  events: { event: VadEvent; frame: number }[];
  voiced: boolean[];
  speaking: boolean[];
}

function run(vad: EnergyVad, signal: Int16Array): Run {
  const r: Run = { events: [], voiced: [], speaking: [] };
  frames(signal).forEach((f, i) => {
    const e = vad.process(f);
    if (e !== undefined) r.events.push({ event: e, frame: i });
    r.voiced.push(vad.voiced);
    r.speaking.push(vad.speaking);
  });
  return r;
}

function eventsOf(r: Run, event: VadEvent): number[] {
  return r.events.filter((e) => e.event === event).map((e) => e.frame);
}

/** Frames of `secs` seconds. */
const fr = (secs: number): number => Math.round(samples(secs) / FRAME);

const DEFAULT: EnergyVadOptions = { startSecs: 0.2, stopSecs: 0.8 };

describe('EnergyVad: turn edges on a held vowel over silence', () => {
  // The table of agent vad_settings; the default (0.2, 0.8) first.
  const table: [number, number][] = [
    [0.2, 0.8],
    [0.1, 0.5],
    [0.4, 1.2],
    [0.06, 0.3],
    [0, 0.2],
    [0.5, 2],
  ];
  it.each(table)('startSecs %s, stopSecs %s: start and stop fire on the frames the settings name', (startSecs, stopSecs) => {
    const lead = 1;
    const speech = 2.5;
    const sig = concat(silence(lead), voice(speech, { levelDb: -22, f0: 180, seed: 5 }), silence(stopSecs + 1));
    const r = run(new EnergyVad({ startSecs, stopSecs }), sig);
    // Speech occupies frames [fr(lead), fr(lead + speech)); the start fires on the frame that
    // completes startSecs of voicing; the stop on the frame that completes stopSecs of silence.
    const expectedStart = fr(lead) + Math.max(1, Math.ceil(fr(startSecs) - 1e-9)) - 1;
    const expectedStop = fr(lead + speech) + Math.max(1, fr(stopSecs)) - 1;
    expect(eventsOf(r, 'speech_started')).toHaveLength(1);
    expect(eventsOf(r, 'speech_stopped')).toHaveLength(1);
    expect(Math.abs(eventsOf(r, 'speech_started')[0]! - expectedStart)).toBeLessThanOrEqual(1);
    expect(Math.abs(eventsOf(r, 'speech_stopped')[0]! - expectedStop)).toBeLessThanOrEqual(1);
    // speaking mirrors the events.
    const s = eventsOf(r, 'speech_started')[0]!;
    const e = eventsOf(r, 'speech_stopped')[0]!;
    expect(r.speaking.slice(0, s).some(Boolean)).toBe(false);
    expect(r.speaking.slice(s, e).every(Boolean)).toBe(true);
    expect(r.speaking.slice(e).some(Boolean)).toBe(false);
  });

  it('does not start for a burst shorter than startSecs', () => {
    for (const burst of [0.06, 0.1, 0.16]) {
      const sig = concat(silence(1), voice(burst, { levelDb: -18, seed: 2 }), silence(2));
      const r = run(new EnergyVad(DEFAULT), sig);
      expect(r.events, `burst of ${burst} s`).toEqual([]);
      expect(r.voiced.filter(Boolean).length).toBeGreaterThan(0); // it was heard, only too short
    }
  });

  it('starts for a burst just as long as startSecs', () => {
    const sig = concat(silence(1), voice(0.22, { levelDb: -18, seed: 2 }), silence(2));
    const r = run(new EnergyVad(DEFAULT), sig);
    expect(eventsOf(r, 'speech_started')).toHaveLength(1);
  });

  it('does not add up two short bursts separated by more than the dropout allowance', () => {
    const burst = voice(0.12, { levelDb: -18, seed: 4 });
    const sig = concat(silence(1), burst, silence(0.3), burst, silence(0.3), burst, silence(2));
    const r = run(new EnergyVad(DEFAULT), sig);
    expect(r.events).toEqual([]);
  });

  it('forgives a dropout of a frame or two while counting towards startSecs, without counting it', () => {
    // 0.12 s voiced, 0.04 s (two frames) of silence, 0.12 s voiced: the start needs the 10th
    // voiced frame, i.e. the 4th frame of the second part.
    const part = voice(0.12, { levelDb: -18, seed: 4 });
    const sig = concat(silence(1), part, silence(0.04), part, silence(2));
    const r = run(new EnergyVad(DEFAULT), sig);
    expect(eventsOf(r, 'speech_started')).toEqual([fr(1) + 6 + 2 + 4 - 1]);
  });

  it('does not stop during a pause shorter than stopSecs, and stops after a longer one', () => {
    const v = (secs: number, seed: number): Int16Array => voice(secs, { levelDb: -20, seed });
    const sig = concat(silence(0.5), v(1, 1), silence(0.5), v(0.8, 2), silence(0.7), v(0.6, 3), silence(1.0), v(0.6, 4), silence(1.2));
    const r = run(new EnergyVad(DEFAULT), sig);
    // One turn over the first three parts (pauses 0.5 and 0.7 s < 0.8 s), a second one after the 1 s pause.
    const end3 = fr(0.5 + 1 + 0.5 + 0.8 + 0.7 + 0.6);
    expect(eventsOf(r, 'speech_started')).toEqual([fr(0.5) + 9, end3 + fr(1.0) + 9]);
    expect(eventsOf(r, 'speech_stopped')).toEqual([end3 + fr(0.8) - 1, end3 + fr(1.0) + fr(0.6) + fr(0.8) - 1]);
  });

  it('hysteresis: a held vowel wavering around the start threshold does not flicker once started', () => {
    // Background white noise at -50 dBFS: start threshold about -41 dBFS (floor + 9 dB). The
    // vowel is at about -38 dBFS with a +-3 dB tremolo at 5 Hz, so its troughs fall below
    // the start threshold but stay above the in-turn threshold (3 dB lower).
    const n = samples(1.5);
    const vowel = voice(1.5, { levelDb: -38, seed: 9, f0: 120 });
    const wobble = new Int16Array(n);
    for (let i = 0; i < n; i++) wobble[i] = Math.round(vowel[i]! * Math.pow(10, (3 * Math.sin((2 * Math.PI * 5 * i) / 24000)) / 20));
    const sig = mix(concat(silence(1), wobble, silence(1.5)), whiteNoise(4, -50, 3));
    const vad = new EnergyVad(DEFAULT);
    const r = run(vad, sig);
    const starts = eventsOf(r, 'speech_started');
    expect(starts).toHaveLength(1);
    const voiceEnd = fr(2.5);
    expect(r.voiced.slice(starts[0]!, voiceEnd - 1).every(Boolean)).toBe(true);
    expect(eventsOf(r, 'speech_stopped')).toEqual([voiceEnd + fr(0.8) - 1]);
    // Without hysteresis the same signal flickers: some vowel frames are unvoiced.
    const r0 = run(new EnergyVad({ ...DEFAULT, hysteresisDb: 0 }), sig);
    expect(r0.voiced.slice(fr(1) + 2, voiceEnd - 1).some((v) => !v)).toBe(true);
  });
});

describe('EnergyVad: speech over noise', () => {
  const kinds = { white: whiteNoise, pink: pinkNoise } as const;
  const cases: [keyof typeof kinds, number][] = [];
  for (const kind of ['white', 'pink'] as const) for (const snr of [30, 20, 15, 10]) cases.push([kind, snr]);

  it.each(cases)('held vowel over %s noise at SNR %s dB: start and stop on time', (kind, snr) => {
    const sig = mix(concat(silence(1), voice(2, { levelDb: -20, seed: snr }), silence(1.5)), kinds[kind](4.5, -20 - snr, 100 + snr));
    const r = run(new EnergyVad(DEFAULT), sig);
    expect(eventsOf(r, 'speech_started')).toHaveLength(1);
    expect(eventsOf(r, 'speech_stopped')).toHaveLength(1);
    expect(Math.abs(eventsOf(r, 'speech_started')[0]! - (fr(1) + 9))).toBeLessThanOrEqual(1);
    expect(Math.abs(eventsOf(r, 'speech_stopped')[0]! - (fr(3) + fr(0.8) - 1))).toBeLessThanOrEqual(1);
  });

  const syllabic: [keyof typeof kinds, number][] = [
    ['white', 30],
    ['white', 20],
    ['pink', 30],
    ['pink', 20],
    ['pink', 15],
  ];
  it.each(syllabic)('syllabic speech (4 Hz) over %s noise at peak SNR %s dB: one turn, no flicker', (kind, snr) => {
    const sig = mix(concat(silence(1), voice(3, { levelDb: -20, syllableHz: 4, seed: snr }), silence(1.5)), kinds[kind](5.5, -20 - snr, 200 + snr));
    const r = run(new EnergyVad(DEFAULT), sig);
    const starts = eventsOf(r, 'speech_started');
    const stops = eventsOf(r, 'speech_stopped');
    expect(starts).toHaveLength(1);
    expect(stops).toHaveLength(1);
    // Within the first two syllables (0.5 s), and at least startSecs in.
    expect(starts[0]!).toBeGreaterThanOrEqual(fr(1) + 9);
    expect(starts[0]!).toBeLessThan(fr(1.5));
    // The last syllable fades out in its last ~90 ms; the stop follows 0.8 s of unvoiced frames.
    expect(stops[0]!).toBeGreaterThanOrEqual(fr(4) + fr(0.8) - 1 - fr(0.1));
    expect(stops[0]!).toBeLessThanOrEqual(fr(4) + fr(0.8));
  });

  it('steady background noise at -40 dBFS never starts a turn (white, pink, 20 s each)', () => {
    for (const noise of [whiteNoise(20, -40, 1), pinkNoise(20, -40, 2), pinkNoise(20, -30, 3)]) {
      const vad = new EnergyVad(DEFAULT);
      const r = run(vad, noise);
      expect(r.events).toEqual([]);
      expect(r.voiced.filter(Boolean)).toEqual([]);
    }
  });

  it('noise above the absolute threshold does not start a turn once the floor has learnt it; speech over it does', () => {
    const vad = new EnergyVad(DEFAULT);
    const sig = mix(concat(silence(3), voice(1, { levelDb: -16, seed: 8 }), silence(1.5)), whiteNoise(5.5, -36, 8));
    const r = run(vad, sig);
    expect(eventsOf(r, 'speech_started')).toEqual([fr(3) + 9]);
    expect(eventsOf(r, 'speech_stopped')).toEqual([fr(4) + fr(0.8) - 1]);
  });

  it('tracks a noise floor that rises slowly (pink noise from -60 to -30 dBFS over 30 s)', () => {
    const secs = 30;
    const noise = pinkNoise(secs + 3, -20, 5); // scaled below by -40 .. -10 dB
    const n = samples(secs + 3);
    const ramp = new Int16Array(n);
    const rampDb = (i: number): number => -60 + Math.min(30, (30 * i) / samples(secs));
    for (let i = 0; i < n; i++) ramp[i] = Math.round(noise[i]! * Math.pow(10, (rampDb(i) + 20) / 20));
    const vad = new EnergyVad(DEFAULT);
    const r = run(vad, ramp);
    expect(r.events).toEqual([]);
    // The floor sits at the quiet end of the noise's frame levels: within a few dB of its RMS.
    expect(vad.noiseFloorDb).toBeGreaterThan(-30 - 4);
    expect(vad.noiseFloorDb).toBeLessThanOrEqual(-30 + 0.5);
    // Speech 15 dB over the risen noise is still found, on time.
    const after = mix(concat(voice(1, { levelDb: -15, seed: 6 }), silence(1)), pinkNoise(2, -30, 6));
    const r2 = run(vad, after);
    expect(eventsOf(r2, 'speech_started')).toEqual([9]);
    expect(eventsOf(r2, 'speech_stopped')).toHaveLength(1);
  });

  it('falls quickly when the noise drops, but barely for one lost (all-zero) frame', () => {
    const vad = new EnergyVad(DEFAULT);
    run(vad, whiteNoise(2, -30, 4));
    const before = vad.noiseFloorDb;
    vad.process(new Int16Array(FRAME));
    expect(before - vad.noiseFloorDb).toBeLessThan(1);
    // Noise continues at -30: no event from the lost frame.
    expect(run(vad, whiteNoise(2, -30, 5)).events).toEqual([]);
    // The noise drops by 25 dB to -55: the floor follows within 0.7 s ...
    run(vad, whiteNoise(0.7, -55, 6));
    expect(vad.noiseFloorDb).toBeLessThan(-50);
    // ... so quieter speech is found again.
    const r = run(vad, concat(voice(0.6, { levelDb: -35, seed: 7 }), silence(1)));
    expect(eventsOf(r, 'speech_started')).toEqual([9]);
  });

  it('documented limit: a sudden loud noise is taken for speech, and the turn ends once the floor has caught up', () => {
    const vad = new EnergyVad(DEFAULT);
    const r = run(vad, concat(whiteNoise(1, -60, 1), whiteNoise(20, -30, 2)));
    expect(eventsOf(r, 'speech_started')).toEqual([fr(1) + 9]);
    // 30 dB at 2 dB/s, minus the margin: the stop comes 10-15 s later, not never.
    const stops = eventsOf(r, 'speech_stopped');
    expect(stops).toHaveLength(1);
    expect(stops[0]! - fr(1)).toBeGreaterThan(fr(10));
    expect(stops[0]! - fr(1)).toBeLessThan(fr(16));
  });
});

describe('EnergyVad: state', () => {
  it('reset() closes the turn silently and re-learns the floor', () => {
    const vad = new EnergyVad(DEFAULT);
    const r = run(vad, concat(silence(0.5), voice(0.5, { levelDb: -20, seed: 1 })));
    expect(eventsOf(r, 'speech_started')).toHaveLength(1);
    expect(vad.speaking).toBe(true);
    vad.reset();
    expect(vad.speaking).toBe(false);
    expect(Number.isNaN(vad.noiseFloorDb)).toBe(true);
    // Silence after the reset: no speech_stopped (the turn was forgotten).
    expect(run(vad, silence(2)).events).toEqual([]);
    // A new turn counts from scratch.
    const r2 = run(vad, concat(voice(0.5, { levelDb: -20, seed: 2 }), silence(1)));
    expect(r2.events).toEqual([
      { event: 'speech_started', frame: 9 },
      { event: 'speech_stopped', frame: fr(0.5) + fr(0.8) - 1 },
    ]);
  });

  it('reset() forgets a partial start count', () => {
    const vad = new EnergyVad(DEFAULT);
    run(vad, concat(silence(0.5), voice(0.14, { levelDb: -20, seed: 1 })));
    vad.reset();
    const r = run(vad, concat(silence(0.5), voice(0.5, { levelDb: -20, seed: 2 }), silence(1)));
    expect(eventsOf(r, 'speech_started')).toEqual([fr(0.5) + 9]);
  });

  it('a DC offset is not energy', () => {
    const vad = new EnergyVad(DEFAULT);
    const dc = new Int16Array(FRAME).fill(8000);
    for (let i = 0; i < 50; i++) expect(vad.process(dc)).toBeUndefined();
    expect(vad.voiced).toBe(false);
    expect(vad.levelDb).toBe(-100);
  });

  it('random frame lengths give the same decisions as the durations say', () => {
    // Durations are counted in samples: 10 ms frames need twice as many frames.
    const rand = prng(3);
    const sig = concat(silence(1), voice(1, { levelDb: -20, seed: rand() * 1000 }), silence(1.5));
    const vad = new EnergyVad(DEFAULT);
    const ev: [VadEvent, number][] = [];
    for (let at = 0; at + 240 <= sig.length; at += 240) {
      const e = vad.process(sig.subarray(at, at + 240));
      if (e !== undefined) ev.push([e, at + 240]);
    }
    expect(ev).toEqual([
      ['speech_started', samples(1.2)],
      ['speech_stopped', samples(2.8)],
    ]);
  });

  it('rejects invalid settings', () => {
    expect(() => new EnergyVad({ startSecs: -1, stopSecs: 0.8 })).toThrow(RangeError);
    expect(() => new EnergyVad({ startSecs: 0.2, stopSecs: Number.NaN })).toThrow(RangeError);
    expect(() => new EnergyVad({ ...DEFAULT, sampleRate: 0 })).toThrow(RangeError);
    expect(ENERGY_VAD_DEFAULTS.absoluteDb).toBe(-45);
  });
});
