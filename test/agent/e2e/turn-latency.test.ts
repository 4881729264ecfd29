/**
 * Where an agent turn's time went, end to end (docs/latency.md): a real daemon whose STT, LLM and
 * TTS are fakes of their vendors' wire protocols on loopback with known delays (an
 * OpenAI-compatible transcription endpoint answering 300 ms after the caller's speech ended, an
 * OpenAI-compatible chat server whose first token comes 200 ms after the request, an
 * OpenAI-compatible speech endpoint whose first audio comes 150 ms after the text), a real voice
 * WebSocket client, and the call's `latency` field read back from GET /v1/calls/{id}: the stt,
 * llm and tts stages are those delays, within what a loaded machine adds; the others are small.
 * The same figures reach /metrics. Then a phone call: SIPp calls an ACL trunk's number and speaks
 * (test/fixtures/audio/caller-hello.wav as PCMU), the bridge's media runs in a media worker, and
 * the reply's audio_out_first is the moment that worker sent the turn's first RTP packet.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../../helpers/daemon.ts';
import { untilAsync } from '../../helpers/until.ts';
import { runSipp, sippAvailable } from '../../interop/sipp.ts';
import { startFakeTranscriptionServer, type FakeTranscriptionServer } from '../stt/fake-stt-servers.ts';
import { openAiSse, startFakeLlmServer, type FakeLlmServer } from '../llm/fake-llm-servers.ts';
import { startFakeSpeechServer, type FakeSpeechServer } from '../tts/fake-tts-servers.ts';
import { silence, speechLike, VoiceClient } from './voice-client.ts';

const STT_MS = 300;
const LLM_MS = 200;
const TTS_MS = 150;
/**
 * What our side may add to a vendor's delay: the adapter's own work on a loaded 2-core machine.
 * The STT's is the largest (the utterance as a WAV, a multipart POST through fetch: 15-70 ms seen
 * at load average 5-10); the model's and the TTS's (an SSE parse, a chunked read) stay under 15 ms.
 */
const STT_SLACK_MS = 100;
const SLACK_MS = 50;
/**
 * The most a stage with nothing to wait on may take there: turn_commit, sentence, and playout (on
 * a phone call up to one 20 ms pacing tick plus the hops to the media worker).
 */
const SMALL_MS = 50;
const REPLY = 'We open at nine. See you.';

export interface Vendors {
  stt: FakeTranscriptionServer;
  llm: FakeLlmServer;
  tts: FakeSpeechServer;
  close(): Promise<void>;
}

/** The three fakes with the test's delays, and the daemon settings that use them. */
export async function startSlowVendors(): Promise<Vendors & { settings: Record<string, unknown> }> {
  const stt = await startFakeTranscriptionServer();
  stt.defaultReply = { body: { text: 'What are your opening hours?' }, delayMs: STT_MS };
  const llm = await startFakeLlmServer('openai');
  // One delta holding a whole sentence and the start of the next: the splitter has the sentence at
  // the first token, so `sentence` measures our side only (not how fast the fake streams).
  llm.setDefault({ delayMs: LLM_MS, steps: openAiSse.text(['We open at nine. See you.']) });
  const tts = await startFakeSpeechServer();
  tts.firstChunkDelayMs = TTS_MS;
  tts.chunkDelayMs = 0;
  tts.audio = new Uint8Array(24_000); // 0.5 s per sentence
  return {
    stt,
    llm,
    tts,
    settings: {
      stt: { provider: 'openai', base_url: stt.baseUrl, api_key: 'stt-key', model: 'whisper-1' },
      llm: { providers: [{ name: 'local', type: 'echo', models: ['echo'] }, { name: 'vendor', type: 'openai', base_url: llm.baseUrl, api_key: 'llm-key', models: ['slow'] }] },
      tts: { providers: [{ voice_provider: 'provider_2', type: 'openai', base_url: tts.url, api_key: 'tts-key' }] },
    },
    async close() {
      await Promise.all([stt.close(), llm.close(), tts.close()]);
    },
  };
}

/** The agent every call of these tests talks to. */
export const SLOW_AGENT = {
  name: 'latency',
  first_message: 'Hello.',
  llm: 'vendor/slow',
  fallback_llm: 'local/echo',
  voice_settings: { id: 'alloy', provider: 'provider_2' },
  vad_settings: { start_secs: 0.1, stop_secs: 0.3, silence_timeout_secs: 30 },
};

