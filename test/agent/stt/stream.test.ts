import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { StreamingWsSttProvider, listenUrl } from '../../../src/agent/providers/stt/stream.ts';
import { SttError } from '../../../src/agent/errors.ts';
import type { SttHandlers, SttStream, Transcript } from '../../../src/agent/providers/types.ts';
import { startFakeListenServer, waitUntil, type FakeListenServer } from './fake-stt-servers.ts';

const KEY = 'dg-test-SECRET-abcdef';

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

describe('StreamingWsSttProvider (Deepgram live protocol)', () => {
  let server: FakeListenServer;
  let stream: SttStream | undefined;
  beforeEach(async () => {
    server = await startFakeListenServer();
    server.apiKey = KEY;
  });
  afterEach(async () => {
    stream?.close();
    stream = undefined;
    await server.close();
  });

  const provider = (extra: Partial<ConstructorParameters<typeof StreamingWsSttProvider>[0]> = {}) =>
    new StreamingWsSttProvider({ baseUrl: server.baseUrl, apiKey: KEY, model: 'nova-3', ...extra });

  it('connects to /v1/listen with the documented query, one keyterm each, and Token auth', async () => {
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: ['Acme', 'Zyxel Pro', 'café&co'] }, r.handlers);
    const conn = await waitUntil(() => server.connections[0]);
    expect(conn.path).toBe('/v1/listen');
    expect(conn.headers.authorization).toBe(`Token ${KEY}`);
    const q = conn.query;
    expect(q.get('model')).toBe('nova-3');
    expect(q.get('encoding')).toBe('linear16');
    expect(q.get('sample_rate')).toBe('24000');
    expect(q.get('channels')).toBe('1');
    expect(q.get('interim_results')).toBe('true');
    expect(q.get('language')).toBe('en');
    expect(q.getAll('keyterm')).toEqual(['Acme', 'Zyxel Pro', 'café&co']);
    expect(conn.rawQuery).toContain('keyterm=Zyxel%20Pro');
    expect(conn.rawQuery).toContain('keyterm=caf%C3%A9%26co');
    expect(r.errors).toEqual([]);
  });

  it('passes language=multi through and maps https to wss', () => {
    const url = listenUrl('https://api.example.com/ignored/path', 'nova-3', { language: 'multi', keyterms: [] });
    expect(url).toBe(
      'wss://api.example.com/v1/listen?model=nova-3&encoding=linear16&sample_rate=24000&channels=1&interim_results=true&language=multi',
    );
  });

  it('sends every frame as binary PCM16 little-endian, including frames written while connecting', async () => {
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    for (let i = 1; i <= 5; i++) stream.write(frame(i)); // before the socket is open
    const conn = await waitUntil(() => server.connections[0]);
    await waitUntil(() => conn.audioBytes >= 5 * 960);
    for (let i = 6; i <= 10; i++) stream.write(frame(-i));
    await waitUntil(() => conn.audioBytes >= 10 * 960);
    expect(conn.audioBytes).toBe(10 * 960);
    const all = Buffer.concat(conn.audio);
    const firstSamples = Array.from({ length: 10 }, (_, i) => all.readInt16LE(i * 960));
    expect(firstSamples).toEqual([1, 2, 3, 4, 5, -6, -7, -8, -9, -10]);
    expect(conn.controls).toEqual([]);
  });

  it('delivers interim then final results in order, skipping empty interims and other types', async () => {
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    const conn = await waitUntil(() => server.connections[0]);
    conn.send({ type: 'Metadata', request_id: 'x' });
    conn.send({ type: 'SpeechStarted', channel: [0], timestamp: 0.1 });
    conn.sendResults('', { isFinal: false });
    conn.sendResults('hel', { isFinal: false });
    conn.sendResults('hello', { isFinal: false });
    conn.sendResults('hello world', { isFinal: true, speechFinal: true });
    conn.send({ type: 'UtteranceEnd', channel: [0, 1], last_word_end: 1.2 });
    conn.sendResults('', { isFinal: true });
    await waitUntil(() => r.transcripts.length === 4);
    await new Promise((res) => setTimeout(res, 50));
    expect(r.transcripts).toEqual([
      { text: 'hel', isFinal: false },
      { text: 'hello', isFinal: false },
      { text: 'hello world', isFinal: true },
      { text: '', isFinal: true },
    ]);
    expect(r.errors).toEqual([]);
  });

  it('sends Finalize on speechEnded and delivers the flushed final', async () => {
    server.finalizeTranscript = 'book a table';
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    stream.speechStarted();
    stream.write(frame(1));
    stream.speechEnded(); // may still be connecting: queued behind the audio
    const conn = await waitUntil(() => server.connections[0]);
    await waitUntil(() => r.transcripts.length === 1);
    expect(conn.controls).toEqual(['Finalize']);
    expect(conn.audioBytes).toBe(960);
    expect(r.transcripts).toEqual([{ text: 'book a table', isFinal: true }]);
  });

  it('sends CloseStream on close() and calls no handler afterwards', async () => {
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    const conn = await waitUntil(() => server.connections[0]);
    await waitUntil(() => {
      stream!.write(frame(1));
      return conn.audioBytes > 0;
    });
    stream.close();
    stream.close();
    await waitUntil(() => conn.closeCode !== undefined);
    expect(conn.controls).toEqual(['CloseStream']);
    expect(conn.closeCode).toBe(1000);
    await new Promise((res) => setTimeout(res, 50));
    expect(r.errors).toEqual([]);
    expect(r.transcripts).toEqual([]);
  });

  it('sends KeepAlive while no audio is sent', async () => {
    const r = recorder();
    stream = provider({ keepAliveMs: 30 }).open({ language: 'en', keyterms: [] }, r.handlers);
    const conn = await waitUntil(() => server.connections[0]);
    await waitUntil(() => conn.controls.filter((c) => c === 'KeepAlive').length >= 2);
    expect(new Set(conn.controls)).toEqual(new Set(['KeepAlive']));
    expect(r.errors).toEqual([]);
  });

  it('sends no KeepAlive before its period has passed without audio', async () => {
    const r = recorder();
    stream = provider({ keepAliveMs: 60_000 }).open({ language: 'en', keyterms: [] }, r.handlers);
    const conn = await waitUntil(() => server.connections[0]);
    stream.speechEnded();
    await waitUntil(() => conn.controls.length === 1);
    expect(conn.controls).toEqual(['Finalize']);
  });

  it('reports an upgrade refused with 401 as VENDOR_HTTP_STATUS without the key', async () => {
    const r = recorder();
    stream = provider({ apiKey: 'wrong-' + KEY }).open({ language: 'en', keyterms: [] }, r.handlers);
    await waitUntil(() => r.errors.length === 1);
    const err = r.errors[0]!;
    expect(err).toBeInstanceOf(SttError);
    expect(err.code).toBe('VENDOR_HTTP_STATUS');
    expect(err.status).toBe(401);
    expect(err.message).toContain('401');
    expect(err.message).not.toContain(KEY);
    await new Promise((res) => setTimeout(res, 50));
    expect(r.errors).toHaveLength(1); // the socket's own error/close are not reported twice
    expect(server.connections).toEqual([]);
  });

  it('reports another refused status (503) with that status', async () => {
    server.refuseNextWith = 503;
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    await waitUntil(() => r.errors.length === 1);
    expect(r.errors[0]!).toMatchObject({ code: 'VENDOR_HTTP_STATUS', status: 503 });
  });

  it('reports the server dropping the socket as VENDOR_UNREACHABLE, once', async () => {
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    const conn = await waitUntil(() => server.connections[0]);
    conn.drop();
    await waitUntil(() => r.errors.length === 1);
    expect(r.errors[0]!.code).toBe('VENDOR_UNREACHABLE');
    stream.write(frame(1)); // the stream is unusable, quietly
    stream.speechEnded();
    await new Promise((res) => setTimeout(res, 50));
    expect(r.errors).toHaveLength(1);
  });

  it('reports a closed port as VENDOR_UNREACHABLE', async () => {
    const probe = createServer();
    await new Promise<void>((res) => probe.listen(0, '127.0.0.1', res));
    const { port } = probe.address() as AddressInfo;
    await new Promise<void>((res) => probe.close(() => res()));
    const r = recorder();
    stream = new StreamingWsSttProvider({ baseUrl: `http://127.0.0.1:${port}`, apiKey: KEY, model: 'nova-3' }).open(
      { language: 'en', keyterms: [] },
      r.handlers,
    );
    await waitUntil(() => r.errors.length === 1);
    expect(r.errors[0]!.code).toBe('VENDOR_UNREACHABLE');
    expect(r.errors[0]!.message).not.toContain(KEY);
  });

  it('reports a message that is not JSON as VENDOR_BAD_RESPONSE', async () => {
    const r = recorder();
    stream = provider().open({ language: 'en', keyterms: [] }, r.handlers);
    const conn = await waitUntil(() => server.connections[0]);
    conn.send('not json');
    await waitUntil(() => r.errors.length === 1);
    expect(r.errors[0]!.code).toBe('VENDOR_BAD_RESPONSE');
  });
});
