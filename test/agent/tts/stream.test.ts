/** The ElevenLabs stream-input adapter against a fake `ws` server on loopback. */
import { createServer } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { TtsError } from '../../../src/agent/errors.ts';
import { StreamingWsTtsProvider } from '../../../src/agent/providers/tts/stream.ts';
import { Gate, samplesOf, sineBytes, startFakeStreamTtsServer, type FakeStreamTtsServer } from './fake-tts-servers.ts';
import { collect, concat, rejection, request } from './helpers.ts';

const KEY = 'xi-test-secret-key-456';

describe('StreamingWsTtsProvider (ElevenLabs stream-input)', () => {
  let fake: FakeStreamTtsServer;
  let tts: StreamingWsTtsProvider;
  beforeAll(async () => {
    fake = await startFakeStreamTtsServer();
  });
  afterAll(() => fake.close());
  beforeEach(() => {
    fake.connections.length = 0;
    fake.audio = sineBytes(2400);
    fake.chunkBytes = [1001, 999, 777];
    fake.chunkDelayMs = 5;
    fake.pause = undefined;
    tts = new StreamingWsTtsProvider({ baseUrl: fake.url, apiKey: KEY, model: 'eleven_turbo_v2_5', name: 'provider_3' });
  });

  it('opens the documented URL, sends settings+key, text, end in order, and decodes the audio', async () => {
    const chunks = await collect(
      tts,
      request('Hello there.', { voiceId: 'voice abc', language: 'es', stability: 0.4, similarityBoost: 0.8, speed: 1.1 }),
    );
    expect(fake.connections).toHaveLength(1);
    const conn = fake.connections[0]!;
    expect(conn.path).toBe('/v1/text-to-speech/voice%20abc/stream-input');
    expect(conn.query).toEqual({ model_id: 'eleven_turbo_v2_5', output_format: 'pcm_24000', language_code: 'es' });
    expect(conn.headers['xi-api-key']).toBe(KEY);
    expect(conn.messages).toEqual([
      { text: ' ', voice_settings: { stability: 0.4, similarity_boost: 0.8, speed: 1.1 }, xi_api_key: KEY },
      { text: 'Hello there. ', try_trigger_generation: true },
      { text: '' },
    ]);
    expect(chunks.length).toBeGreaterThan(1);
    expect(concat(chunks)).toEqual(samplesOf(fake.audio)); // odd-sized messages re-joined exactly
  });

  it('leaves out unset and zero settings, language_code for multi, and the key when there is none', async () => {
    const bare = new StreamingWsTtsProvider({ baseUrl: `${fake.url}/v1/` });
    await collect(bare, request('Hi.', { language: 'multi', stability: 0, speed: 1.2 }));
    const conn = fake.connections[0]!;
    expect(conn.path).toBe('/v1/text-to-speech/voice-1/stream-input');
    expect(conn.query).toEqual({ model_id: 'eleven_flash_v2_5', output_format: 'pcm_24000' });
    expect(conn.headers['xi-api-key']).toBeUndefined();
    expect(conn.messages[0]).toEqual({ text: ' ', voice_settings: { speed: 1.2 } });
    const plain = new StreamingWsTtsProvider({ baseUrl: fake.url });
    await collect(plain, request('Hi.'));
    expect(fake.connections[1]!.messages[0]).toEqual({ text: ' ' });
  });

  it('yields audio as it arrives, before the final message', async () => {
    const gate = new Gate();
    fake.pause = { afterChunks: 2, gate };
    let n = 0;
    for await (const _c of tts.synthesize(request('Streaming.'))) {
      if (++n === 1) {
        expect(fake.connections[0]!.closed).toBe(false);
        gate.open();
      }
    }
    expect(n).toBeGreaterThan(2);
  });

  it('an upgrade refused with 401 is VENDOR_HTTP_STATUS 401, without the key', async () => {
    fake.refuseNext(401);
    const err = await rejection(collect(tts, request('Hello.')));
    expect(err).toBeInstanceOf(TtsError);
    expect(err.code).toBe('VENDOR_HTTP_STATUS');
    expect(err.status).toBe(401);
    expect(err.message).not.toContain(KEY);
  });

  it('an error message from the server is VENDOR_BAD_RESPONSE', async () => {
    fake.errorNext({ message: 'Voice not found', error: 'voice_not_found', code: 1008 });
    const err = await rejection(collect(tts, request('Hello.')));
    expect(err.code).toBe('VENDOR_BAD_RESPONSE');
    expect(err.message).toContain('voice_not_found');
    fake.errorNext({ error: 'quota_exceeded' });
    expect((await rejection(collect(tts, request('Hello.')))).code).toBe('VENDOR_BAD_RESPONSE');
  });

  it('a connection dropped mid-stream is VENDOR_UNREACHABLE after the audio so far', async () => {
    fake.dropNextAfter(2);
    const got: Int16Array[] = [];
    const err = await rejection(
      (async () => {
        for await (const c of tts.synthesize(request('Hello.'))) got.push(c);
      })(),
    );
    expect(err.code).toBe('VENDOR_UNREACHABLE');
    expect(concat(got).length).toBe(1000);
  });

  it('nothing listening is VENDOR_UNREACHABLE', async () => {
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const dead = new StreamingWsTtsProvider({ baseUrl: `http://127.0.0.1:${port}`, apiKey: KEY });
    const err = await rejection(collect(dead, request('Hello.')));
    expect(err.code).toBe('VENDOR_UNREACHABLE');
  });

  it('an abort closes the socket and ends quietly', async () => {
    const gate = new Gate();
    fake.pause = { afterChunks: 1, gate };
    const ac = new AbortController();
    let n = 0;
    for await (const _c of tts.synthesize(request('Hello.', { signal: ac.signal }))) {
      n++;
      ac.abort();
    }
    expect(n).toBe(1);
    await vi.waitFor(() => expect(fake.connections[0]!.closed).toBe(true));
    gate.open();
  });

  it('stopping the iteration early closes the socket too', async () => {
    const gate = new Gate();
    fake.pause = { afterChunks: 1, gate };
    for await (const _c of tts.synthesize(request('Hello.'))) break;
    await vi.waitFor(() => expect(fake.connections[0]!.closed).toBe(true));
    gate.open();
  });
});
