/**
 * GET /v1/voices and the voice check of agent bodies in a real daemon, with two vendors faked on
 * loopback over their voice-list APIs (test/agent/voice-catalog/fakes.ts): the catalog lists what
 * the vendors answer beside the local voices, an unconfigured provider or an unknown voice id is
 * a 400 naming what is wrong, and a zero-configuration daemon still creates an agent on the
 * default voice that speaks, with a first session log line naming its STT, LLM and TTS.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { until } from '../helpers/until.ts';
import { startVoiceVendorFake, type VoiceVendorFake } from '../agent/voice-catalog/fakes.ts';
import { VoiceClient } from '../agent/e2e/voice-client.ts';

describe('voice catalog in the daemon, with Cartesia and MiniMax configured', () => {
  let d: TestDaemon;
  let cartesia: VoiceVendorFake;
  let minimax: VoiceVendorFake;
  beforeAll(async () => {
    cartesia = await startVoiceVendorFake('cartesia', [
      { id: 'c-1', name: 'Katie', description: 'Friendly', language: 'en' },
      { id: 'c-2', name: 'Pierre', language: 'fr' },
    ]);
    minimax = await startVoiceVendorFake('minimax', [{ id: 'English_Trustworth_Man', name: 'Trustworthy Man', description: 'Deep' }]);
    d = await startTestDaemon({
      sip: { enabled: false },
      // A recognizer is configured here (never reached: no session runs), so /readyz has nothing to confess.
      stt: { provider: 'openai', base_url: 'http://127.0.0.1:9/v1' },
      tts: {
        providers: [
          { voice_provider: 'cartesia', type: 'cartesia', base_url: cartesia.url, api_key: cartesia.key },
          { voice_provider: 'provider_5', type: 'minimax', base_url: minimax.url, api_key: minimax.key },
        ],
      },
    });
  });
  afterAll(async () => {
    await d?.close();
    await cartesia?.close();
    await minimax?.close();
  });

  it('GET /v1/voices: the local voices under the default provider and each configured vendor\'s own list', async () => {
    const r = await d.api('GET', '/v1/voices');
    expect(r.status).toBe(200);
    expect(r.body.voices.map((v: { provider: string; id: string }) => `${v.provider}:${v.id}`)).toEqual([
      'provider_1:local-en-1',
      'provider_1:local-multi-1',
      'provider_3:c-1',
      'provider_3:c-2',
      'provider_5:English_Trustworth_Man',
    ]);
    expect(r.body.voices[2]).toEqual({ id: 'c-1', name: 'Katie', description: 'Friendly', provider: 'provider_3', languages: ['en'] });
    expect(r.text).not.toContain(cartesia.key);
  });

  it('/readyz carries no STT detail when a recognizer is configured', async () => {
    expect((await d.api('GET', '/readyz', undefined, { key: null })).body).toEqual({ status: 'ready' });
  });

  it('an agent on a provider that is not configured is a 400 naming the provider and the setting, on create and on PATCH', async () => {
    const r = await d.api('POST', '/v1/agents', { name: 'hume agent', voice_settings: { id: 'x', provider: 'hume' } });
    expect(r.status).toBe(400);
    expect(r.body.error).toMatch(/voice_settings\.provider provider_4 \(hume\) is not configured.*tts\.providers \(CALLBRIDGE_TTS_PROVIDERS\)/);
    const ok = await d.api('POST', '/v1/agents', { name: 'cartesia agent', voice_settings: { id: 'c-2', provider: 'provider_3' } });
    expect(ok.status, ok.text).toBe(201);
    const p = await d.api('PATCH', `/v1/agents/${ok.body.id}`, { voice_settings: { id: 'x', provider: 'provider_6' } });
    expect(p.status).toBe(400);
    expect(p.body.error).toContain('provider_6 (fish) is not configured');
    expect((await d.api('GET', `/v1/agents/${ok.body.id}`)).body.voice_settings).toEqual({ id: 'c-2', provider: 'provider_3' });
    // A PATCH that does not send voice_settings is not held to it.
    expect((await d.api('PATCH', `/v1/agents/${ok.body.id}`, { prompt: 'hi' })).status).toBe(200);
  });

  it('a voice id outside the vendor\'s catalog is a 400; one inside it is taken', async () => {
    const bad = await d.api('POST', '/v1/agents', { name: 'x', voice_settings: { id: 'not-a-voice', provider: 'minimax' } });
    expect(bad.status).toBe(400);
    expect(bad.body).toEqual({ error: expect.stringContaining('"not-a-voice" is not in the voice catalog of provider_5 (minimax)') });
    const good = await d.api('POST', '/v1/agents', { name: 'x', voice_settings: { id: 'English_Trustworth_Man', provider: 'minimax', speed: 1.2 } });
    expect(good.status, good.text).toBe(201);
    const patch = await d.api('PATCH', `/v1/agents/${good.body.id}`, { voice_settings: { id: 'local-en-1', provider: 'provider_3' } });
    expect(patch.status).toBe(400);
    expect(patch.body.error).toContain('"local-en-1" is not in the voice catalog of provider_3 (cartesia)');
    const local = await d.api('PATCH', `/v1/agents/${good.body.id}`, { voice_settings: { id: 'c-1', provider: 'provider_1' } });
    expect(local.status).toBe(400);
    expect(local.body.error).toContain('"c-1" is not a voice of provider_1 (elevenlabs), which the embedded local voice serves');
  });

  it("another organization's agent is a 404 even with a bad voice in the PATCH", async () => {
    const mine = await d.api('POST', '/v1/agents', { name: 'mine' });
    const other = await d.newOrgKey('other');
    const r = await d.api('PATCH', `/v1/agents/${mine.body.id}`, { voice_settings: { id: 'x', provider: 'hume' } }, { key: other });
    expect(r.status).toBe(404);
  });
});

describe('zero configuration', () => {
  let d: TestDaemon;
  const lines: string[] = [];
  beforeAll(async () => {
    d = await startTestDaemon({ sip: { enabled: false } }, undefined, {}, lines);
  });
  afterAll(() => d?.close());

  it('an agent with no voice settings gets the default voice and speaks; other providers are refused; the session log names its STT, LLM and TTS', async () => {
    const a = await d.api('POST', '/v1/agents', { name: 'plain', first_message: 'Hello there.' });
    expect(a.status, a.text).toBe(201);
    expect(a.body.voice_settings).toEqual({ id: 'local-en-1', provider: 'provider_1' });
    const refused = await d.api('POST', '/v1/agents', { name: 'x', voice_settings: { id: 'alloy', provider: 'openai' } });
    expect(refused.status).toBe(400);
    expect(refused.body.error).toContain('provider_2 (openai) is not configured');

    const tok = await d.api('POST', '/v1/session-token', { agent_id: a.body.id });
    expect(tok.status, tok.text).toBe(200);
    const client = await VoiceClient.connect(d.url, tok.body.token as string);
    await client.waitForType('session_started');
    client.startMic();
    await client.waitForType('response_audio', 15_000);
    client.close();
    await client.waitClosed();

    await until(() => lines.some((l) => l.includes('voice session started')), 'the session log line');
    const started = JSON.parse(lines.find((l) => l.includes('voice session started'))!);
    expect(started).toMatchObject({
      stt: { provider: 'local', type: 'local', recognizes_words: false },
      llm: { model: 'local/echo', type: 'echo', fallback_model: 'local/echo', fallback_type: 'echo' },
      tts: { provider: 'provider_1', type: 'local', voice: 'local-en-1' },
    });
    // Of the session's own lines, this one comes first.
    const sessionLines = lines.map((l) => JSON.parse(l)).filter((l) => l.sessionId === started.sessionId);
    expect(sessionLines[0].msg).toBe('voice session started');
    expect(lines.some((l) => l.includes('recognizes no words'))).toBe(true);
  });
});
