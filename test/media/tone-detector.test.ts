/**
 * The beep detector (src/media/tone-detector.ts): a steady single tone in 300-2,500 Hz of at
 * least 150 ms is reported once it has lasted that long, and again when it ends; speech (real
 * espeak-ng speech through G.711, bench/lib/amd-corpus.ts), a DTMF pair, a short blip and a
 * quiet tone are not. Both at the phone's 8 kHz and at the runtime's 24 kHz.
 */
import { describe, expect, it } from 'vitest';
import { ToneDetector, type ToneEvent } from '../../src/media/tone-detector.ts';
import { g711, speak } from '../../bench/lib/amd-corpus.ts';
import { espeakAvailable } from '../helpers/peer-availability.ts';
import { concat } from '../agent/vad/signals.ts';

function sine(rate: number, secs: number, hz: number | number[], amplitude = 8000): Int16Array {
  const f = Array.isArray(hz) ? hz : [hz];
  const out = new Int16Array(Math.round(rate * secs));
  for (let i = 0; i < out.length; i++) out[i] = Math.round(f.reduce((s, x) => s + (amplitude / f.length) * Math.sin((2 * Math.PI * x * i) / rate), 0));
  return out;
}

/** Runs `pcm` through in 20 ms frames; each event with the ms it was reported at (end of its frame). */
function run(rate: number, pcm: Int16Array): Array<ToneEvent & { atMs: number }> {
  const d = new ToneDetector({ sampleRate: rate });
  const frame = rate / 50;
  const out: Array<ToneEvent & { atMs: number }> = [];
  for (let at = 0; at < pcm.length; at += frame) for (const e of d.push(pcm.subarray(at, at + frame))) out.push({ ...e, atMs: ((at + frame) / rate) * 1000 });
  return out;
}

const espeak = espeakAvailable();

describe.each([8000, 24_000])('ToneDetector at %i Hz', (rate) => {
  it('a 1 kHz beep of 400 ms: started after 150 ms of it, ended when it stops', () => {
    const ev = run(rate, concat(new Int16Array(rate * 0.3), sine(rate, 0.4, 1000), new Int16Array(rate * 0.3)));
    expect(ev.map((e) => e.type)).toEqual(['started', 'ended']);
    expect(ev[0]!.hz).toBe(1000);
    expect(ev[0]!.atMs).toBeGreaterThanOrEqual(300 + 150);
    expect(ev[0]!.atMs).toBeLessThanOrEqual(300 + 200);
    expect(ev[1]!.atMs).toBeGreaterThanOrEqual(700);
    expect(ev[1]!.atMs).toBeLessThanOrEqual(740);
    expect(ev[1]!.ms).toBeGreaterThanOrEqual(360);
  });

  it('a 1,410 Hz beep between candidates, in white noise at 10 dB SNR, through G.711', () => {
    let seed = 3;
    const noise = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x7fffffff - 0.5) * 2 * 8000 * 0.316 * Math.sqrt(3) / Math.SQRT2;
    const tone = sine(rate, 0.5, 1410);
    const noisy = tone.map((x) => x + noise());
    const ev = run(rate, rate === 8000 ? g711(noisy) : noisy);
    expect(ev[0]).toMatchObject({ type: 'started' });
    expect(Math.abs(ev[0]!.hz - 1410)).toBeLessThanOrEqual(25);
  });

  it('no tone: a 100 ms blip, a DTMF pair, a tone at -50 dBFS, a tone outside the band', () => {
    expect(run(rate, sine(rate, 0.1, 1000))).toEqual([]);
    expect(run(rate, sine(rate, 0.4, [770, 1336]))).toEqual([]);
    expect(run(rate, sine(rate, 0.4, 1000, 100))).toEqual([]);
    expect(run(rate, sine(rate, 0.4, 150))).toEqual([]);
  });
});

describe.skipIf(espeak.skip)(`ToneDetector on speech${espeak.ok ? '' : `: ${espeak.reason}`}`, () => {
  it('espeak-ng voicemail greetings in several voices, through G.711: no tone', async () => {
    for (const [voice, pitch] of [
      ['en-us', 50],
      ['en-us+f3', 65],
      ['en-gb-scotland', 35],
    ] as const) {
      const pcm = g711(await speak('Hello, you have reached the voicemail of Sam. Please leave a message after the tone.', voice, 160, pitch));
      expect(run(8000, pcm), voice).toEqual([]);
    }
  });
});
