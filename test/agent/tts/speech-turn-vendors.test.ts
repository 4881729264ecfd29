/**
 * The vendor adapters inside the runtime's SpeechTurn (one agent turn: sentences one ahead,
 * paced audio), in real time against their loopback fakes: a vendor error on one sentence is
 * reported for that sentence and the turn goes on to speak the others, as with the existing
 * adapters; and a cut turn (barge-in) stops the vendor.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CartesiaTtsProvider } from '../../../src/agent/providers/tts/cartesia.ts';
import { FishTtsProvider } from '../../../src/agent/providers/tts/fish.ts';
import { HumeTtsProvider } from '../../../src/agent/providers/tts/hume.ts';
import { MinimaxTtsProvider } from '../../../src/agent/providers/tts/minimax.ts';
import type { TtsProvider } from '../../../src/agent/providers/types.ts';
import { SpeechTurn } from '../../../src/agent/speech-turn.ts';
import { base64ToPcm16 } from '../../../src/media/pcm.ts';
import { systemClock, systemTimers } from '../../../src/media/types.ts';
import { startFakeCartesia, type FakeCartesia } from './fakes/cartesia.ts';
import { sleep, type Pacing } from './fakes/common.ts';
import { startFakeFish, type FakeFish } from './fakes/fish.ts';
import { startFakeHume, type FakeHume } from './fakes/hume.ts';
import { startFakeMinimax, type FakeMinimax } from './fakes/minimax.ts';

const KEY = 'turn-test-key';
const SENTENCES = ['The first sentence fails.', 'The second is heard.', 'So is the third.'];
/** Quicker than a real vendor, so the test stays short; still streamed in paced chunks. */
const QUICK: Pacing = { firstChunkMs: 60, gapMs: 15, chunkMs: 40 };

interface Vendor {
  name: string;
  tts(): TtsProvider;
  /** Makes the next generation fail after `afterChunks` chunks. */
  fail(afterChunks: number): void;
  /** Whether the fake saw the turn's stream stopped early (cancel or close). */
  stoppedEarly(): boolean;
  /** Whether the vendor delivers exactly samplesPerChar per character (no resampling). */
  exact: boolean;
}

function speak(tts: TtsProvider, sentences: string[]) {
  const errors: string[] = [];
  let samples = 0;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  const turn = new SpeechTurn({
    turnId: 't1',
    tts,
    voice: { voiceId: 'Ava Song', language: 'en' },
    clock: systemClock,
    timers: systemTimers,
    chunkSamples: 960,
    leadMs: 200,
    sendAudio: (_id, audio) => (samples += base64ToPcm16(audio, { buffer: Buffer.alloc(0) }).length),
    onDone: () => done(),
    onTtsError: (_err, text) => errors.push(text),
  });
  for (const s of sentences) turn.speak(s);
  turn.finish();
  return { turn, errors, finished, samples: () => samples };
}

describe('vendor adapters in a SpeechTurn', () => {
  let cartesia: FakeCartesia;
  let fish: FakeFish;
  let minimax: FakeMinimax;
  let hume: FakeHume;
  const vendors: Vendor[] = [];
  beforeAll(async () => {
    [cartesia, fish, minimax, hume] = await Promise.all([startFakeCartesia(KEY), startFakeFish(KEY), startFakeMinimax(KEY), startFakeHume(KEY)]);
    for (const f of [cartesia, fish, minimax, hume]) f.pacing = { ...QUICK };
    vendors.push(
      {
        name: 'cartesia',
        tts: () => new CartesiaTtsProvider({ baseUrl: cartesia.url, apiKey: KEY, idleCloseMs: 100 }),
        fail: (n) => (cartesia.fault = { afterChunks: n, kind: 'error' }),
        stoppedEarly: () => cartesia.connections.some((c) => c.cancelled.length > 0),
        exact: true,
      },
      {
        name: 'fish',
        tts: () => new FishTtsProvider({ baseUrl: fish.url, apiKey: KEY }),
        fail: (n) => (fish.fault = { afterChunks: n, kind: 'error' }),
        stoppedEarly: () => fish.connections.some((c) => c.closed && !c.finished),
        exact: true,
      },
      {
        name: 'minimax',
        tts: () => new MinimaxTtsProvider({ baseUrl: minimax.url, apiKey: KEY, idleCloseMs: 100 }),
        fail: (n) => (minimax.fault = { afterChunks: n, kind: 'error' }),
        stoppedEarly: () => minimax.connections.some((c) => c.closed && !c.messages.some((m) => m.event === 'task_finish')),
        exact: true,
      },
      {
        name: 'hume',
        tts: () => new HumeTtsProvider({ baseUrl: hume.url, apiKey: KEY }),
        fail: (n) => (hume.fault = { afterChunks: n, kind: 'error' }),
        stoppedEarly: () => hume.requests.some((r) => r.aborted),
        exact: false,
      },
    );
  });
  afterAll(() => Promise.all([cartesia, fish, minimax, hume].map((f) => f.close())));

  for (const name of ['cartesia', 'fish', 'minimax', 'hume']) {
    it(`${name}: an error on one sentence is reported for it and the turn speaks the others`, async () => {
      const v = vendors.find((x) => x.name === name)!;
      v.fail(1);
      const t = speak(v.tts(), SENTENCES);
      await t.finished;
      expect(t.errors).toEqual([SENTENCES[0]]);
      const expected = (SENTENCES[1]!.length + SENTENCES[2]!.length) * 240;
      if (v.exact) expect(t.samples()).toBeGreaterThanOrEqual(expected);
      else expect(Math.abs(t.samples() - expected)).toBeLessThan(960 * 2);
      // the sent audio is the two sentences plus, at most, the failed one's first chunk and the
      // pacer's final padding
      expect(t.samples()).toBeLessThan(expected + 2 * 960 + 960);
    });

    it(`${name}: a cut turn (barge-in) stops the vendor's stream`, async () => {
      const v = vendors.find((x) => x.name === name)!;
      const t = speak(v.tts(), ['A long first sentence that the caller is going to cut short.', 'Never spoken.']);
      for (let i = 0; i < 100 && t.samples() === 0; i++) await sleep(10);
      expect(t.samples()).toBeGreaterThan(0);
      t.turn.cut();
      for (let i = 0; i < 100 && !v.stoppedEarly(); i++) await sleep(10);
      expect(v.stoppedEarly()).toBe(true);
      expect(t.errors).toEqual([]);
    });
  }
});
