/** The Hume Octave adapter against a fake streaming TTS endpoint on loopback (fakes/hume.ts). */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { TtsError } from '../../../src/agent/errors.ts';
import { HumeTtsProvider } from '../../../src/agent/providers/tts/hume.ts';
import { createTtsProviders } from '../../../src/agent/providers/tts/index.ts';
import { REALISTIC, toneFrequency } from './fakes/common.ts';
import { startFakeHume, type FakeHume } from './fakes/hume.ts';
import { resetFake } from './fakes/vendor-fake.ts';
import { chunksBeforeError, collect, concat, rejection, request, rms, until } from './helpers.ts';

const KEY = 'hume-test-secret-321';
const VOICE_UUID = '5bb7de05-c8fe-426a-8fcc-ba4fc4ce9f9c';

describe('HumeTtsProvider (Octave streaming JSON)', () => {
  let fake: FakeHume;
  let tts: HumeTtsProvider;
  beforeAll(async () => {
    fake = await startFakeHume(KEY);
  });
  afterAll(() => fake.close());
  beforeEach(() => {
    fake.requests.length = 0;
    resetFake(fake);
    tts = new HumeTtsProvider({ baseUrl: fake.url, apiKey: KEY, name: 'provider_4' });
  });

  /** The tone's length at 24 kHz, give or take the resampler's few samples at the edges. */
  const expectLength = (audio: Int16Array, text: string): void => {
    expect(Math.abs(audio.length - text.length * fake.samplesPerChar)).toBeLessThanOrEqual(64);
  };

  it('posts the documented request and resamples the 48 kHz PCM lines once to 24 kHz', async () => {
    const text = 'Hello from the Octave voice.';
    const chunks = await collect(tts, request(text, { voiceId: VOICE_UUID, speed: 0.2, stability: 0.5 }));
    expect(fake.requests).toHaveLength(1);
    const req = fake.requests[0]!;
    expect(req.headers['x-hume-api-key']).toBe(KEY);
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.body).toEqual({
      // speed clamped to 0.5; stability has no Hume parameter
      utterances: [{ text, voice: { id: VOICE_UUID }, speed: 0.5 }],
      format: { type: 'pcm' },
      strip_headers: true,
      instant_mode: true,
    });
    expect(chunks.length).toBeGreaterThan(3);
    const audio = concat(chunks);
    expectLength(audio, text);
    expect(rms(audio, 200, audio.length - 200)).toBeGreaterThan(4000);
    expect(toneFrequency(audio.subarray(200, audio.length - 200), 24000)).toBeCloseTo(fake.hz, -1);
  });

  it('names a library voice by name, sends the model as version, and applies volume as a gain', async () => {
    const versioned = new HumeTtsProvider({ baseUrl: fake.url, apiKey: KEY, model: '2' });
    const loud = concat(await collect(versioned, request('Same words here.', { voiceId: 'Ava Song' })));
    const quiet = concat(await collect(versioned, request('Same words here.', { voiceId: 'Ava Song', volume: 0.5 })));
    expect(fake.requests[0]!.body.utterances).toEqual([{ text: 'Same words here.', voice: { name: 'Ava Song', provider: 'HUME_AI' } }]);
    expect(fake.requests[0]!.body.version).toBe('2');
    expect(rms(quiet) / rms(loud)).toBeCloseTo(0.5, 1);
  });

  it('the sentences of a turn share a keep-alive connection and continue the completed generation', async () => {
    const turn = new AbortController();
    const a = concat(await collect(tts, request('The first sentence.', { signal: turn.signal, voiceId: 'Ava Song' })));
    const b = concat(await collect(tts, request('The second one.', { signal: turn.signal, voiceId: 'Ava Song' })));
    expectLength(a, 'The first sentence.');
    expectLength(b, 'The second one.');
    const [first, second] = fake.requests;
    expect(second!.clientPort).toBe(first!.clientPort); // one TCP connection
    expect(first!.body.context).toBeUndefined();
    expect(second!.body.context).toEqual({ generation_id: first!.generationId });
    // another turn starts afresh
    await collect(tts, request('Other turn.', { voiceId: 'Ava Song' }));
    expect(fake.requests[2]!.body.context).toBeUndefined();
  });

  it('barge-in aborts the request (the server sees the client go) and ends quietly', async () => {
    const turn = new AbortController();
    let n = 0;
    for await (const _c of tts.synthesize(request('A long sentence that the caller will interrupt.', { signal: turn.signal, voiceId: 'Ava Song' }))) {
      if (++n === 2) turn.abort();
    }
    expect(n).toBe(2);
    await until(() => fake.requests[0]!.aborted);
  });

  it('an error line mid-stream fails the sentence with the vendor words; the next one works', async () => {
    fake.fault = { afterChunks: 2, kind: 'error' };
    const { chunks: yielded, err } = await chunksBeforeError(tts, request('This one breaks in the middle.', { voiceId: 'Ava Song' }));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_BAD_RESPONSE');
    expect(err.message).toContain('generation failed');
    expect(yielded).toHaveLength(2);
    expectLength(concat(await collect(tts, request('Recovered.', { voiceId: 'Ava Song' }))), 'Recovered.');
  });

  it('a connection dropped mid-stream is VENDOR_UNREACHABLE', async () => {
    fake.fault = { afterChunks: 1, kind: 'drop' };
    const err = await rejection(collect(tts, request('Dropped halfway through.', { voiceId: 'Ava Song' })));
    expect(err.code).toBe('VENDOR_UNREACHABLE');
    expectLength(concat(await collect(tts, request('Again.', { voiceId: 'Ava Song' }))), 'Again.');
  });

  it('a server that goes silent fails the sentence with VENDOR_TIMEOUT instead of hanging', async () => {
    fake.pacing = { ...REALISTIC, firstChunkMs: 600 };
    const slow = new HumeTtsProvider({ baseUrl: fake.url, apiKey: KEY, stallMs: 100 });
    const err = await rejection(collect(slow, request('Too slow.', { voiceId: 'Ava Song' })));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_TIMEOUT');
    fake.pacing = { firstChunkMs: 30, gapMs: 20, chunkMs: 40 }; // a server that answers within the stall time
    expect((await collect(slow, request('Too slow.', { voiceId: 'Ava Song' }))).length).toBeGreaterThan(0);
  });

  it('a wrong API key is VENDOR_HTTP_STATUS 401 saying so, without the key', async () => {
    const wrong = new HumeTtsProvider({ baseUrl: fake.url, apiKey: 'hume-wrong-key-654' });
    const err = await rejection(collect(wrong, request('Hello.', { voiceId: 'Ava Song' })));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_HTTP_STATUS');
    expect(err.status).toBe(401);
    expect(err.message).toContain('API key was rejected');
    expect(err.message).not.toContain('wrong-key');
  });

  it('is built for type hume and timed by the first-byte decorator under its slot and type', async () => {
    const seen: Array<[string, string]> = [];
    const providers = createTtsProviders({ provider_4: { type: 'hume', base_url: fake.url, api_key: KEY } }, { onFirstByte: (slot, type) => seen.push([slot, type]) });
    expectLength(concat(await collect(providers.get('provider_4'), request('Timed.', { voiceId: 'Ava Song' }))), 'Timed.');
    expect(seen).toEqual([['provider_4', 'hume']]);
  });
});
