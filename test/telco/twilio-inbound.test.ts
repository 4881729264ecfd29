/**
 * Inbound calls on an imported carrier number through the carrier's own voice path (Twilio's
 * voice webhook and bidirectional media streams), end to end: a real daemon on an ephemeral port
 * with its embedded agent runtime (energy VAD, eSpeak voice, local placeholder STT, local/echo),
 * and a fake Twilio (fake-twilio.ts) speaking the carrier's documented formats on loopback:
 * signed form-encoded webhooks, TwiML parsed, the media stream's JSON messages paced at 20 ms of
 * real time, a playout buffer that echoes marks and obeys clear.
 *
 *   - a forged or missing X-Twilio-Signature: 403, no TwiML, the source's first refusal logged
 *   - number not imported / not assigned / agent inactive: <Reject/>
 *   - a stream without the webhook's one-time token (none, another call's, spent): closed 4401
 *   - a call: the agent's first message arrives as 160-byte mu-law media, audible and paced one
 *     frame per 20 ms; marks come back; the caller's speech (caller-hello.wav) reaches the agent,
 *     which answers; DTMF reaches the agent; `stop` ends it; the record is complete (source
 *     twilio, the CallSid, the transcript)
 *   - barge-in: the caller talking over a long first message gets `clear`, and the agent's audio stops
 *   - organizations: each account's signed webhook reaches only its own organization's agent
 *   - the socket dropped without stop ends the session; the session's end (a timeout) closes the socket
 *   - protocol errors close the socket: 1007 not JSON, 1008 media before start
 */
import { fileURLToPath } from 'node:url';
import { expectCallTimes } from '../helpers/call-times.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalEspeakProvider } from '../../src/agent/providers/tts/local-espeak.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { loadWav8k } from '../interop/rtp-peer.ts';
import { FakeStream, incomingCallParams, levelDbfs, postVoiceWebhook, sid, type ReceivedFrame } from './fake-twilio.ts';

const ACCOUNT = sid('AC');
const AUTH_TOKEN = 'twilio-auth-token-' + sid('');
const NUMBER = '+15550101001';
const BARGE_NUMBER = '+15550101002';
const INACTIVE_NUMBER = '+15550101003';
const UNASSIGNED_NUMBER = '+15550101004';
const CALLER = '+15559990101';
const FIRST_MESSAGE = 'Hello from the carrier stream.';
const LONG_FIRST_MESSAGE =
  'Hello and thank you for calling the city library. Our opening hours are from nine in the morning until six in the evening, ' +
  'Monday to Friday, and from ten until four on Saturdays. We are closed on Sundays and public holidays.';
const VAD = { start_secs: 0.1, stop_secs: 0.4, silence_timeout_secs: 30 };
/** A frame louder than this is agent speech (eSpeak speaks at about -20 dBFS; silence is -inf). */
const LOUD_DBFS = -45;
const FIXTURE = fileURLToPath(new URL('../fixtures/audio/caller-hello.wav', import.meta.url));

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const loud = (f: ReceivedFrame) => levelDbfs(f.pcm) > LOUD_DBFS;

/** Talk spurts of received agent audio: runs of loud frames with gaps under 500 ms. */
function spurts(frames: readonly ReceivedFrame[]): Array<{ first: number; last: number; from: number; to: number }> {
  const out: Array<{ first: number; last: number; from: number; to: number }> = [];
  frames.forEach((f, i) => {
    if (!loud(f)) return;
    const cur = out[out.length - 1];
    if (cur !== undefined && f.at - cur.last < 500) {
      cur.last = f.at;
      cur.to = i;
    } else out.push({ first: f.at, last: f.at, from: i, to: i });
  });
  return out;
}

