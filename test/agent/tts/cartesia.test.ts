/** The Cartesia adapter against a fake Cartesia TTS WebSocket on loopback (fakes/cartesia.ts). */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { TtsError } from '../../../src/agent/errors.ts';
import WebSocket from 'ws';
import { CartesiaTtsProvider, CARTESIA_VERSION, CONTEXT_CONTINUE_MS } from '../../../src/agent/providers/tts/cartesia.ts';
import { createTtsProviders } from '../../../src/agent/providers/tts/index.ts';
import { CARTESIA_CONTEXT_EXPIRY_MS, startFakeCartesia, type FakeCartesia } from './fakes/cartesia.ts';
import { REALISTIC, sleep, toneFrequency } from './fakes/common.ts';
import { resetFake } from './fakes/vendor-fake.ts';
import { chunksBeforeError, collect, concat, rejection, request, rms, until } from './helpers.ts';

const KEY = 'sk_car_test-secret-123';

describe('CartesiaTtsProvider (TTS WebSocket, contexts)', () => {
  let fake: FakeCartesia;
  let tts: CartesiaTtsProvider;
  beforeAll(async () => {
    fake = await startFakeCartesia(KEY);
  });
  afterAll(() => fake.close());
  beforeEach(() => {
    fake.connections.length = 0;
    resetFake(fake);
    fake.halfSample = false;
    fake.contextExpiryMs = CARTESIA_CONTEXT_EXPIRY_MS;
    fake.key = KEY;
    tts = new CartesiaTtsProvider({ baseUrl: fake.url, apiKey: KEY, name: 'provider_3', idleCloseMs: 100 });
  });

  it('sends the documented handshake and messages, and yields the tone at 24 kHz with its full length', async () => {
    const text = 'Hello there, how are you today?';
    const chunks = await collect(tts, request(text, { voiceId: 'a0e99841', language: 'es', speed: 1.2, volume: 3, stability: 0.5, similarityBoost: 0.9 }));
    expect(fake.connections).toHaveLength(1);
    const conn = fake.connections[0]!;
    expect(conn.headers['x-api-key']).toBe(KEY);
    expect(conn.headers['cartesia-version']).toBe(CARTESIA_VERSION);
    const [speak, flush] = conn.messages;
    const contextId = speak!.context_id;
    expect(contextId).toMatch(/^[0-9a-f-]{36}$/);
    const fields = {
      model_id: 'sonic-3',
      voice: { mode: 'id', id: 'a0e99841' },
      language: 'es',
      output_format: { container: 'raw', encoding: 'pcm_s16le', sample_rate: 24000 },
      // speed within 0.6..1.5 as is, volume clamped to 2.0; stability and similarity_boost have no Cartesia field
      generation_config: { speed: 1.2, volume: 2 },
      context_id: contextId,
    };
    expect(speak).toEqual({ ...fields, transcript: `${text} `, continue: true });
    expect(flush).toEqual({ ...fields, transcript: '', continue: true, flush: true });
    expect(chunks.length).toBeGreaterThan(3); // streamed in several messages
    const audio = concat(chunks);
    expect(audio.length).toBe(text.length * fake.samplesPerChar);
    expect(rms(audio)).toBeGreaterThan(4000);
    expect(toneFrequency(audio, 24000)).toBeCloseTo(fake.hz, -1);
  });

  it('speaks the sentences of one turn as continuations of one context on one socket, then closes the context', async () => {
    const turn = new AbortController();
    const first = 'First sentence here.';
    const second = 'And the second one.';
    const a = collect(tts, request(first, { signal: turn.signal }));
    const b = collect(tts, request(second, { signal: turn.signal })); // one ahead, as the runtime does
    const [audioA, audioB] = [concat(await a), concat(await b)];
    expect(audioA.length).toBe(first.length * fake.samplesPerChar);
    expect(audioB.length).toBe(second.length * fake.samplesPerChar);
    expect(fake.connections).toHaveLength(1);
    const conn = fake.connections[0]!;
    await until(() => conn.closed);
    const contexts = new Set(conn.messages.map((m) => m.context_id));
    expect(contexts.size).toBe(1);
    expect(conn.messages.map((m) => [m.transcript, m.continue, m.flush ?? false])).toEqual([
      [`${first} `, true, false],
      ['', true, true],
      [`${second} `, true, false],
      ['', true, true],
      ['', false, false], // idle: the context is closed
    ]);
  });

  it('a new sentence after the idle close opens a new socket and context', async () => {
    const turn = new AbortController();
    await collect(tts, request('One.', { signal: turn.signal }));
    await until(() => fake.connections[0]?.closed === true);
    const audio = concat(await collect(tts, request('Two more.', { signal: turn.signal })));
    expect(audio.length).toBe('Two more.'.length * fake.samplesPerChar);
    expect(fake.connections).toHaveLength(2);
    expect(fake.connections[1]!.messages[0]!.context_id).not.toBe(fake.connections[0]!.messages[0]!.context_id);
  });

  it('a sentence after the context expired (1 s after its last audio) starts a new context on the same socket', async () => {
    // The default idle close (3 s) keeps the socket open well past the context's documented life.
    const patient = new CartesiaTtsProvider({ baseUrl: fake.url, apiKey: KEY });
    const turn = new AbortController();
    const first = concat(await collect(patient, request('Let me check that.', { signal: turn.signal })));
    expect(first.length).toBe('Let me check that.'.length * fake.samplesPerChar);
    await sleep(CARTESIA_CONTEXT_EXPIRY_MS + 200); // the LLM takes its time with the next sentence
    const second = concat(await collect(patient, request('Your order shipped today.', { signal: turn.signal })));
    expect(second.length).toBe('Your order shipped today.'.length * fake.samplesPerChar);
    turn.abort();
    expect(fake.connections).toHaveLength(1); // the socket outlives the context
    const ids = fake.connections[0]!.messages.filter((m) => m.cancel !== true).map((m) => m.context_id);
    expect(ids).toHaveLength(4);
    expect(ids[0]).toBe(ids[1]);
    expect(ids[2]).toBe(ids[3]);
    expect(ids[2]).not.toBe(ids[0]);
  });

  it('a sentence soon after the last audio still continues the context', async () => {
    const turn = new AbortController();
    const patient = new CartesiaTtsProvider({ baseUrl: fake.url, apiKey: KEY });
    await collect(patient, request('One moment.', { signal: turn.signal }));
    await sleep(CONTEXT_CONTINUE_MS / 4);
    await collect(patient, request('Here it is.', { signal: turn.signal }));
    turn.abort();
    const ids = new Set(fake.connections[0]!.messages.filter((m) => m.cancel !== true).map((m) => m.context_id));
    expect(ids.size).toBe(1);
  });

  it('the fake refuses a continuation of an expired context with an error message, as Cartesia documents', async () => {
    fake.contextExpiryMs = 100;
    const ws = new WebSocket(`${fake.url.replace(/^http/, 'ws')}/tts/websocket`, { headers: { 'X-API-Key': KEY, 'Cartesia-Version': CARTESIA_VERSION } });
    const received: Record<string, unknown>[] = [];
    ws.on('message', (d) => received.push(JSON.parse(d.toString()) as Record<string, unknown>));
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    const fields = { model_id: 'sonic-3', voice: { mode: 'id', id: 'v' }, output_format: { container: 'raw', encoding: 'pcm_s16le', sample_rate: 24000 }, context_id: 'ctx-1' };
    ws.send(JSON.stringify({ ...fields, transcript: 'Hi. ', continue: true, flush: true }));
    await until(() => received.some((m) => m.type === 'flush_done'));
    await sleep(250);
    ws.send(JSON.stringify({ ...fields, transcript: 'Again. ', continue: true, flush: true }));
    await until(() => received.some((m) => m.type === 'error'));
    ws.close();
    const err = received.find((m) => m.type === 'error')!;
    expect(err).toMatchObject({ done: true, status_code: 400, context_id: 'ctx-1' });
    expect(String(err.message)).toContain('expired');
    expect(received.filter((m) => m.type === 'chunk' && m.context_id === 'ctx-1').length).toBeGreaterThan(0);
  });

  it('barge-in cancels the context, closes the socket and ends the iteration quietly', async () => {
    const turn = new AbortController();
    let n = 0;
    for await (const _c of tts.synthesize(request('A long sentence that will be cut by the caller.', { signal: turn.signal }))) {
      if (++n === 2) turn.abort();
    }
    expect(n).toBe(2);
    const conn = fake.connections[0]!;
    await until(() => conn.closed);
    expect(conn.cancelled).toEqual([conn.messages[0]!.context_id]);
    // aborted before it started: nothing is sent at all
    const before = fake.connections.length;
    expect(await collect(tts, request('Never.', { signal: turn.signal }))).toEqual([]);
    expect(fake.connections).toHaveLength(before);
  });

  it('an error message mid-stream fails the sentence with the vendor words; the next turn works', async () => {
    fake.fault = { afterChunks: 2, kind: 'error' };
    const { chunks: yielded, err } = await chunksBeforeError(tts, request('This one breaks in the middle.'));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_BAD_RESPONSE');
    expect(err.message).toContain('generation failed');
    expect(err.message).toContain('(500)');
    expect(yielded).toHaveLength(2); // the audio before the error was delivered
    const audio = concat(await collect(tts, request('Next turn.')));
    expect(audio.length).toBe('Next turn.'.length * fake.samplesPerChar);
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
    const audio = concat(await collect(tts, request('Still here.', { signal: turn.signal })));
    expect(audio.length).toBe('Still here.'.length * fake.samplesPerChar);
    expect(fake.connections).toHaveLength(2);
  });

  it('a server that goes silent fails the sentence with VENDOR_TIMEOUT instead of hanging', async () => {
    fake.pacing = { ...REALISTIC, firstChunkMs: 600 };
    const slow = new CartesiaTtsProvider({ baseUrl: fake.url, apiKey: KEY, stallMs: 100 });
    const err = await rejection(collect(slow, request('Too slow.')));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_TIMEOUT');
    fake.pacing = { firstChunkMs: 30, gapMs: 20, chunkMs: 40 }; // a server that answers within the stall time
    expect((await collect(slow, request('Too slow.'))).length).toBeGreaterThan(0);
  });

  it('a sentence whose audio ends on half a sample is VENDOR_BAD_RESPONSE', async () => {
    fake.halfSample = true;
    const err = await rejection(collect(tts, request('Odd bytes.')));
    expect(err.code).toBe('VENDOR_BAD_RESPONSE');
    expect(err.message).toContain('half a sample');
  });

  it('a wrong API key is VENDOR_HTTP_STATUS 401 saying so, without the key', async () => {
    const wrong = new CartesiaTtsProvider({ baseUrl: fake.url, apiKey: 'sk_car_wrong-key-999' });
    const err = await rejection(collect(wrong, request('Hello.')));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_HTTP_STATUS');
    expect(err.status).toBe(401);
    expect(err.message).toContain('API key was rejected');
    expect(err.message).not.toContain('wrong-key');
  });

  it('a malformed request answered with an error message fails with the vendor words', async () => {
    const bad = new CartesiaTtsProvider({ baseUrl: fake.url, apiKey: KEY });
    const err = await rejection(collect(bad, request('Hello.', { voiceId: '' })));
    expect(err.code).toBe('VENDOR_BAD_RESPONSE');
    expect(err.message).toContain('voice must be');
  });

  it('is built for type cartesia and timed by the first-byte decorator under its slot and type', async () => {
    const seen: Array<[string, string, number]> = [];
    const providers = createTtsProviders(
      { provider_3: { type: 'cartesia', base_url: fake.url, api_key: KEY } },
      { onFirstByte: (slot, type, s) => seen.push([slot, type, s]) },
    );
    const audio = concat(await collect(providers.get('provider_3'), request('Timed.')));
    expect(audio.length).toBe('Timed.'.length * fake.samplesPerChar);
    expect(seen).toHaveLength(1);
    expect(seen[0]!.slice(0, 2)).toEqual(['provider_3', 'cartesia']);
  });
});
