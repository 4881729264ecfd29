import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { OpenAiTranscriptionProvider } from '../../../src/agent/providers/stt/openai.ts';
import { SttError } from '../../../src/agent/errors.ts';
import type { SttHandlers, SttStream, Transcript } from '../../../src/agent/providers/types.ts';
import { startFakeTranscriptionServer, waitUntil, type FakeTranscriptionServer } from './fake-stt-servers.ts';

const KEY = 'sk-test-SECRET-0123456789';

function recorder() {
  const transcripts: Transcript[] = [];
  const errors: SttError[] = [];
  const handlers: SttHandlers = {
    onTranscript: (t) => transcripts.push(t),
    onError: (e) => errors.push(e as SttError),
  };
  return { transcripts, errors, handlers };
}

const frame = (value: number) => new Int16Array(480).fill(value);

/** Writes `count` frames whose samples equal first, first+1, ... (one value per frame). */
function writeFrames(stream: SttStream, first: number, count: number): void {
  for (let i = 0; i < count; i++) stream.write(frame(first + i));
}

/** The distinct frame values of a sample array, in order (one value per 480-sample frame). */
function frameValues(samples: Int16Array): number[] {
  const values: number[] = [];
  for (let i = 0; i < samples.length; i += 480) values.push(samples[i]!);
  return values;
}

const range = (from: number, to: number) => Array.from({ length: to - from + 1 }, (_, i) => from + i);

