/**
 * The decision of answering-machine detection (src/agent/machine-detector.ts) alone, driven by
 * hand: the VAD edges, the raw audio (20 ms frames at 24 kHz) and transcripts, on the answer's
 * clock. The joined runtime: test/agent/runtime/machine-detection.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { MachineDetector, soundsLikeVoicemail, type MachineDecision } from '../../src/agent/machine-detector.ts';
import { concat, frames, silence, voice, whiteNoise } from './vad/signals.ts';

function detector(over: { beep?: boolean; transcript?: boolean } = {}) {
  const decisions: MachineDecision[] = [];
  const d = new MachineDetector({ sampleRate: 24_000, vadStartMs: 200, vadStopMs: 800, ...over, onDecision: (x) => void decisions.push(x) }, 0);
  /** Feeds audio from `startMs`, calling `edges[ms]` at that frame's end. */
  const play = (pcm: Int16Array, edges: Record<number, 'start' | 'stop'> = {}, startMs = 0) => {
    let now = startMs;
    for (const f of frames(pcm)) {
      now += 20;
      if (edges[now] === 'start') d.speechStarted(now);
      if (edges[now] === 'stop') d.speechStopped(now);
      d.audio(f, now);
    }
    return now;
  };
  return { d, decisions, play };
}

describe('MachineDetector', () => {
  it('cadence: a turn still open greeting (2 s) + stop_secs after its start is a machine; a short one that stopped is a human', () => {
    const m = detector();
    m.play(concat(silence(0.3), voice(3.5)), { 500: 'start' });
    // Back-dated start 300 ms; machine at 300 + 2000 + 800.
    expect(m.decisions).toEqual([{ result: 'machine', by: 'long_greeting', decidedAfterMs: 3100 }]);
    const h = detector();
    h.play(concat(silence(0.3), voice(0.6), silence(1.0)), { 500: 'start', 1700: 'stop' });
    expect(h.decisions).toEqual([{ result: 'human', by: 'short_greeting', decidedAfterMs: 1700 }]);
  });

  it('a VAD turn opened on the line\'s noise before the hello starts at the hello (the onset of the raw audio)', () => {
    // What RNNoise's first fraction of a second does to the energy VAD: a turn at 220 ms on
    // noise, held open through the callee's 1.5 s "hello, this is Sam" until 3,020 ms.
    const m = detector();
    const noise = () => whiteNoise(4, -45, 3);
    const pcm = concat(noise().subarray(0, 24_000 * 0.7), voice(1.5, { levelDb: -20, syllableHz: 4, syllableFloor: 0.3 }), noise().subarray(0, 24_000 * 1.8));
    m.play(pcm, { 220: 'start', 3020: 'stop' });
    expect(m.decisions).toEqual([{ result: 'human', by: 'short_greeting', decidedAfterMs: 3020 }]);
  });

  it('a beep decides machine at once (and is heard after the decision too); off: not listened for', () => {
    const tone = new Int16Array(24_000 * 0.4).map((_, i) => Math.round(8000 * Math.sin((2 * Math.PI * 1400 * i) / 24_000)));
    const m = detector();
    m.play(concat(silence(0.2), tone));
    expect(m.decisions).toEqual([{ result: 'machine', by: 'beep', decidedAfterMs: expect.any(Number) }]);
    expect(m.decisions[0]!.decidedAfterMs).toBeLessThanOrEqual(200 + 180);
    expect(m.d.beep).toBe(true);
    const off = detector({ beep: false });
    off.play(concat(silence(0.2), tone));
    expect(off.decisions).toEqual([]);
    expect(off.d.beep).toBe(false);
  });

  it('voicemail phrases decide machine; ordinary answers do not; off: ignored', () => {
    for (const t of ["Hi, you've reached Sam", 'please leave a message after the tone', 'The person you are calling is not available', 'this is the voicemail of', "I can't take your call"]) {
      expect(soundsLikeVoicemail(t), t).toBe(true);
    }
    for (const t of ['Hello?', 'Yes, Sam speaking.', 'Who is this?', 'Hi, can I help you?']) expect(soundsLikeVoicemail(t), t).toBe(false);
    const m = detector();
    m.d.transcript('please leave a message', 900);
    expect(m.decisions).toEqual([{ result: 'machine', by: 'transcript', decidedAfterMs: 900 }]);
    const off = detector({ transcript: false });
    off.d.transcript('please leave a message', 900);
    expect(off.decisions).toEqual([]);
  });

  it('nothing decided by 5 s: unknown, once', () => {
    const m = detector();
    m.play(silence(6));
    expect(m.decisions).toEqual([{ result: 'unknown', by: 'max_time', decidedAfterMs: 5000 }]);
  });
});
