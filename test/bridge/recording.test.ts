/**
 * Call recording end to end (bridge.recording: both directions of a call as one stereo WAV). A daemon with bridge.recording on takes a call from SIPp (signaling) whose media
 * is this process (test/interop/rtp-peer.ts): the agent's first message plays, the caller says the
 * fixture test/fixtures/audio/caller-hello.wav, local/echo replies, the caller hangs up. Then
 * GET /v1/calls shows has_recording, and GET /v1/calls/{id}/recording returns a WAV whose left
 * channel holds the caller's speech, at the time and level the peer played it, and whose right
 * channel holds the agent's first message and reply at the times the peer heard them, nothing
 * else on either side; its length is the call's. Another organization gets 404; a daemon with
 * recording off stores no recording (404).
 *
 * The route itself (headers, streaming, 400/404 cases, OpenAPI) is also checked on a daemon
 * without SIP traffic, with a recording written by CallRecorder for a stored call record.
 */
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalEspeakProvider } from '../../src/agent/providers/tts/local-espeak.ts';
import { loadConfig } from '../../src/config.ts';
import { CallRecorder, INPUT_FRAME } from '../../src/bridge/call-recorder.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { isByeFromCaller, isInvite200, placeBridgeCall, sipTime, type BridgeCall } from '../interop/bridge-harness.ts';
import { describeSpurts, loadWav8k, nowMs, synthCapture, talkSpurts, type Spurt } from '../interop/rtp-peer.ts';
import { runSipp, sippAvailable } from '../interop/sipp.ts';
import { describeSpans, loudSpans, parseWav, rmsDb, type ParsedWav } from './wav.ts';

const sipp = sippAvailable();
const FIXTURE = fileURLToPath(new URL('../fixtures/audio/caller-hello.wav', import.meta.url));
const CALLER = '+15559996000';
const NUMBER = '+15550006000';
const VAD = { start_secs: 0.1, stop_secs: 0.4, silence_timeout_secs: 30 };
/** A talk spurt the peer heard is over when nothing loud arrived for this long. */
const QUIET_MS = 700;
/**
 * How far a sound's place in the recording may be from where the peer played or heard it: the
 * two clocks are the same machine's; between them lie the jitter buffer and the 20 ms ticks of
 * the bridge, the RTP on loopback, and the spurt analysis's 20 ms frames.
 */
