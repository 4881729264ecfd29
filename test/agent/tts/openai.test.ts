/** The OpenAI-compatible speech adapter against a fake /v1/audio/speech on loopback. */
import { createServer } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { TtsError } from '../../../src/agent/errors.ts';
import { OpenAiSpeechProvider } from '../../../src/agent/providers/tts/openai.ts';
import { Gate, samplesOf, sineBytes, startFakeSpeechServer, type FakeSpeechServer } from './fake-tts-servers.ts';
import { collect, concat, rejection, request } from './helpers.ts';

const KEY = 'sk-test-secret-key-123';

describe('OpenAiSpeechProvider', () => {
  let fake: FakeSpeechServer;
  let tts: OpenAiSpeechProvider;
  beforeAll(async () => {
    fake = await startFakeSpeechServer();
  });
  afterAll(() => fake.close());
  beforeEach(() => {
    fake.requests.length = 0;
    fake.audio = sineBytes(2400);
    fake.chunkBytes = [1001, 999, 777];
    fake.chunkDelayMs = 5;
    fake.pause = undefined;
    fake.dropAfterChunks = undefined;
    tts = new OpenAiSpeechProvider({ baseUrl: `${fake.url}/`, apiKey: KEY, model: 'gpt-4o-mini-tts', name: 'provider_2' });
  });

  it('posts the documented JSON with the bearer key and decodes the PCM across odd chunk borders', async () => {
    const chunks = await collect(tts, request('Hello there.', { voiceId: 'nova', speed: 1.25 }));
    expect(fake.requests).toHaveLength(1);
    const req = fake.requests[0]!;
    expect(req.method).toBe('POST');
    expect(req.path).toBe('/v1/audio/speech');
    expect(req.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(req.headers['content-type']).toBe('application/json');
    expect(req.body).toEqual({ model: 'gpt-4o-mini-tts', input: 'Hello there.', voice: 'nova', response_format: 'pcm', speed: 1.25 });
    expect(chunks.length).toBeGreaterThan(1);
    expect(concat(chunks)).toEqual(samplesOf(fake.audio)); // bit-exact despite 1001/999/777-byte cuts
  });

  it('omits speed when unset or 0, auth when there is no key, and uses defaults for model and voice', async () => {
    const bare = new OpenAiSpeechProvider({ baseUrl: fake.url });
    await collect(bare, request('Hi.', { voiceId: '', speed: 0 }));
    const req = fake.requests[0]!;
    expect(req.headers.authorization).toBeUndefined();
    expect(req.body).toEqual({ model: 'tts-1', input: 'Hi.', voice: 'alloy', response_format: 'pcm' });
  });

  it('yields audio before the response has ended', async () => {
    const gate = new Gate();
    fake.pause = { afterChunks: 2, gate };
    const seen: number[] = [];
    for await (const chunk of tts.synthesize(request('Streaming.'))) {
      seen.push(chunk.length);
      if (seen.length === 1) {
        expect(fake.requests[0]!.ended).toBe(false);
        gate.open();
      }
    }
    expect(fake.requests[0]!.ended).toBe(true);
    expect(seen.reduce((a, b) => a + b, 0)).toBe(2400);
  });

  it('applies volume as a saturating gain', async () => {
    fake.audio = sineBytes(480, 20000);
    const loud = concat(await collect(tts, request('Loud.', { volume: 2 })));
    const src = samplesOf(fake.audio);
    expect(Math.max(...loud)).toBe(32767);
    expect(loud[1]).toBe(Math.min(32767, src[1]! * 2));
    const half = concat(await collect(tts, request('Soft.', { volume: 0.5 })));
    expect(half[12]).toBe(Math.round(src[12]! * 0.5));
  });

  it('an HTTP error status is VENDOR_HTTP_STATUS with the status and without the key', async () => {
    fake.failNext(401, `{"error":{"message":"Incorrect API key provided: ${KEY}","code":"invalid_api_key"}}`);
    const err = await rejection(collect(tts, request('Hello.')));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_HTTP_STATUS');
    expect(err.status).toBe(401);
    expect(err.message).toContain('invalid_api_key');
    expect(err.message).not.toContain(KEY);
    expect(JSON.stringify(err)).not.toContain(KEY);
    fake.failNext(503, 'upstream overloaded', 'text/plain');
    const err2 = await rejection(collect(tts, request('Hello.')));
    expect(err2.status).toBe(503);
  });

  it('a JSON 200 instead of audio is VENDOR_BAD_RESPONSE', async () => {
    fake.failNext(200, '{"audio":"not here"}');
    const err = await rejection(collect(tts, request('Hello.')));
    expect(err.code).toBe('VENDOR_BAD_RESPONSE');
  });

  it('an unreachable endpoint is VENDOR_UNREACHABLE', async () => {
    // A port that was just free: nothing listens there any more.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const dead = new OpenAiSpeechProvider({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: KEY });
    const err = await rejection(collect(dead, request('Hello.')));
    expect(err.code).toBe('VENDOR_UNREACHABLE');
    expect(err.message).not.toContain(KEY);
  });

  it('a connection dropped mid-body is VENDOR_UNREACHABLE after the audio so far', async () => {
    fake.dropAfterChunks = 2;
    const got: Int16Array[] = [];
    const err = await rejection(
      (async () => {
        for await (const c of tts.synthesize(request('Hello.'))) got.push(c);
      })(),
    );
    expect(err.code).toBe('VENDOR_UNREACHABLE');
    expect(concat(got).length).toBe(1000); // 1001 + 999 bytes
  });

  it('an abort cancels the request and ends quietly', async () => {
    const gate = new Gate();
    fake.pause = { afterChunks: 1, gate };
    const ac = new AbortController();
    let n = 0;
    for await (const _c of tts.synthesize(request('Hello.', { signal: ac.signal }))) {
      n++;
      ac.abort();
    }
    expect(n).toBe(1);
    await vi.waitFor(() => expect(fake.requests[0]!.clientClosed).toBe(true));
    gate.open();
    expect(fake.requests[0]!.ended).toBe(false);
  });

  it('sends nothing when aborted before the call', async () => {
    const ac = new AbortController();
    ac.abort();
    expect(await collect(tts, request('Hello.', { signal: ac.signal }))).toEqual([]);
    expect(fake.requests).toHaveLength(0);
  });
});

