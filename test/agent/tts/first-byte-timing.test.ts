/**
 * Time to first TTS audio: the decorator of src/agent/providers/tts/first-byte-timing.ts, through
 * createTtsProviders as the daemon builds it, against the OpenAI-compatible fake vendor over a
 * real socket. The fake holds its first chunk until the test opens a gate, so the time measured
 * is the test's to choose.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTtsProviders } from '../../../src/agent/providers/tts/index.ts';
import { withFirstByteTiming } from '../../../src/agent/providers/tts/first-byte-timing.ts';
import type { TtsProvider, TtsRequest } from '../../../src/agent/providers/types.ts';
import { Gate, startFakeSpeechServer, type FakeSpeechServer } from './fake-tts-servers.ts';

const request = (signal = new AbortController().signal): TtsRequest => ({ text: 'Hello there.', voiceId: 'alloy', language: 'en', signal });

async function drain(provider: TtsProvider, req: TtsRequest): Promise<number> {
  let chunks = 0;
  for await (const _ of provider.synthesize(req)) chunks++;
  return chunks;
}

describe('TTS time to first audio', () => {
  let fake: FakeSpeechServer;
  const observed: Array<{ slot: string; type: string; seconds: number }> = [];
  let providers: ReturnType<typeof createTtsProviders>;

  beforeAll(async () => {
    fake = await startFakeSpeechServer();
    providers = createTtsProviders(
      { provider_2: { type: 'openai', base_url: fake.url, api_key: 'sk-test' } },
      { onFirstByte: (slot, type, seconds) => observed.push({ slot, type, seconds }) },
    );
  });
  afterAll(async () => {
    await fake?.close();
  });

  it('is observed once per request, from the request to the first chunk, with the slot and its type', async () => {
    const gate = new Gate();
    fake.pause = { afterChunks: 0, gate };
    setTimeout(() => gate.open(), 300);
    observed.length = 0;
    const chunks = await drain(providers.get('provider_2'), request());
    expect(chunks).toBeGreaterThan(2);
    expect(observed).toHaveLength(1);
    expect(observed[0]).toMatchObject({ slot: 'provider_2', type: 'openai' });
    expect(observed[0]!.seconds).toBeGreaterThanOrEqual(0.29);
    expect(observed[0]!.seconds).toBeLessThan(5);
    fake.pause = undefined;
  });

  it('a request that fails or is aborted before any audio is not observed', async () => {
    observed.length = 0;
    fake.failNext(500);
    await expect(drain(providers.get('provider_2'), request())).rejects.toThrow();
    const gate = new Gate();
    fake.pause = { afterChunks: 0, gate };
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 100);
    await drain(providers.get('provider_2'), request(abort.signal)).catch(() => undefined);
    gate.open();
    fake.pause = undefined;
    expect(observed).toEqual([]);
  });

  it('empty chunks do not count as the first audio', async () => {
    let t = 0;
    const seen: number[] = [];
    const inner: TtsProvider = {
      name: 'p',
      async *synthesize() {
        t = 10;
        yield new Int16Array(0);
        t = 250;
        yield new Int16Array(480);
        t = 900;
        yield new Int16Array(480);
      },
    };
    await drain(withFirstByteTiming(inner, (s) => seen.push(s), () => t), request());
    expect(seen).toEqual([0.25]);
  });
});