describe('OpenAiTranscriptionProvider', () => {
  let server: FakeTranscriptionServer;
  let stream: SttStream | undefined;
  beforeEach(async () => {
    server = await startFakeTranscriptionServer();
  });
  afterEach(async () => {
    stream?.close();
    stream = undefined;
    await server.close();
  });

  const provider = (extra: Partial<ConstructorParameters<typeof OpenAiTranscriptionProvider>[0]> = {}) =>
    new OpenAiTranscriptionProvider({ baseUrl: server.baseUrl, apiKey: KEY, model: 'whisper-1', ...extra });

  it('posts a 24 kHz mono PCM16 WAV of the utterance with 300 ms of pre-roll', async () => {
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    writeFrames(stream, 1, 20); // 400 ms before the VAD fired: only the last 300 ms are kept
    stream.speechStarted();
    writeFrames(stream, 21, 10);
    stream.speechEnded();
    await waitUntil(() => r.transcripts.length === 1);

    expect(server.requests).toHaveLength(1);
    const req = server.requests[0]!;
    expect(req.path).toBe('/v1/audio/transcriptions');
    expect(req.headers['content-type']).toMatch(/^multipart\/form-data; boundary=/);
    expect(req.file?.name).toBe('audio.wav');
    expect(req.wavError).toBeUndefined();
    const wav = req.wav!;
    expect(wav).toMatchObject({ format: 1, channels: 1, sampleRate: 24_000, byteRate: 48_000, blockAlign: 2, bitsPerSample: 16 });
    expect(wav.samples.length).toBe(25 * 480);
    expect(frameValues(wav.samples)).toEqual(range(6, 30));
    expect(wav.samples.every((s, i) => s === 6 + Math.floor(i / 480))).toBe(true);
    expect(r.transcripts).toEqual([{ text: 'hello', isFinal: true }]);
    expect(r.errors).toEqual([]);
  });

  it('keeps negative samples little-endian and intact', async () => {
    const r = recorder();
    stream = provider({ preRollMs: 0 }).open({ language: 'en', keyterms: [] }, r.handlers);
    stream.speechStarted();
    const f = new Int16Array(480).map((_, i) => (i % 2 === 0 ? -32768 : 32767 - i));
    stream.write(f);
    stream.speechEnded();
    await waitUntil(() => r.transcripts.length === 1);
    expect(Array.from(server.requests[0]!.wav!.samples)).toEqual(Array.from(f));
  });

  it('sends model, language, keyterms as prompt, response_format and the bearer key', async () => {
    const r = recorder();
    stream = provider().open({ language: 'es', keyterms: ['Acme', 'Zyxel Pro', '  '] }, r.handlers);
    stream.speechStarted();
    writeFrames(stream, 1, 3);
    stream.speechEnded();
    await waitUntil(() => r.transcripts.length === 1);
    const req = server.requests[0]!;
    expect(req.fields).toEqual({ model: 'whisper-1', language: 'es', prompt: 'Acme, Zyxel Pro', response_format: 'json' });
    expect(req.headers.authorization).toBe(`Bearer ${KEY}`);
  });

  it('omits language for multi, prompt without keyterms, and authorization without a key', async () => {
    const r = recorder();
    stream = provider({ apiKey: '' }).open({ language: 'multi', keyterms: [] }, r.handlers);
    stream.speechStarted();
    writeFrames(stream, 1, 3);
    stream.speechEnded();
    await waitUntil(() => r.transcripts.length === 1);
    const req = server.requests[0]!;
    expect(req.fields).toEqual({ model: 'whisper-1', response_format: 'json' });
    expect(req.headers.authorization).toBeUndefined();
  });

  it('delivers results in utterance order when the first answer is slower', async () => {
    server.replies = [
      { body: { text: 'first' }, delayMs: 400 },
      { body: { text: 'second' } },
    ];
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    for (const v of [1, 100]) {
      stream.speechStarted();
      writeFrames(stream, v, 5);
      stream.speechEnded();
    }
    // Both requests are in flight at once (the second is not held back behind the first).
    await waitUntil(() => server.requests.length === 2);
    await waitUntil(() => r.transcripts.length === 2);
    expect(r.transcripts.map((t) => t.text)).toEqual(['first', 'second']);
    // The second utterance does not repeat the first one's audio as pre-roll.
    expect(frameValues(server.requests[1]!.wav!.samples)).toEqual(range(100, 104));
  });

  it('delivers an empty text as an empty final and trims whisper leading spaces', async () => {
    server.replies = [{ body: { text: '' } }, { body: { text: ' Hi there.' } }];
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    for (let i = 0; i < 2; i++) {
      stream.speechStarted();
      writeFrames(stream, 1, 2);
      stream.speechEnded();
    }
    await waitUntil(() => r.transcripts.length === 2);
    expect(r.transcripts).toEqual([
      { text: '', isFinal: true },
      { text: 'Hi there.', isFinal: true },
    ]);
  });

  it('caps an utterance at maxUtteranceSecs', async () => {
    const r = recorder();
    stream = provider({ preRollMs: 0, maxUtteranceSecs: 0.1 }).open({ language: 'en', keyterms: [] }, r.handlers);
    stream.speechStarted();
    writeFrames(stream, 1, 10);
    stream.speechEnded();
    await waitUntil(() => r.transcripts.length === 1);
    expect(frameValues(server.requests[0]!.wav!.samples)).toEqual(range(1, 5));
  });

  it.each([500, 401])('reports HTTP %i as VENDOR_HTTP_STATUS without the key', async (status) => {
    // A server that echoes the key back in its error body (some do, masked or not).
    server.replies = [{ status, body: { error: { message: `Incorrect API key provided: ${KEY}` } } }];
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    stream.speechStarted();
    writeFrames(stream, 1, 2);
    stream.speechEnded();
    await waitUntil(() => r.errors.length === 1);
    const err = r.errors[0]!;
    expect(err).toBeInstanceOf(SttError);
    expect(err.code).toBe('VENDOR_HTTP_STATUS');
    expect(err.status).toBe(status);
    expect(err.message).toContain(String(status));
    expect(err.message).not.toContain(KEY);
    expect(JSON.stringify(err)).not.toContain(KEY);
    expect(r.transcripts).toEqual([]);
  });

  it('stops after an error: later utterances are neither posted nor answered', async () => {
    server.replies = [{ status: 500, body: 'boom' }];
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    stream.speechStarted();
    writeFrames(stream, 1, 2);
    stream.speechEnded();
    await waitUntil(() => r.errors.length === 1);
    stream.speechStarted();
    writeFrames(stream, 1, 2);
    stream.speechEnded();
    await new Promise((res) => setTimeout(res, 100));
    expect(server.requests).toHaveLength(1);
    expect(r.transcripts).toEqual([]);
    expect(r.errors).toHaveLength(1);
  });

  it('reports a body that is not JSON, or has no text, as VENDOR_BAD_RESPONSE', async () => {
    for (const body of ['<html>oops</html>', { result: 'hi' }]) {
      server.replies = [{ body }];
      const r = recorder();
      const s = provider().open({ language: 'en', keyterms: [] }, r.handlers);
      s.speechStarted();
      writeFrames(s, 1, 2);
      s.speechEnded();
      await waitUntil(() => r.errors.length === 1);
      expect(r.errors[0]!.code).toBe('VENDOR_BAD_RESPONSE');
      s.close();
    }
  });

  it('reports a closed port as VENDOR_UNREACHABLE', async () => {
    const probe = createServer();
    await new Promise<void>((res) => probe.listen(0, '127.0.0.1', res));
    const { port } = probe.address() as AddressInfo;
    await new Promise<void>((res) => probe.close(() => res()));
    const r = recorder();
    stream = new OpenAiTranscriptionProvider({ baseUrl: `http://127.0.0.1:${port}/v1`, apiKey: KEY, model: 'm' }).open(
      { language: 'en', keyterms: [] },
      r.handlers,
    );
    stream.speechStarted();
    writeFrames(stream, 1, 2);
    stream.speechEnded();
    await waitUntil(() => r.errors.length === 1);
    expect(r.errors[0]!.code).toBe('VENDOR_UNREACHABLE');
    expect(r.errors[0]!.message).not.toContain(KEY);
  });

  it('reports a request over its deadline as VENDOR_TIMEOUT', async () => {
    server.replies = [{ body: { text: 'late' }, delayMs: 2_000 }];
    const r = recorder();
    stream = provider({ timeoutMs: 100 }).open({ language: 'en', keyterms: [] }, r.handlers);
    stream.speechStarted();
    writeFrames(stream, 1, 2);
    stream.speechEnded();
    await waitUntil(() => r.errors.length === 1);
    expect(r.errors[0]!.code).toBe('VENDOR_TIMEOUT');
    expect(r.transcripts).toEqual([]);
  });

  it('close() aborts the request in flight and calls no handler afterwards', async () => {
    server.replies = [{ body: { text: 'too late' }, delayMs: 500 }];
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    stream.speechStarted();
    writeFrames(stream, 1, 2);
    stream.speechEnded();
    await waitUntil(() => server.requests.length === 1);
    stream.close();
    stream.close(); // idempotent
    await waitUntil(() => server.requests[0]!.aborted);
    await new Promise((res) => setTimeout(res, 600));
    expect(r.transcripts).toEqual([]);
    expect(r.errors).toEqual([]);
  });

  it('ignores speechEnded without speechStarted', async () => {
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    writeFrames(stream, 1, 5);
    stream.speechEnded();
    await new Promise((res) => setTimeout(res, 100));
    expect(server.requests).toEqual([]);
  });
});