/** GET /v1/calls/{id} until its latency has `turns` turns. */
export async function latencyOf(td: TestDaemon, callId: string, turns: number): Promise<any> {
  const end = Date.now() + 10_000;
  for (;;) {
    const res = await td.api('GET', `/v1/calls/${callId}`);
    expect(res.status, res.text).toBe(200);
    if (res.body.latency.turns.length >= turns) return res.body.latency;
    if (Date.now() > end) throw new Error(`latency has not ${turns} turns: ${JSON.stringify(res.body.latency)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The reply turn's stages are the vendors' delays; the rest small; the turn's figures add up. */
export function expectReplyStages(reply: any): void {
  expect(reply.kind).toBe('reply');
  const s = reply.stages;
  expect(Object.keys(s).sort()).toEqual(['llm', 'playout', 'sentence', 'stt', 'tts', 'turn_commit']);
  expect(s.stt).toBeGreaterThanOrEqual(STT_MS);
  expect(s.stt).toBeLessThan(STT_MS + STT_SLACK_MS);
  expect(s.llm).toBeGreaterThanOrEqual(LLM_MS);
  expect(s.llm).toBeLessThan(LLM_MS + SLACK_MS);
  expect(s.tts).toBeGreaterThanOrEqual(TTS_MS);
  expect(s.tts).toBeLessThan(TTS_MS + SLACK_MS);
  for (const small of ['turn_commit', 'sentence', 'playout']) {
    expect(s[small], small).toBeGreaterThanOrEqual(0);
    expect(s[small], small).toBeLessThan(SMALL_MS);
  }
  expect(reply.marks.speech_end).toBe(0);
  const sum = Object.values(s as Record<string, number>).reduce((a, b) => a + b, 0);
  expect(Math.abs(reply.voice_to_voice_ms - sum)).toBeLessThan(1);
  expect(reply.voice_to_voice_ms).toBeCloseTo(reply.marks.audio_out_first, 0);
}

describe('agent turn latency of a web session', () => {
  let td: TestDaemon;
  let vendors: Awaited<ReturnType<typeof startSlowVendors>>;
  beforeAll(async () => {
    vendors = await startSlowVendors();
    td = await startTestDaemon({ sip: { enabled: false }, ...vendors.settings });
  });
  afterAll(async () => {
    await td?.close();
    await vendors?.close();
  });

  it('the stt, llm and tts stages are the vendors\' delays; latency and /metrics say so', async () => {
    const agent = await td.api('POST', '/v1/agents', SLOW_AGENT);
    expect(agent.status, agent.text).toBe(201);
    const tok = await td.api('POST', '/v1/session-token', { agent_id: agent.body.id });
    expect(tok.status, tok.text).toBe(200);
    const client = await VoiceClient.connect(td.url, tok.body.token as string);
    const started = await client.waitForType('session_started');
    const callId = started.data.id as string;
    client.startMic();
    // The first message, heard to its end.
    await client.waitFor((e) => e.type === 'response_text' && e.data.is_final === true, 10_000);
    const mark = client.events.length;
    await client.stream(speechLike(0.8));
    await client.stream(silence(0.5));
    const replyText = await client.waitFor((e) => e.type === 'response_text' && e.data.is_final === true, 10_000, mark);
    expect(replyText.data.text).toBe(REPLY);
    client.close();
    await client.waitClosed();

    const latency = await latencyOf(td, callId, 2);
    const [first, reply] = latency.turns;
    // The first message: no caller, no model; its audio went out as the first response_audio.
    expect(first).toMatchObject({ index: 0, kind: 'first', turn_id: expect.any(String), started_at: expect.any(String) });
    expect(Object.keys(first.marks)).toEqual(['tts_first_sentence', 'tts_first_audio', 'audio_out_first']);
    expect(first.stages.tts).toBeGreaterThanOrEqual(TTS_MS);
    expect(first.voice_to_voice_ms).toBeUndefined();
    expect(reply).toMatchObject({ index: 1, turn_id: replyText.data.turn_id });
    expectReplyStages(reply);
    expect(Date.parse(reply.started_at)).toBeGreaterThan(Date.parse(first.started_at));
    expect(latency.summary).toEqual({
      turns: 2,
      stages: expect.objectContaining({ stt: { p50: reply.stages.stt, p95: reply.stages.stt } }),
      voice_to_voice_ms: { p50: reply.voice_to_voice_ms, p95: reply.voice_to_voice_ms },
    });
    // The list does not carry it.
    const list = await td.api('GET', '/v1/calls');
    expect(list.body.calls.find((c: any) => c.id === callId)).not.toHaveProperty('latency');

    const metrics = await (await fetch(`${td.url}/metrics`)).text();
    expect(metrics).toMatch(/^callbridge_turn_stage_seconds_count\{stage="stt"\} 1$/m);
    expect(metrics).toMatch(/^callbridge_turn_stage_seconds_count\{stage="tts"\} 2$/m);
    expect(metrics).toMatch(/^callbridge_turn_voice_to_voice_seconds_count 1$/m);
    const sttSum = Number(/^callbridge_turn_stage_seconds_sum\{stage="stt"\} (\S+)$/m.exec(metrics)?.[1]);
    expect(sttSum * 1000).toBeCloseTo(reply.stages.stt, 0);
  });

  it('a call with no recorded turn has an empty latency', async () => {
    const agent = await td.api('POST', '/v1/agents', { ...SLOW_AGENT, name: 'never connected' });
    const tok = await td.api('POST', '/v1/session-token', { agent_id: agent.body.id });
    // The token names its session, which is the call record.
    const callId = (JSON.parse(Buffer.from((tok.body.token as string).split('.')[1]!, 'base64url').toString()) as { sub: string }).sub;
    const res = await td.api('GET', `/v1/calls/${callId}`);
    expect(res.status, res.text).toBe(200);
    expect(res.body.latency).toEqual({ turns: [], summary: { turns: 0, stages: {}, voice_to_voice_ms: null } });
  });
});

const NUMBER = '+15550007401';
const CALLER = '+15559997401';
const SPEECH = fileURLToPath(new URL('../../fixtures/audio/caller-hello.wav', import.meta.url));

describe.skipIf(sippAvailable().skip)('agent turn latency of a phone call (SIPp, media in a worker)', () => {
  let td: TestDaemon;
  let vendors: Awaited<ReturnType<typeof startSlowVendors>>;
  let agentId: string;
  beforeAll(async () => {
    vendors = await startSlowVendors();
    td = await startTestDaemon({ rtp: { address: '127.0.0.1', media_threads: 1 }, ...vendors.settings });
    agentId = (await td.api('POST', '/v1/agents', SLOW_AGENT)).body.id;
    const trunkId = (await td.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
    expect((await td.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
  });
  afterAll(async () => {
    await td?.close();
    await vendors?.close();
  });

  it('the stages are the vendors\' delays and audio_out_first is the first RTP packet of the reply', async () => {
    const remote = `127.0.0.1:${td.daemon.sip!.port}`;
    // 2.8 s of speech, then no RTP until the BYE at 7 s.
    const r = await runSipp({ scenario: 'inbound-acl-then-quiet', remote, service: NUMBER, keys: { caller: CALLER }, audio: SPEECH, durationMs: 7000 });
    expect(r.code, r.describe()).toBe(0);
    let rec: any;
    await untilAsync(async () => {
      const list = await td.api('GET', `/v1/calls?agent_ids=${agentId}`);
      rec = list.body.calls.find((c: any) => c.from === CALLER && c.ended_at);
      return rec !== undefined;
    }, 'the ended call record');
    const replyEntry = rec.transcript.entries.find((e: any) => e.role === 'assistant' && e.message === REPLY);
    expect(replyEntry, JSON.stringify(rec.transcript.entries)).toBeDefined();
    const latency = await latencyOf(td, rec.id, 2);
    const reply = latency.turns.find((t: any) => t.turn_id === replyEntry.turnId);
    expect(reply, JSON.stringify(latency.turns)).toBeDefined();
    // Only the bridge's report sets a phone call's audio_out_first (never its response_audio).
    expectReplyStages(reply);
    const first = latency.turns[0];
    expect(first.kind).toBe('first');
    expect(first.marks.audio_out_first, JSON.stringify(first)).toBeGreaterThan(first.marks.tts_first_audio);
  });
});