describe('inbound carrier calls (Twilio voice webhook + media streams)', () => {
  let carrier: FakeCarrier;
  let d: TestDaemon;
  let webhook: string;
  const logLines: string[] = [];
  const agents = { front: '', barge: '', inactive: '' };

  beforeAll(async () => {
    await new LocalEspeakProvider().warmUp();
    carrier = await startFakeCarrier();
    for (const n of [NUMBER, BARGE_NUMBER, INACTIVE_NUMBER, UNASSIGNED_NUMBER]) carrier.addNumber(ACCOUNT, AUTH_TOKEN, n);
    d = await startTestDaemon({ telco: { api_base_url: carrier.url } }, undefined, {}, logLines);
    webhook = `${d.url}/v1/telco/twilio/voice`;
    const imported: Record<string, string> = {};
    for (const n of [NUMBER, BARGE_NUMBER, INACTIVE_NUMBER, UNASSIGNED_NUMBER]) {
      const r = await d.api('POST', '/v1/telco/numbers', { phone_number: n, account_sid: ACCOUNT, auth_token: AUTH_TOKEN });
      expect(r.status, r.text).toBe(201);
      imported[n] = r.body.id;
    }
    // No http.public_url: the numbers' voice webhooks are not the daemon's to set.
    expect(carrier.requests.filter((r) => r.method === 'POST')).toEqual([]);
    const mk = async (body: Record<string, unknown>) => {
      const r = await d.api('POST', '/v1/agents', { vad_settings: VAD, ...body });
      expect(r.status, r.text).toBe(201);
      return r.body.id as string;
    };
    agents.front = await mk({ name: 'Front desk', first_message: FIRST_MESSAGE, phone_number_id: imported[NUMBER] });
    agents.barge = await mk({ name: 'Long talker', first_message: LONG_FIRST_MESSAGE, first_message_interruption_time: 30, phone_number_id: imported[BARGE_NUMBER] });
    agents.inactive = await mk({ name: 'Off duty', status: 'inactive', phone_number_id: imported[INACTIVE_NUMBER] });
  });

  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  const call = (to: string) => {
    const callSid = sid('CA');
    return { callSid, params: incomingCallParams({ accountSid: ACCOUNT, callSid, from: CALLER, to }) };
  };

  async function callRecord(callSid: string): Promise<any> {
    for (const end = Date.now() + 5000; ; await sleep(50)) {
      const list = await d.api('GET', '/v1/calls?source=twilio&page_size=100');
      expect(list.status, list.text).toBe(200);
      const rec = (list.body.calls as any[]).find((c) => c.carrier_call_id === callSid);
      if (rec?.ended_at || Date.now() > end) return rec;
    }
  }

  it('refuses a forged or missing signature with 403 and a log line, before anything else', async () => {
    const { params } = call(NUMBER);
    const forged = await postVoiceWebhook(webhook, params, 'not-the-auth-token');
    expect(forged.status).toBe(403);
    expect(JSON.parse(forged.text)).toEqual({ error: expect.stringContaining('X-Twilio-Signature') });
    expect(forged.stream).toBeUndefined();
    const missing = await postVoiceWebhook(webhook, params, AUTH_TOKEN, null);
    expect(missing.status).toBe(403);
    // Signed for another URL (the signature covers the URL), or with a parameter changed after signing.
    expect((await postVoiceWebhook(webhook, params, AUTH_TOKEN, undefined, `${d.url}/elsewhere`)).status).toBe(403);
    const { twilioSign } = await import('./fake-twilio.ts');
    const tampered = await postVoiceWebhook(webhook, { ...params, From: '+15550000000' }, AUTH_TOKEN, twilioSign(AUTH_TOKEN, webhook, params));
    expect(tampered.status).toBe(403);
    // An account nobody imported.
    expect((await postVoiceWebhook(webhook, { ...params, AccountSid: sid('AC') }, AUTH_TOKEN)).status).toBe(403);
    // One line for the source's first refusal of the minute; the other four are counted only
    // (twilio-webhook-limits.test.ts: the summary line and the metric).
    const refusals = logLines.filter((l) => l.includes('voice webhook refused'));
    expect(refusals.length).toBe(1);
    expect(logLines.join('\n')).not.toContain(AUTH_TOKEN);
    // The genuine request is accepted.
    const ok = await postVoiceWebhook(webhook, params, AUTH_TOKEN);
    expect(ok.status, ok.text).toBe(200);
    expect(ok.stream).toBeDefined();
  });

  it('rejects a number not imported, not assigned, or whose agent is inactive', async () => {
    for (const to of ['+15550109999', UNASSIGNED_NUMBER, INACTIVE_NUMBER]) {
      const r = await postVoiceWebhook(webhook, call(to).params, AUTH_TOKEN);
      expect(r.status, r.text).toBe(200);
      expect(r.contentType).toContain('xml');
      expect(r.reject, `${to}: ${r.text}`).toBe('rejected');
      expect(r.stream).toBeUndefined();
    }
    expect(logLines.some((l) => l.includes('not imported under that account'))).toBe(true);
    expect(logLines.some((l) => l.includes('not assigned to an agent'))).toBe(true);
    expect(logLines.some((l) => l.includes('agent is inactive'))).toBe(true);
  });

  it('answers with <Connect><Stream> to this daemon, with the call and a one-time token as parameters', async () => {
    const { callSid, params } = call(NUMBER);
    const r = await postVoiceWebhook(webhook, params, AUTH_TOKEN);
    expect(r.status).toBe(200);
    expect(r.text).toMatch(/^<\?xml version="1.0" encoding="UTF-8"\?><Response><Connect><Stream url="[^"]+">(<Parameter name="[^"]+" value="[^"]*"\/>)+<\/Stream><\/Connect><\/Response>$/);
    expect(r.stream!.url).toBe(`${d.url.replace(/^http/, 'ws')}/v1/telco/twilio/stream`);
    expect(r.stream!.parameters).toEqual({ token: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/), callSid, from: CALLER, to: NUMBER });
  });

  it('closes a stream without a valid one-time token (4401), and no call is bridged', async () => {
    const { callSid, params } = call(NUMBER);
    const answer = await postVoiceWebhook(webhook, params, AUTH_TOKEN);
    const cases: Array<[string, Record<string, string>, string]> = [
      ['no token', { callSid }, callSid],
      ['a made-up token', { token: 'x'.repeat(43) }, callSid],
      ["another call's token", answer.stream!.parameters, sid('CA')],
    ];
    for (const [what, customParameters, streamCallSid] of cases) {
      const s = await FakeStream.open(answer.stream!.url);
      s.start({ accountSid: ACCOUNT, callSid: streamCallSid, customParameters });
      await Promise.race([s.closed, sleep(3000)]);
      s.close();
      expect(s.closeCode, what).toBe(4401);
      expect(s.closeReason, what).toMatch(/token/);
      expect(s.frames.length, what).toBe(0);
    }
    // The token was spent by the attempt with the wrong CallSid: the right one cannot use it now.
    const late = await FakeStream.open(answer.stream!.url);
    late.start({ accountSid: ACCOUNT, callSid, customParameters: answer.stream!.parameters });
    await Promise.race([late.closed, sleep(3000)]);
    late.close();
    expect(late.closeCode).toBe(4401);
    expect(logLines.filter((l) => l.includes('media stream socket closed by callbridge') && l.includes('4401')).length).toBeGreaterThanOrEqual(4);
    expect(d.daemon.bridge.active).toBe(0);
  });

  it('bridges a call: paced audible agent audio with marks, caller speech and DTMF reach the agent, stop ends it with a complete record', async () => {
    const { callSid, params } = call(NUMBER);
    const answer = await postVoiceWebhook(webhook, params, AUTH_TOKEN);
    expect(answer.stream, answer.text).toBeDefined();
    const s = await FakeStream.open(answer.stream!.url);
    try {
      s.start({ accountSid: ACCOUNT, callSid, customParameters: answer.stream!.parameters });
      // The first message, then quiet for a while: it is over.
      await s.waitFor(() => {
        const sp = spurts(s.frames);
        return sp.length >= 1 && performance.now() - sp[0]!.last > 700;
      }, 10_000, 'the first message');
      const first = spurts(s.frames)[0]!;
      const heard = s.frames.slice(first.from, first.to + 1);
      expect(s.frames.every((f) => f.bytes === 160)).toBe(true);
      expect(Math.max(...heard.map((f) => levelDbfs(f.pcm)))).toBeGreaterThan(-30);
      // Paced one frame per 20 ms, not sent as the session's audio arrives (the session sends it
      // in chunks of several frames, 200 ms ahead): most frames arrive 10 ms or more after the one
      // before. A stall of this process bunches a few; a sender without pacing bunches nearly all.
      const intervals = heard.slice(1).map((f, i) => f.at - heard[i]!.at);
      const spaced = intervals.filter((g) => g >= 10).length / intervals.length;
      const gaps = intervals.map(Math.round).filter((g) => g > 60);
      expect(spaced, `share of frames 10 ms or more after the previous one`).toBeGreaterThan(0.6);
      expect(heard.length, `frames of the first message; gaps over 60 ms: ${gaps.join(', ')}`).toBeGreaterThan(50); // over a second of speech
      // Marks went out with the audio and came back as played.
      await s.waitFor(() => s.echoed.some((m) => m.played), 2000, 'a mark echoed');
      const marksSent = s.received.filter((r) => r.msg.event === 'mark').length;
      expect(marksSent).toBeGreaterThanOrEqual(Math.floor(heard.length / 25));

      // The caller speaks; the agent (local/echo) answers.
      s.say(loadWav8k(FIXTURE));
      await s.said();
      await s.waitFor(() => spurts(s.frames).length >= 2, 8000, "the agent's answer to the caller");
      // The caller presses 1 2 #; the agent answers that too.
      await s.waitFor(() => performance.now() - spurts(s.frames).at(-1)!.last > 700, 10_000, 'the answer to end');
      for (const k of ['1', '2', '#']) {
        s.dtmf(k);
        await sleep(120);
      }
      await s.waitFor(() => spurts(s.frames).length >= 3, 8000, "the agent's answer to the keys");
      await s.waitFor(() => performance.now() - spurts(s.frames).at(-1)!.last > 700, 10_000, 'that answer to end');
      s.stop(ACCOUNT, callSid);
      await s.closed;
    } finally {
      s.close();
    }
    const rec = await callRecord(callSid);
    expect(rec, 'the call record').toBeDefined();
    expect(rec).toMatchObject({
      source: 'twilio',
      carrier_call_id: callSid,
      direction: 'inbound',
      outbound: false,
      from: CALLER,
      to: NUMBER,
      party_number: CALLER,
      agent_id: agents.front,
      status: 'ended',
      termination_reason: 'client_closed',
    });
    expect(rec).not.toHaveProperty('sip_trunk_id');
    expectCallTimes(rec);
    const messages = (rec.transcript.entries as any[]).filter((e) => e.type === 'message').map((e) => `${e.role}: ${e.message}`);
    expect(messages[0]).toBe(`assistant: ${FIRST_MESSAGE}`);
    expect(messages).toContainEqual(expect.stringMatching(/^user: \(speech, \d\.\d seconds\)$/));
    expect(messages).toContainEqual(expect.stringMatching(/^assistant: You said: \(speech, /));
    expect(messages).toContain('user: [The caller pressed 12#]');
    expect(messages, messages.join('\n')).toContain('assistant: You said: [The caller pressed 12#].');
    // The leg's own account of what the caller heard, from the marks.
    let ended: any;
    await s.waitFor(() => (ended = logLines.map((l) => JSON.parse(l)).find((l) => l.msg === 'media stream ended' && l.streamSid === s.streamSid)) !== undefined, 3000, 'the media stream ended line');
    expect(ended.heardMs).toBeGreaterThan(1000);
    expect(ended.marksEchoed).toBe(ended.marksSent);
    const quality = logLines.map((l) => JSON.parse(l)).find((l) => l.msg === 'bridged call ended' && l.sessionId === rec.id);
    expect(quality?.framesIn).toBeGreaterThan(200);
    expect(d.daemon.bridge.active).toBe(0);
    // No secret in any log line: the auth token, the stream token.
    const all = logLines.join('\n');
    expect(all).not.toContain(AUTH_TOKEN);
    expect(all).not.toContain(answer.stream!.parameters.token);
  });

  it('barge-in: the caller talking over the agent gets `clear` at once, and the agent audio stops', async () => {
    const { callSid, params } = call(BARGE_NUMBER);
    const answer = await postVoiceWebhook(webhook, params, AUTH_TOKEN);
    const s = await FakeStream.open(answer.stream!.url);
    try {
      s.start({ accountSid: ACCOUNT, callSid, customParameters: answer.stream!.parameters });
      await s.waitFor(() => s.frames.some(loud), 10_000, 'the long first message');
      await sleep(1500);
      s.say(loadWav8k(FIXTURE));
      await s.waitFor(() => s.clears.length > 0, 3000, 'clear');
      const clearAt = s.clears[0]!;
      // The caller is still talking (2.8 s of speech): nothing the agent says may follow the
      // clear but the frame or two that were on the wire already.
      await sleep(600);
      const after = s.frames.filter((f) => f.at > clearAt);
      expect(after.filter(loud).length).toBeLessThanOrEqual(2);
      await s.said();
      s.stop(ACCOUNT, callSid);
      await s.closed;
    } finally {
      s.close();
    }
    const rec = await callRecord(callSid);
    expect(rec).toMatchObject({ source: 'twilio', carrier_call_id: callSid, status: 'ended', agent_id: agents.barge });
    const first = (rec.transcript.entries as any[]).find((e) => e.type === 'message' && e.role === 'assistant');
    // The transcript keeps what was heard: the cut first message, not all of it.
    expect(first.interrupted).toBe(true);
    expect(LONG_FIRST_MESSAGE.startsWith(first.message.replace(/[.…]+$/, ''))).toBe(true);
    expect(first.message.length).toBeLessThan(LONG_FIRST_MESSAGE.length);
  });
  it("never routes one organization's call to another's agent", async () => {
    // Organization B imports the same number under its own account and token, and assigns it.
    const bKey = await d.newOrgKey('bravo');
    const B_ACCOUNT = sid('AC');
    const B_TOKEN = 'bravo-token-' + sid('');
    carrier.addNumber(B_ACCOUNT, B_TOKEN, NUMBER);
    const bNum = await d.api('POST', '/v1/telco/numbers', { phone_number: NUMBER, account_sid: B_ACCOUNT, auth_token: B_TOKEN }, { key: bKey });
    expect(bNum.status, bNum.text).toBe(201);
    const bAgent = await d.api('POST', '/v1/agents', { name: 'Bravo desk', phone_number_id: bNum.body.id }, { key: bKey });
    expect(bAgent.status, bAgent.text).toBe(201);
    const grants = async (accountSid: string, token: string) => {
      const c = call(NUMBER);
      const r = await postVoiceWebhook(webhook, { ...c.params, AccountSid: accountSid }, token);
      return { r, callSid: c.callSid };
    };
    // A's account and token: a stream for A's agent (the record says so once the stream starts).
    const a = await grants(ACCOUNT, AUTH_TOKEN);
    const b = await grants(B_ACCOUNT, B_TOKEN);
    expect(a.r.stream && b.r.stream).toBeTruthy();
    // A's account named, B's token used (B knows only its own): refused.
    expect((await grants(ACCOUNT, B_TOKEN)).r.status).toBe(403);
    expect((await grants(B_ACCOUNT, AUTH_TOKEN)).r.status).toBe(403);
    for (const [g, accountSid, agentId, key] of [[a, ACCOUNT, agents.front, d.key], [b, B_ACCOUNT, bAgent.body.id, bKey]] as const) {
      const s = await FakeStream.open(g.r.stream!.url);
      s.start({ accountSid, callSid: g.callSid, customParameters: g.r.stream!.parameters });
      await s.waitFor(() => s.frames.some(loud), 10_000, 'the first message');
      s.stop(accountSid, g.callSid);
      await s.closed;
      const list = await d.api('GET', '/v1/calls?source=twilio&page_size=100', undefined, { key });
      const rec = (list.body.calls as any[]).find((c) => c.carrier_call_id === g.callSid);
      expect(rec, `the call is in its own organization's history`).toMatchObject({ agent_id: agentId, to: NUMBER });
      const otherKey = key === d.key ? bKey : d.key;
      const other = await d.api('GET', '/v1/calls?source=twilio&page_size=100', undefined, { key: otherKey });
      expect((other.body.calls as any[]).some((c) => c.carrier_call_id === g.callSid)).toBe(false);
    }
    // Both organizations able to sign for the number (same account and token) and both assigned: rejected.
    const cKey = await d.newOrgKey('charlie');
    const cNum = await d.api('POST', '/v1/telco/numbers', { phone_number: NUMBER, account_sid: ACCOUNT, auth_token: AUTH_TOKEN }, { key: cKey });
    expect(cNum.status, cNum.text).toBe(201);
    expect((await d.api('POST', '/v1/agents', { name: 'Charlie desk', phone_number_id: cNum.body.id }, { key: cKey })).status).toBe(201);
    const ambiguous = await grants(ACCOUNT, AUTH_TOKEN);
    expect(ambiguous.r.reject, ambiguous.r.text).toBe('rejected');
    expect(logLines.some((l) => l.includes('assigned in more than one organization'))).toBe(true);
    const cAgentId = (await d.api('GET', '/v1/agents', undefined, { key: cKey })).body[0].id;
    expect((await d.api('DELETE', `/v1/agents/${cAgentId}`, undefined, { key: cKey })).status).toBe(204);
  });

  it("ends the session when the stream's socket drops without stop, and closes the stream when the session ends", async () => {
    // The carrier's socket goes away without a stop message: the session ends as the caller's.
    const a = call(NUMBER);
    const ra = await postVoiceWebhook(webhook, a.params, AUTH_TOKEN);
    const sa = await FakeStream.open(ra.stream!.url);
    sa.start({ accountSid: ACCOUNT, callSid: a.callSid, customParameters: ra.stream!.parameters });
    await sa.waitFor(() => sa.frames.some(loud), 10_000, 'the first message');
    sa.close();
    expect(await callRecord(a.callSid)).toMatchObject({ status: 'ended', termination_reason: 'client_closed', source: 'twilio' });

    // The agent's default_timeout ends the session: callbridge closes the stream (1000).
    const short = await d.api('POST', '/v1/agents', { name: 'Short fuse', first_message: 'Hi.', timeout_settings: { default_timeout: 2 } });
    const n = '+15550101005';
    carrier.addNumber(ACCOUNT, AUTH_TOKEN, n);
    const imported = await d.api('POST', '/v1/telco/numbers', { phone_number: n, account_sid: ACCOUNT, auth_token: AUTH_TOKEN });
    expect((await d.api('PATCH', `/v1/agents/${short.body.id}`, { phone_number_id: imported.body.id })).status).toBe(200);
    const b = call(n);
    const rb = await postVoiceWebhook(webhook, b.params, AUTH_TOKEN);
    const sb = await FakeStream.open(rb.stream!.url);
    try {
      sb.start({ accountSid: ACCOUNT, callSid: b.callSid, customParameters: rb.stream!.parameters });
      await Promise.race([sb.closed, sleep(8000)]);
      expect(sb.closeCode, 'closed by callbridge when the session ended').toBe(1000);
    } finally {
      sb.close();
    }
    expect(await callRecord(b.callSid)).toMatchObject({ status: 'ended', termination_reason: 'timeout', agent_id: short.body.id });
  });

  it('closes a stream that breaks the protocol: not JSON (1007), media before start (1008)', async () => {
    const url = `${d.url.replace(/^http/, 'ws')}/v1/telco/twilio/stream`;
    const bad = await FakeStream.open(url);
    bad.ws.send('{not json');
    await Promise.race([bad.closed, sleep(3000)]);
    bad.close();
    expect(bad.closeCode).toBe(1007);
    const early = await FakeStream.open(url);
    early.send({ event: 'media', streamSid: early.streamSid, media: { track: 'inbound', chunk: '1', timestamp: '0', payload: 'AAAA' } });
    await Promise.race([early.closed, sleep(3000)]);
    early.close();
    expect(early.closeCode).toBe(1008);
    expect(early.closeReason).toBe('media before start');
  });

});
