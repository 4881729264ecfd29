/**
 * The daemon observes each TTS request's time to first audio on /metrics
 * (callbridge_tts_first_byte_seconds, by voice provider slot and adapter type), as `npm start`
 * wires it. A real daemon whose provider_2 is the OpenAI-compatible fake vendor on loopback; the
 * fake holds its first chunk 400 ms; an agent on provider_2 speaks its first message to a real
 * voice WebSocket client.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../../helpers/daemon.ts';
import { Gate, startFakeSpeechServer, type FakeSpeechServer } from '../tts/fake-tts-servers.ts';
import { VoiceClient } from './voice-client.ts';

const FIRST_BYTE_MS = 400;

/** The histogram's _count and _sum for one label set, from the exposition text. */
function firstByteSeries(text: string, provider: string, type: string): { count: number; sum: number } {
  const labels = `provider="${provider}",type="${type}"`;
  const value = (suffix: string) => Number(new RegExp(`^callbridge_tts_first_byte_seconds_${suffix}\\{${labels}\\} (\\S+)$`, 'm').exec(text)?.[1] ?? 0);
  return { count: value('count'), sum: value('sum') };
}

describe('TTS first-byte metric', () => {
  let td: TestDaemon;
  let fake: FakeSpeechServer;
  beforeAll(async () => {
    fake = await startFakeSpeechServer();
    td = await startTestDaemon({ sip: { enabled: false }, tts: { providers: [{ voice_provider: 'provider_2', type: 'openai', base_url: fake.url, api_key: 'sk-tts' }] } });
  });
  afterAll(async () => {
    await td?.close();
    await fake?.close();
  });

  it('each sentence the agent speaks is one observation, as long as the vendor took to its first audio', async () => {
    const metricsText = async () => (await fetch(`${td.url}/metrics`)).text();
    expect(await metricsText()).toMatch(/^# TYPE callbridge_tts_first_byte_seconds histogram$/m);
    const before = firstByteSeries(await metricsText(), 'provider_2', 'openai');

    const gate = new Gate();
    fake.pause = { afterChunks: 0, gate };
    const agent = await td.api('POST', '/v1/agents', { name: 'tts timing', first_message: 'Hello there.', voice_settings: { id: 'alloy', provider: 'provider_2' } });
    expect(agent.status, agent.text).toBe(201);
    const tok = await td.api('POST', '/v1/session-token', { agent_id: agent.body.id });
    expect(tok.status, tok.text).toBe(200);
    const client = await VoiceClient.connect(td.url, tok.body.token as string);
    await client.waitForType('session_started');
    client.startMic();
    await client.waitForType('response_text');
    setTimeout(() => gate.open(), FIRST_BYTE_MS);
    await client.waitForType('response_audio', 10_000);
    client.close();
    await client.waitClosed();
    fake.pause = undefined;

    const after = firstByteSeries(await metricsText(), 'provider_2', 'openai');
    expect(fake.requests.length).toBe(1);
    expect(after.count - before.count).toBe(1);
    const seconds = after.sum - before.sum;
    expect(seconds).toBeGreaterThanOrEqual((FIRST_BYTE_MS - 10) / 1000);
    expect(seconds).toBeLessThan(5);
  });
});