const ALIGN_S = 0.25;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function fetchRecording(d: TestDaemon, id: string, key = d.key): Promise<{ status: number; headers: Headers; body: Buffer }> {
  const res = await fetch(`${d.url}/v1/calls/${id}/recording`, { headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, headers: res.headers, body: Buffer.from(await res.arrayBuffer()) };
}

/** The ended inbound call record from CALLER, polled until ended or the deadline. */
async function endedRecord(d: TestDaemon, since: number, deadline: number): Promise<any> {
  for (;;) {
    const res = await d.api('GET', '/v1/calls?outbound=false&source=sip&page_size=100');
    expect(res.status, res.text).toBe(200);
    const rec = (res.body.calls as any[]).find((c) => c.from === CALLER && Date.parse(c.created_at) >= since - 1000);
    if (rec?.ended_at || Date.now() > deadline) return rec;
    await sleep(50);
  }
}

describe('config: bridge.recording', () => {
  it('is off by default; CALLBRIDGE_BRIDGE_RECORDING and CALLBRIDGE_BRIDGE_RECORDING_SAMPLE_RATE set it', () => {
    expect(loadConfig({}, {}).bridge).toMatchObject({ recording: false, recording_sample_rate: 16_000 });
    expect(loadConfig({}, { CALLBRIDGE_BRIDGE_RECORDING: 'true', CALLBRIDGE_BRIDGE_RECORDING_SAMPLE_RATE: '8000' }).bridge).toMatchObject({ recording: true, recording_sample_rate: 8000 });
    expect(loadConfig({}, { CALLBRIDGE_BRIDGE_RECORDING: 'false' }).bridge.recording).toBe(false);
    expect(() => loadConfig({}, { CALLBRIDGE_BRIDGE_RECORDING_SAMPLE_RATE: '44100' })).toThrow(/recording_sample_rate/);
  });
});

describe('GET /v1/calls/{id}/recording (route)', () => {
  let d: TestDaemon;
  let other: string;
  const withFile = '5d0f3a9e-8c1b-4f7a-9e2d-6b4c3a2f1e00';
  const without = '5d0f3a9e-8c1b-4f7a-9e2d-6b4c3a2f1e01';
  let path: string;

  beforeAll(async () => {
    d = await startTestDaemon({ sip: { enabled: false } });
    other = await d.newOrgKey('someone else');
    const orgId = (await d.api('GET', '/v1/organization')).body.id as string;
    const created_at = new Date().toISOString();
    for (const id of [withFile, without]) {
      await d.daemon.store.calls.insert({ id, org_id: orgId, agent_id: null, sip_trunk_id: null, direction: 'inbound', from: CALLER, to: NUMBER, created_at });
      await d.daemon.store.calls.end(id, { ended_at: created_at, termination_reason: 'client_closed' });
    }
    // Two seconds of a known pattern, written the way the bridge writes it.
    const rec = new CallRecorder({ dir: join(d.dataDir, 'recordings'), callId: withFile, sampleRate: 24_000 });
    for (let t = 0; t < 100; t++) rec.tick(new Int16Array(INPUT_FRAME).fill(t + 1), t % 2 ? null : new Int16Array(INPUT_FRAME).fill(-(t + 1)));
    path = rec.close()!;
    expect(await d.daemon.store.calls.setRecording(withFile, path)).toBe(true);
  });
  afterAll(async () => {
    await d?.close();
  });

  it('streams the WAV from disk: audio/wav, content-length, the bytes of the file', async () => {
    const r = await fetchRecording(d, withFile);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toBe('audio/wav');
    expect(r.headers.get('content-length')).toBe(String(readFileSync(path).length));
    expect(r.headers.get('content-disposition')).toBe(`attachment; filename="${withFile}.wav"`);
    expect(r.headers.get('cache-control')).toBe('private, no-store');
    expect(r.body.equals(readFileSync(path))).toBe(true);
    const wav = parseWav(r.body);
    expect(wav).toMatchObject({ channels: 2, sampleRate: 24_000, dataBytes: 100 * INPUT_FRAME * 4 });
    expect(wav.left[99 * INPUT_FRAME]).toBe(100);
    expect(wav.right[98 * INPUT_FRAME]).toBe(-99);
    expect(wav.right[99 * INPUT_FRAME]).toBe(0);
    expect((await d.api('GET', `/v1/calls/${withFile}`)).body.has_recording).toBe(true);
  });

  it('404 for another organization, for a call without a recording, for a call that does not exist; 400 for a malformed id; 401 without a key', async () => {
    const theirs = await fetchRecording(d, withFile, other);
    expect(theirs.status).toBe(404);
    expect(JSON.parse(theirs.body.toString())).toEqual({ error: 'call not found' });
    const none = await d.api('GET', `/v1/calls/${without}/recording`);
    expect(none.status).toBe(404);
    expect(none.body.error).toMatch(/no recording/);
    expect((await d.api('GET', `/v1/calls/${without}`)).body.has_recording).toBe(false);
    expect((await d.api('GET', '/v1/calls/5d0f3a9e-8c1b-4f7a-9e2d-6b4c3a2f1eff/recording')).status).toBe(404);
    const bad = await d.api('GET', '/v1/calls/not-a-uuid/recording');
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/id/);
    expect((await d.api('GET', `/v1/calls/${withFile}/recording`, undefined, { key: null })).status).toBe(401);
  });

  it('is listed in /v1/openapi.json under calls, as audio/wav with its error responses', async () => {
    const doc = (await d.api('GET', '/v1/openapi.json', undefined, { key: null })).body;
    const op = doc.paths['/v1/calls/{id}/recording']?.get;
    expect(op, Object.keys(doc.paths).join(', ')).toBeDefined();
    expect(op.tags).toEqual(['calls']);
    expect(Object.keys(op.responses['200'].content)).toEqual(['audio/wav']);
    expect(Object.keys(op.responses).sort()).toEqual(['200', '400', '401', '404']);
  });

  it('404 saying so when the file is gone from disk', async () => {
    rmSync(path);
    const r = await d.api('GET', `/v1/calls/${withFile}/recording`);
    expect(r.status).toBe(404);
    expect(r.body.error).toMatch(/recording file is gone/);
  });
});

