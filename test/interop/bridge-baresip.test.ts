/**
 * The README's first call ("A first call") with baresip as the phone, as CI proof that it works
 * as written: a daemon on its defaults (test/helpers/daemon.ts: ephemeral HTTP and SIP ports on
 * 127.0.0.1, SQLite in a temporary directory), the agent, the walk-through's digest trunk and the
 * number created through the REST API with the README's exact JSON bodies, then baresip
 * (Debian package) dials sip:100@127.0.0.1:<sip port> as user `office`, password `s3cret`.
 *
 * The caller's WAV: 5 s of silence, test/fixtures/audio/caller-hello.wav (2.8 s of eSpeak
 * speech), silence up to 14 s; baresip hangs up when it ends. baresip records what it heard
 * (sndfile, decoded PCMU, 8 kHz): that recording is judged by energy with the bridge e2e test's
 * analysis (rtp-peer.ts: 20 ms frames above -45 dBFS joined across pauses up to 500 ms into talk
 * spurts). Times below are seconds into baresip's recordings, which start at call set-up.
 *
 * Checks: (1) the call is established after a digest challenge (first INVITE without
 * credentials, second with username "office"); (2) the first message is heard as speech: a talk
 * spurt starting within 3 s, at least 1 s of speech above -35 dBFS RMS, over before the caller
 * speaks; nothing is heard while the caller talks; (3) the reply (local/echo through the embedded
 * eSpeak voice) is heard after the caller's speech ended: a spurt starting 0.3-3.5 s after the
 * caller's last word, spanning at least 1.5 s (longer than the silence re-prompt); (4) GET /v1/calls lists the ended call: inbound, the
 * agent and the trunk, from "office", to "100", answered and ended times, an end reason, and a
 * transcript with the first message, the user's turn and the reply.
 *
 * Failure messages carry the heard audio as one character per 250 ms ('#' above -40 dBFS), the
 * talk spurts and baresip's describe(). BRIDGE_BARESIP_AUDIO_DIR=<dir> keeps both recordings.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { LocalEspeakProvider } from '../../src/agent/providers/tts/local-espeak.ts';
import { SipResponse, type SipRequest } from '../../src/sip/message/index.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { baresipAvailable, readWavPcm16, rmsDbfs, runBaresip, type BaresipResult } from './baresip/baresip.ts';
import { describeSpurts, loadWav8k, pcm16Wav, synthCapture, talkSpurts, type Spurt } from './rtp-peer.ts';

const bs = baresipAvailable();
const FIXTURE = fileURLToPath(new URL('../fixtures/audio/caller-hello.wav', import.meta.url));

/** The README's requests, verbatim. */
const AGENT_BODY = { name: 'Front desk', prompt: 'Be brief.' };
const TRUNK_BODY = { pbx: '3cx', name: 'Office PBX', inbound_auth_type: 'digest', inbound_sip_username: 'office', inbound_sip_password: 's3cret' };
const NUMBER = '100';

const RATE = 8000;
/** The caller's WAV: silence until CALLER_AT_S, the fixture, silence up to CALL_S. */
const CALLER_AT_S = 5;
const CALL_S = 14;

// Bounds, in seconds of baresip's recordings. Measured (also with both cores busy): the first
// message starts at ~0.05 s and spans ~2.2 s; the reply starts ~0.85 s after the caller's last
// word (VAD stop_secs 0.8, then local/echo and eSpeak) and spans ~2.5 s. The one other thing the
// agent would say, "Are you still there?" (~0.9 s), comes 10 s (vad silence_timeout_secs) after
// the first message when the caller says nothing, i.e. at ~12.2 s: the reply window ends before
// that, and the reply must be longer, so a re-prompt never passes for a reply.
const FIRST_MESSAGE_WITHIN_S = 3;
const FIRST_MESSAGE_MIN_S = 1;
const REPLY_AFTER_MIN_S = 0.3;
const REPLY_AFTER_MAX_S = 3.5;
const REPLY_MIN_S = 1.5;
const SPEECH_RMS_DB = -35;
/** The energy line's frame and threshold. */
const LINE_FRAME_S = 0.25;
const LINE_DB = -40;

