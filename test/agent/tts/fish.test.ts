/** The Fish Audio adapter against a fake live TTS WebSocket on loopback (fakes/fish.ts). */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { TtsError } from '../../../src/agent/errors.ts';
import { FishTtsProvider } from '../../../src/agent/providers/tts/fish.ts';
import { createTtsProviders } from '../../../src/agent/providers/tts/index.ts';
import { REALISTIC, toneFrequency } from './fakes/common.ts';
import { startFakeFish, type FakeFish } from './fakes/fish.ts';
import { resetFake } from './fakes/vendor-fake.ts';
import { chunksBeforeError, collect, concat, rejection, request, rms, until } from './helpers.ts';

const KEY = 'fish-test-secret-456';

describe('FishTtsProvider (live TTS WebSocket, MessagePack)', () => {
  let fake: FakeFish;
  let tts: FishTtsProvider;
  beforeAll(async () => {
    fake = await startFakeFish(KEY);
  });
  afterAll(() => fake.close());
  beforeEach(() => {
    fake.connections.length = 0;
    resetFake(fake);
    tts = new FishTtsProvider({ baseUrl: fake.url, apiKey: KEY, name: 'provider_6' });
  });

  it('sends the documented headers and MessagePack events, and yields the tone at 24 kHz with its full length', async () => {
    const text = 'Hello from the fish voice.';
    const chunks = await collect(tts, request(text, { voiceId: '802e3bc2b27e49c2995d23ef70e6ac89', speed: 3, volume: 0.5, stability: 0.3 }));
    expect(fake.connections).toHaveLength(1);
    const conn = fake.connections[0]!;
    expect(conn.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(conn.headers.model).toBe('s2-pro');
    expect(conn.allBinary).toBe(true);
    expect(conn.events).toEqual([
      {
        event: 'start',
        request: {
          text: '',
          format: 'pcm',
          sample_rate: 24000,
          latency: 'balanced',
          reference_id: '802e3bc2b27e49c2995d23ef70e6ac89',
          // speed clamped to 2.0; volume 0.5 is -6 dB; stability has no Fish parameter
          prosody: { speed: 2, volume: -6 },
        },
      },
      { event: 'text', text: `${text} ` },
      { event: 'flush' },
      { event: 'stop' },
    ]);
    expect(chunks.length).toBeGreaterThan(3);
    const audio = concat(chunks);
    expect(audio.length).toBe(text.length * fake.samplesPerChar);
    expect(rms(audio)).toBeGreaterThan(4000);
    expect(toneFrequency(audio, 24000)).toBeCloseTo(fake.hz, -1);
    await until(() => conn.closed);
  });

  it('the sentences of a turn each get their own session (the protocol marks no sentence end)', async () => {
    const turn = new AbortController();
    const [a, b] = await Promise.all([collect(tts, request('One sentence.', { signal: turn.signal })), collect(tts, request('Two.', { signal: turn.signal }))]);
    expect(concat(a).length).toBe('One sentence.'.length * fake.samplesPerChar);
    expect(concat(b).length).toBe('Two.'.length * fake.samplesPerChar);
    expect(fake.connections).toHaveLength(2);
    expect(fake.connections.every((c) => c.finished)).toBe(true);
  });

  it('barge-in closes the socket before finish and ends the iteration quietly', async () => {
    const turn = new AbortController();
    let n = 0;
    for await (const _c of tts.synthesize(request('A long sentence the caller will interrupt.', { signal: turn.signal }))) {
      if (++n === 2) turn.abort();
    }
    expect(n).toBe(2);
    const conn = fake.connections[0]!;
    await until(() => conn.closed);
    expect(conn.finished).toBe(false);
  });

  it('finish with reason error mid-stream fails the sentence; the next one works', async () => {
    fake.fault = { afterChunks: 2, kind: 'error' };
    const { chunks: yielded, err } = await chunksBeforeError(tts, request('This one breaks in the middle.'));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_BAD_RESPONSE');
    expect(err.message).toContain('reason error');
    expect(yielded).toHaveLength(2);
    expect(concat(await collect(tts, request('Next.'))).length).toBe('Next.'.length * fake.samplesPerChar);
  });

  it('a socket dropped mid-stream is VENDOR_UNREACHABLE', async () => {
    fake.fault = { afterChunks: 1, kind: 'drop' };
    const err = await rejection(collect(tts, request('Dropped halfway through.')));
    expect(err.code).toBe('VENDOR_UNREACHABLE');
    expect(concat(await collect(tts, request('Again.'))).length).toBe('Again.'.length * fake.samplesPerChar);
  });

  it('a server that goes silent fails the sentence with VENDOR_TIMEOUT instead of hanging', async () => {
    fake.pacing = { ...REALISTIC, firstChunkMs: 600 };
    const slow = new FishTtsProvider({ baseUrl: fake.url, apiKey: KEY, stallMs: 100 });
    const err = await rejection(collect(slow, request('Too slow.')));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_TIMEOUT');
    fake.pacing = { firstChunkMs: 30, gapMs: 20, chunkMs: 40 }; // a server that answers within the stall time
    expect((await collect(slow, request('Too slow.'))).length).toBeGreaterThan(0);
  });

  it('a wrong API key is VENDOR_HTTP_STATUS 401 saying so, without the key', async () => {
    const wrong = new FishTtsProvider({ baseUrl: fake.url, apiKey: 'fish-wrong-key-789' });
    const err = await rejection(collect(wrong, request('Hello.')));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_HTTP_STATUS');
    expect(err.status).toBe(401);
    expect(err.message).toContain('API key was rejected');
    expect(err.message).not.toContain('wrong-key');
  });

  it('is built for type fish and timed by the first-byte decorator under its slot and type', async () => {
    const seen: Array<[string, string]> = [];
    const providers = createTtsProviders({ provider_6: { type: 'fish', base_url: fake.url, api_key: KEY, model: 's1' } }, { onFirstByte: (slot, type) => seen.push([slot, type]) });
    expect(concat(await collect(providers.get('provider_6'), request('Timed.'))).length).toBe('Timed.'.length * fake.samplesPerChar);
    expect(fake.connections[0]!.headers.model).toBe('s1');
    expect(seen).toEqual([['provider_6', 'fish']]);
  });
});