describe.skipIf(sipp.skip)(`call recording end to end (SIPp + RTP peer)${sipp.ok ? '' : `: skipped, ${sipp.reason}`}`, () => {
  let d: TestDaemon;
  let agentId: string;
  let fixture: Int16Array;

  beforeAll(async () => {
    fixture = loadWav8k(FIXTURE);
    await new LocalEspeakProvider().warmUp();
    d = await startTestDaemon({ rtp: { address: '127.0.0.1', media_timeout_secs: 10 }, bridge: { recording: true } });
    agentId = (await d.api('POST', '/v1/agents', { name: 'Recorded desk', vad_settings: VAD })).body.id;
    const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
  });

  it('records the caller on the left and the agent on the right, aligned in time; another org gets 404', async () => {
    const since = Date.now();
    const CALL_MS = 14_000;
    let call: BridgeCall | undefined;
    try {
      call = await placeBridgeCall({ scenario: 'bridge-acl', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: NUMBER, caller: CALLER, hangupAfterMs: CALL_MS, timeoutMs: CALL_MS + 15_000 });
      const { peer } = call;
      const finished = (after?: number): Spurt[] => peer.spurts(after === undefined ? {} : { after }).filter((s) => nowMs() - s.lastLoudAt >= QUIET_MS);
      await peer.waitFor(() => finished().length > 0, 10_000, `the agent's first message\n${describeSpurts(peer.spurts())}`);
      const play = await peer.play(fixture);
      await peer.waitFor(() => finished(play.lastLoudAt! + 1).length > 0, 13_000, `the agent's reply\n${describeSpurts(peer.spurts())}`);
      const r = await call.proc.result;
      expect(r.code, r.describe()).toBe(0);
      const answeredAt = sipTime(r, isInvite200)!;
      const byeAt = sipTime(r, isByeFromCaller)!;
      const heard = peer.spurts();
      // The first message and the reply (more, should the agent say more: not this test's concern).
      expect(heard.length, describeSpurts(heard, answeredAt)).toBeGreaterThanOrEqual(2);

      const rec = await endedRecord(d, since, Date.now() + 5000);
      expect(rec?.ended_at, JSON.stringify(rec)).toBeTruthy();
      expect(rec.has_recording).toBe(true);
      expect((await d.api('GET', `/v1/calls/${rec.id}`)).body.has_recording).toBe(true);
      const res = await fetchRecording(d, rec.id);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('audio/wav');
      expect(Number(res.headers.get('content-length'))).toBe(res.body.length);
      const wav: ParsedWav = parseWav(res.body);
      expect(wav).toMatchObject({ riff: 'RIFF', wave: 'WAVE', audioFormat: 1, channels: 2, sampleRate: 16_000, blockAlign: 4, byteRate: 64_000, bitsPerSample: 16 });
      expect(wav.dataBytes).toBe(res.body.length - 44);
      expect(existsSync(join(d.dataDir, 'recordings', `${rec.id}.wav`))).toBe(true);

      // As long as the call: answered (200 OK) to the caller's BYE.
      const seconds = wav.left.length / wav.sampleRate;
      const callSeconds = (byeAt - answeredAt) / 1000;
      expect(Math.abs(seconds - callSeconds), `recording ${seconds.toFixed(2)} s, call ${callSeconds.toFixed(2)} s`).toBeLessThan(1);

      const left = loudSpans(wav.left, wav.sampleRate);
      // Spans as the peer's analysis cuts its talk spurts: -45 dBFS, joined across 500 ms.
      const right = loudSpans(wav.right, wav.sampleRate, { joinMs: 500, minMs: 0 });
      const at = (epochMs: number) => (epochMs - answeredAt) / 1000;
      const ctx = [
        `left (caller): ${describeSpans(left)}`,
        `right (agent): ${describeSpans(right)}`,
        `peer heard (s from the 200 OK): ${heard.map((s) => `${at(s.start).toFixed(2)}-${at(s.lastLoudAt).toFixed(2)}`).join(', ')}`,
        `peer played the fixture: ${at(play.firstLoudAt!).toFixed(2)}-${at(play.lastLoudAt!).toFixed(2)}`,
      ].join('\n');

      // Right: the first message near the beginning, where the caller heard it; the reply after
      // the caller's speech, where the caller heard it.
      expect(right.length, ctx).toBeGreaterThanOrEqual(2);
      const first = right[0]!;
      expect(first.start, ctx).toBeLessThan(2);
      expect(Math.abs(first.start - at(heard[0]!.start)), ctx).toBeLessThanOrEqual(ALIGN_S);
      expect(first.end - first.start, ctx).toBeGreaterThan(1);
      const heardReply = heard.find((s) => s.start > play.lastLoudAt!);
      expect(heardReply, ctx).toBeDefined();
      const reply = right.find((s) => s.start > at(play.lastLoudAt!));
      expect(reply, ctx).toBeDefined();
      expect(Math.abs(reply!.start - at(heardReply!.start)), ctx).toBeLessThanOrEqual(ALIGN_S);
      expect(reply!.end - reply!.start, ctx).toBeGreaterThan(1);
      expect(first.rmsDb, ctx).toBeGreaterThan(-35);
      expect(reply!.rmsDb, ctx).toBeGreaterThan(-35);
      // Nothing on the agent's side while the caller spoke (the agent waits for the end of speech).
      expect(right.filter((s) => s.end > at(play.firstLoudAt!) + ALIGN_S && s.start < at(play.lastLoudAt!)), ctx).toEqual([]);

      // Left: the caller's speech only, after the first message, where and as loud as it was played.
      expect(left.length, ctx).toBe(1);
      const speech = left[0]!;
      expect(speech.start, ctx).toBeGreaterThan(first.end);
      expect(Math.abs(speech.start - at(play.firstLoudAt!)), ctx).toBeLessThanOrEqual(ALIGN_S);
      expect(Math.abs(speech.end - at(play.lastLoudAt!)), ctx).toBeLessThanOrEqual(ALIGN_S + 0.02);
      const played = talkSpurts(synthCapture(fixture), { hangoverMs: 10_000 })[0]!;
      expect(Math.abs(speech.rmsDb - played.rmsDb), ctx).toBeLessThan(3);
      expect(reply!.start, ctx).toBeGreaterThan(speech.end);
      // While the agent's first message plays, the caller's channel is silent (no leak across channels).
      const s0 = Math.floor(first.start * wav.sampleRate);
      const s1 = Math.floor(first.end * wav.sampleRate);
      expect(rmsDb(wav.left, s0, s1), ctx).toBeLessThan(-60);

      // Another organization: the call and its recording do not exist for it.
      const otherKey = await d.newOrgKey('another org');
      expect((await fetchRecording(d, rec.id, otherKey)).status).toBe(404);
      expect((await d.api('GET', `/v1/calls/${rec.id}`, undefined, { key: otherKey })).status).toBe(404);
    } finally {
      await call?.cleanup();
    }
  }, 60_000);

  it('a daemon with recording off (the default) records nothing: has_recording false, 404', async () => {
    const d2 = await startTestDaemon({ rtp: { address: '127.0.0.1' } });
    try {
      const agent = (await d2.api('POST', '/v1/agents', { name: 'Unrecorded' })).body.id;
      const trunk = (await d2.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
      expect((await d2.api('POST', `/v1/sip-trunks/${trunk}/assignments`, { agent_id: agent, alternate_number: NUMBER })).status).toBe(201);
      const since = Date.now();
      const r = await runSipp({ scenario: 'inbound-acl', remote: `127.0.0.1:${d2.daemon.sip!.port}`, service: NUMBER, keys: { caller: CALLER }, durationMs: 2000 });
      expect(r.code, r.describe()).toBe(0);
      const rec = await endedRecord(d2, since, Date.now() + 5000);
      expect(rec?.ended_at, JSON.stringify(rec)).toBeTruthy();
      expect(rec.started_at).toBeTruthy();
      expect(rec.has_recording).toBe(false);
      const res = await d2.api('GET', `/v1/calls/${rec.id}/recording`);
      expect(res.status).toBe(404);
      expect(res.body.error).toMatch(/no recording/);
      expect(existsSync(join(d2.dataDir, 'recordings'))).toBe(false);
    } finally {
      await d2.close();
    }
  }, 30_000);
});