/** A mono 8 kHz PCM16 signal as baresip's recording timeline: a spurt's start/end are in ms. */
function spurtsOf(samples: Int16Array): Spurt[] {
  return talkSpurts(synthCapture(samples, { startAt: 0 }));
}

/** One character per 250 ms: '#' above -40 dBFS, '.' below. */
function energyLine(samples: Int16Array): string {
  const n = Math.round(LINE_FRAME_S * RATE);
  let line = '';
  for (let i = 0; i < samples.length; i += n) line += rmsDbfs(samples.subarray(i, Math.min(samples.length, i + n))) > LINE_DB ? '#' : '.';
  return line;
}

const s = (ms: number) => (ms / 1000).toFixed(2);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(bs.skip)(`README phone walk-through with baresip as the phone${bs.ok ? ` (${bs.version})` : `: skipped, ${bs.reason}`}`, () => {
  let d: TestDaemon;
  let agentId: string;
  let trunkId: string;
  /** What the daemon's SIP transport received, and the responses it sent (spied, unchanged). */
  const requests: SipRequest[] = [];
  let sentResponses: () => SipResponse[] = () => [];

  beforeAll(async () => {
    // The daemon warms the voice engine up at start-up without waiting for it; the engine is one
    // per process (this one), so wait for it as the bridge e2e test does: a user reading the
    // README has had it loaded long before dialling.
    await new LocalEspeakProvider().warmUp();
    d = await startTestDaemon();
    const transport = d.daemon.sip!.ua.transport;
    transport.on('request', (inbound) => requests.push(inbound.message));
    // A spy that calls through: it only records what the daemon sends.
    const spy = vi.spyOn(transport, 'send');
    sentResponses = () => spy.mock.calls.map((c) => c[0]).filter((m): m is SipResponse => m instanceof SipResponse);

    const agent = await d.api('POST', '/v1/agents', AGENT_BODY);
    expect(agent.status, agent.text).toBe(201);
    agentId = agent.body.id;
    const trunk = await d.api('POST', '/v1/sip-trunks', TRUNK_BODY);
    expect(trunk.status, trunk.text).toBe(201);
    trunkId = trunk.body.id;
    const asg = await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, number: NUMBER });
    expect(asg.status, asg.text).toBe(201);
  }, 30_000);

  afterAll(async () => {
    await d?.close();
  });

  it('baresip calls 100 as office/s3cret: hears the first message, speaks, hears the reply; /v1/calls shows the call', async () => {
    const fixture = loadWav8k(FIXTURE);
    const callerPcm = new Int16Array(CALL_S * RATE);
    callerPcm.set(fixture, CALLER_AT_S * RATE);
    // Where the caller's words are in its WAV (the fixture's loud span, as the analysis sees it).
    const words = talkSpurts(synthCapture(fixture), { hangoverMs: 10_000 });
    expect(words.length, describeSpurts(words)).toBe(1);
    const callerStartMs = CALLER_AT_S * 1000 + words[0]!.start;
    const callerEndMs = CALLER_AT_S * 1000 + words[0]!.end;

    const port = d.daemon.sip!.port;
    const since = Date.now();
    const phone: BaresipResult = await runBaresip({
      dial: `sip:${NUMBER}@127.0.0.1:${port}`,
      account: { user: 'office', password: 's3cret', domain: '127.0.0.1' },
      audio: pcm16Wav(callerPcm),
      maxSeconds: CALL_S + 10,
    });
    const hungUpAt = Date.now();

    const heard = phone.received ? readWavPcm16(phone.received).samples : new Int16Array(0);
    const sent = phone.sent ? readWavPcm16(phone.sent).samples : new Int16Array(0);
    const dir = process.env.BRIDGE_BARESIP_AUDIO_DIR;
    if (dir) {
      mkdirSync(dir, { recursive: true });
      if (phone.received) writeFileSync(join(dir, 'heard.wav'), phone.received);
      if (phone.sent) writeFileSync(join(dir, 'sent.wav'), phone.sent);
    }
    const spurts = spurtsOf(heard);
    const ctx = [
      `heard ${s((heard.length * 1000) / RATE)} s, sent ${s((sent.length * 1000) / RATE)} s; caller speaks ${s(callerStartMs)}-${s(callerEndMs)} s`,
      `heard per 250 ms (# above ${LINE_DB} dBFS): ${energyLine(heard)}`,
      `sent  per 250 ms (# above ${LINE_DB} dBFS): ${energyLine(sent)}`,
      `talk spurts heard (ms into the recording):\n${describeSpurts(spurts)}`,
      phone.describe(),
    ].join('\n');

    // 1. Established after a digest challenge: an INVITE without credentials (answered 401),
    //    then one with office's (answered 200: "Call established").
    expect(phone.failure, `baresip's call failed\n${ctx}`).toBeUndefined();
    expect(phone.established, `baresip did not establish the call\n${ctx}`).toBe(true);
    expect(phone.killed, `baresip had to be killed\n${ctx}`).toBe(false);
    const invites = requests.filter((r) => r.method === 'INVITE');
    const distinct = invites.filter((r, i) => invites.findIndex((x) => x.topVia?.branch === r.topVia?.branch) === i);
    expect(distinct.length, `INVITEs (distinct branches)\n${ctx}`).toBe(2);
    expect(distinct[0]!.getAll('Authorization'), ctx).toEqual([]);
    expect(distinct[1]!.getAll('Authorization').join(','), ctx).toMatch(/Digest .*username="office"/);
    const callId = distinct[0]!.callId;
    const finals = sentResponses()
      .filter((r) => r.callId === callId && r.cseq.method === 'INVITE' && r.status >= 200)
      .map((r) => r.status)
      .filter((st, i, all) => i === 0 || all[i - 1] !== st); // UDP retransmissions
    expect(finals, `final responses to the INVITEs\n${ctx}`).toEqual([401, 200]);
    // The recording must cover the call for its timeline to mean anything (RTP all along, not
    // only while the agent talks).
    expect(heard.length / RATE, `baresip heard less than the call\n${ctx}`).toBeGreaterThan(CALL_S - 2);

    // 2. The first message: speech within 3 s, at least 1 s of it, over before the caller speaks.
    const first = spurts.filter((x) => x.start < callerStartMs);
    expect(first.length, `no first message before the caller spoke\n${ctx}`).toBeGreaterThan(0);
    expect(first[0]!.start, `the first message started later than ${FIRST_MESSAGE_WITHIN_S} s\n${ctx}`).toBeLessThanOrEqual(FIRST_MESSAGE_WITHIN_S * 1000);
    const firstMs = first.reduce((n, x) => n + x.mediaMs, 0);
    expect(firstMs, `less than ${FIRST_MESSAGE_MIN_S} s of speech in the first message\n${ctx}`).toBeGreaterThanOrEqual(FIRST_MESSAGE_MIN_S * 1000);
    expect(Math.max(...first.map((x) => x.rmsDb)), `the first message is too quiet\n${ctx}`).toBeGreaterThan(SPEECH_RMS_DB);
    expect(first.at(-1)!.end, `the first message ran into the caller's speech\n${ctx}`).toBeLessThan(callerStartMs);

    // Nothing while the caller talks (no echo of the caller, no stray audio).
    const during = spurts.filter((x) => x.end > callerStartMs && x.start < callerEndMs + REPLY_AFTER_MIN_S * 1000);
    expect(during, `audio heard while the caller was speaking\n${ctx}`).toEqual([]);

    // 3. The reply: speech starting 0.3-3.5 s after the caller's last word, 1.5 s of it at least.
    const reply = spurts.filter((x) => x.start >= callerEndMs + REPLY_AFTER_MIN_S * 1000 && x.start <= callerEndMs + REPLY_AFTER_MAX_S * 1000);
    expect(reply.length, `no reply starting ${REPLY_AFTER_MIN_S}-${REPLY_AFTER_MAX_S} s after the caller's last word (${s(callerEndMs)} s)\n${ctx}`).toBeGreaterThan(0);
    expect(reply[0]!.mediaMs, `less than ${REPLY_MIN_S} s of speech in the reply\n${ctx}`).toBeGreaterThanOrEqual(REPLY_MIN_S * 1000);
    expect(reply[0]!.rmsDb, `the reply is too quiet\n${ctx}`).toBeGreaterThan(SPEECH_RMS_DB);

    // 4. The call record, once ended (the BYE was just sent; allow a few seconds).
    let rec: any;
    let list: string | undefined;
    for (const deadline = Date.now() + 5000; ; await sleep(100)) {
      const res = await d.api('GET', '/v1/calls?page_size=100');
      expect(res.status, res.text).toBe(200);
      list = res.text;
      rec = (res.body.calls as any[]).find((c) => c.to === NUMBER && Date.parse(c.created_at) >= since - 1000);
      if (rec?.ended_at || Date.now() > deadline) break;
    }
    const json = `${JSON.stringify(rec ?? list, null, 1)}\n${ctx}`;
    expect(rec, `no call to ${NUMBER} in GET /v1/calls\n${json}`).toBeDefined();
    expect(rec.direction, json).toBe('inbound');
    expect(rec.source, json).toBe('sip');
    expect(rec.party_number, json).toBe('office');
    expect(rec.agent_id, json).toBe(agentId);
    expect(rec.sip_trunk_id, json).toBe(trunkId);
    expect(rec.from, json).toBe('office');
    expect(rec.to, json).toBe(NUMBER);
    expect(rec.started_at, json).toBeTruthy();
    expect(rec.ended_at, `the record was not ended within 5 s of the hang-up\n${json}`).toBeTruthy();
    expect(Date.parse(rec.created_at), json).toBeLessThanOrEqual(Date.parse(rec.started_at));
    expect(Date.parse(rec.started_at), json).toBeLessThan(Date.parse(rec.ended_at));
    expect(Date.parse(rec.ended_at) - Date.parse(rec.started_at), json).toBeGreaterThan((CALL_S - 2) * 1000);
    expect(rec.duration_seconds, json).toBeGreaterThanOrEqual(CALL_S - 2);
    expect(Date.parse(rec.ended_at), json).toBeLessThanOrEqual(hungUpAt + 5000);
    // The caller's BYE (docs/calls.md: client_closed).
    expect(rec.termination_reason, json).toBe('client_closed');
    expect(rec.status, json).toBe('ended');
    const transcript = rec.transcript.entries as Array<{ role?: string; message: string }>;
    const agentTurns = transcript.filter((e) => e.role === 'assistant');
    const userTurns = transcript.filter((e) => e.role === 'user');
    expect(agentTurns[0]?.message, json).toBe('Hello! How can I help you today?');
    expect(userTurns.length, json).toBe(1);
    expect(userTurns[0]!.message, json).toMatch(/^\(speech, \d+\.\d seconds\)$/);
    expect(agentTurns[1]?.message, json).toBe(`You said: ${userTurns[0]!.message}.`);
    expect(transcript.indexOf(agentTurns[0]!), json).toBeLessThan(transcript.indexOf(userTurns[0]!));
    expect(transcript.indexOf(userTurns[0]!), json).toBeLessThan(transcript.indexOf(agentTurns[1]!));
  }, 60_000);
});
