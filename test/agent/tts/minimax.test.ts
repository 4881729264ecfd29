/** The MiniMax adapter against a fake T2A WebSocket on loopback (fakes/minimax.ts). */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { TtsError } from '../../../src/agent/errors.ts';
import { createTtsProviders } from '../../../src/agent/providers/tts/index.ts';
import { MinimaxTtsProvider } from '../../../src/agent/providers/tts/minimax.ts';
import { REALISTIC, toneFrequency } from './fakes/common.ts';
import { startFakeMinimax, type FakeMinimax, type FinalAudio } from './fakes/minimax.ts';
import { resetFake, toneFor } from './fakes/vendor-fake.ts';
import { chunksBeforeError, collect, concat, rejection, request, rms, until } from './helpers.ts';

const KEY = 'eyJminimax-test-secret-789';

describe('MinimaxTtsProvider (T2A WebSocket)', () => {
  let fake: FakeMinimax;
  let tts: MinimaxTtsProvider;
  beforeAll(async () => {
    fake = await startFakeMinimax(KEY);
  });
  afterAll(() => fake.close());
  beforeEach(() => {
    fake.connections.length = 0;
    resetFake(fake);
    fake.finalAudio = 'empty';
    tts = new MinimaxTtsProvider({ baseUrl: fake.url, apiKey: KEY, name: 'provider_5', idleCloseMs: 100 });
  });

  it('sends the documented header and events, and yields the hex tone as 24 kHz PCM with its full length', async () => {
    const text = 'Hello from the minimax voice.';
    const chunks = await collect(tts, request(text, { voiceId: 'English_expressive_narrator', speed: 1.3, volume: 1.5, similarityBoost: 0.7 }));
    const conn = fake.connections[0]!;
    expect(fake.connections).toHaveLength(1);
    expect(conn.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(conn.messages[0]).toEqual({
      event: 'task_start',
      model: 'speech-2.6-turbo',
      // speed and vol mapped; similarity_boost has no MiniMax parameter
      voice_setting: { voice_id: 'English_expressive_narrator', speed: 1.3, vol: 1.5 },
      audio_setting: { sample_rate: 24000, format: 'pcm', channel: 1 },
    });
    expect(conn.messages[1]).toEqual({ event: 'task_continue', text });
    expect(chunks.length).toBeGreaterThan(3);
    const audio = concat(chunks);
    expect(audio.length).toBe(text.length * fake.samplesPerChar);
    expect(rms(audio)).toBeGreaterThan(4000);
    expect(toneFrequency(audio, 24000)).toBeCloseTo(fake.hz, -1);
    await until(() => conn.closed);
    expect(conn.messages.at(-1)).toEqual({ event: 'task_finish' }); // idle: the task is finished
  });

  it('speaks the sentences of a turn on one socket and task, one after another', async () => {
    const turn = new AbortController();
    const first = 'The first sentence.';
    const second = 'Then another one.';
    const [a, b] = await Promise.all([collect(tts, request(first, { signal: turn.signal })), collect(tts, request(second, { signal: turn.signal }))]);
    expect(concat(a).length).toBe(first.length * fake.samplesPerChar);
    expect(concat(b).length).toBe(second.length * fake.samplesPerChar);
    expect(fake.connections).toHaveLength(1);
    const conn = fake.connections[0]!;
    expect(conn.overlapped).toBe(false); // the second was sent after the first's is_final
    await until(() => conn.closed);
    expect(conn.messages.map((m) => m.event)).toEqual(['task_start', 'task_continue', 'task_continue', 'task_finish']);
  });

  it.each<FinalAudio>(['empty', 'last-chunk', 'whole'])('every audio byte exactly once, in order, when the is_final message carries %s audio', async (finalAudio) => {
    fake.finalAudio = finalAudio;
    const turn = new AbortController();
    const first = 'Short one.';
    const second = 'And a somewhat longer second sentence.';
    const [a, b] = await Promise.all([collect(tts, request(first, { signal: turn.signal })), collect(tts, request(second, { signal: turn.signal }))]);
    const expected = (text: string) => Array.from(new Int16Array(new Uint8Array(toneFor(fake, text, 24000)).buffer));
    // The exact samples: a doubled or dropped final chunk, or a repeat of the whole, changes them.
    expect(Array.from(concat(a))).toEqual(expected(first));
    expect(Array.from(concat(b))).toEqual(expected(second));
    expect(fake.connections).toHaveLength(1);
  });

  it('barge-in closes the socket (no cancel in the protocol) and ends quietly; the next turn works', async () => {
    const turn = new AbortController();
    let n = 0;
    for await (const _c of tts.synthesize(request('A long sentence that the caller will cut.', { signal: turn.signal }))) {
      if (++n === 2) turn.abort();
    }
    expect(n).toBe(2);
    await until(() => fake.connections[0]!.closed);
    expect(fake.connections[0]!.messages.map((m) => m.event)).toEqual(['task_start', 'task_continue']);
    expect(concat(await collect(tts, request('Next turn.'))).length).toBe('Next turn.'.length * fake.samplesPerChar);
  });

  it('task_failed mid-stream fails the sentence with the status; the next turn works', async () => {
    fake.fault = { afterChunks: 2, kind: 'error' };
    const { chunks: yielded, err } = await chunksBeforeError(tts, request('This one breaks in the middle.'));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_BAD_RESPONSE');
    expect(err.message).toContain('task failed (1000 unknown error)');
    expect(yielded).toHaveLength(2);
    expect(concat(await collect(tts, request('Recovered.'))).length).toBe('Recovered.'.length * fake.samplesPerChar);
  });

  it('an error costs one sentence: the one sent behind it is spoken again on a new socket', async () => {
    fake.fault = { afterChunks: 1, kind: 'error' };
    const turn = new AbortController();
    const first = collect(tts, request('This sentence breaks.', { signal: turn.signal }));
    const second = collect(tts, request('This one is spoken.', { signal: turn.signal }));
    expect((await rejection(first)).code).toBe('VENDOR_BAD_RESPONSE');
    expect(concat(await second).length).toBe('This one is spoken.'.length * fake.samplesPerChar);
    expect(fake.connections).toHaveLength(2);
    expect(JSON.stringify(fake.connections[1]!.messages)).toContain('This one is spoken.');
  });

  it('a socket dropped mid-stream is VENDOR_UNREACHABLE; the next sentence of the turn gets a new socket', async () => {
    fake.fault = { afterChunks: 1, kind: 'drop' };
    const turn = new AbortController();
    const err = await rejection(collect(tts, request('Dropped halfway through.', { signal: turn.signal })));
    expect(err.code).toBe('VENDOR_UNREACHABLE');
    expect(concat(await collect(tts, request('Still here.', { signal: turn.signal }))).length).toBe('Still here.'.length * fake.samplesPerChar);
    expect(fake.connections).toHaveLength(2);
  });

  it('a server that goes silent fails the sentence with VENDOR_TIMEOUT instead of hanging', async () => {
    fake.pacing = { ...REALISTIC, firstChunkMs: 600 };
    const slow = new MinimaxTtsProvider({ baseUrl: fake.url, apiKey: KEY, stallMs: 100 });
    const err = await rejection(collect(slow, request('Too slow.')));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_TIMEOUT');
    fake.pacing = { firstChunkMs: 30, gapMs: 20, chunkMs: 40 }; // a server that answers within the stall time
    expect((await collect(slow, request('Too slow.'))).length).toBeGreaterThan(0);
  });

  it('a wrong API key (task_failed 1004) says the key was rejected, without the key', async () => {
    const wrong = new MinimaxTtsProvider({ baseUrl: fake.url, apiKey: 'eyJwrong-key-000' });
    const err = await rejection(collect(wrong, request('Hello.')));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.message).toContain('1004');
    expect(err.message).toContain('API key was rejected');
    expect(err.message).not.toContain('wrong-key');
  });

  it('is built for type minimax and timed by the first-byte decorator under its slot and type', async () => {
    const seen: Array<[string, string]> = [];
    const providers = createTtsProviders({ provider_5: { type: 'minimax', base_url: fake.url, api_key: KEY, model: 'speech-02-turbo' } }, { onFirstByte: (slot, type) => seen.push([slot, type]) });
    expect(concat(await collect(providers.get('provider_5'), request('Timed.'))).length).toBe('Timed.'.length * fake.samplesPerChar);
    expect(fake.connections[0]!.messages[0]!.model).toBe('speech-02-turbo');
    expect(seen).toEqual([['provider_5', 'minimax']]);
  });
});
