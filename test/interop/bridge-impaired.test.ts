/**
 * The call bridge over an impaired network, as a lasting test: a real daemon, a
 * routed inbound call (SIPp on an ACL trunk, signaling only), and the test as the caller's RTP
 * peer (rtp-peer.ts), like bridge-e2e.test.ts, but the caller's RTP in BOTH directions passes an
 * impairing relay (test/helpers/impairing-relay.ts): 5 % loss, 20 ms + uniform 0..60 ms delay
 * (so packets overtake each other), 1 % duplicates, per direction, seeded.
 *
 *   daemon RTP <---> relay.a  ==5 % loss, 60 ms jitter, dups==>  relay.b <---> caller's RTP peer
 *                    (the SDP offer advertises relay.a)
 *
 * It shows: the call is not dropped (it ends by the caller's BYE; the record is `ended`,
 * `client_closed`); the agent's first message is heard through the impairment (a talk spurt
 * before the caller speaks); the caller's speech (caller-hello.wav) reaches the agent and the
 * `local/echo` agent answers (a talk spurt after it, and a user entry plus a second assistant
 * entry in the record's transcript). And it reports two figures, with loose sanity bounds only:
 *
 * - caller-side gap share: the share of the daemon's 20 ms frames (its sequence-number span)
 *   that a minimal caller jitter buffer could not play: never arrived, or arrived later than
 *   PLAYOUT_MS after its due time (media time + the fastest packet's transit);
 * - daemon concealment share: concealedFrames / framesIn of the daemon's `bridged call ended`
 *   log line (frames its jitter buffer concealed, of the frames it gave the agent).
 *
 * SEED: BRIDGE_IMPAIRED_SEED overrides the fixed seed; every failure message names the seed.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalEspeakProvider } from '../../src/agent/providers/tts/local-espeak.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { describeRelayStats, startImpairingRelay, type ImpairingRelay, type Impairment } from '../helpers/impairing-relay.ts';
import { isByeFromCaller, isInvite200, sipTime, waitForSdpAnswer } from './bridge-harness.ts';
import { describeSpurts, loadWav8k, nowMs, startRtpPeer, type CapturedPacket, type RtpPeer } from './rtp-peer.ts';
import { sippAvailable, startSipp, type SippProcess, type SippResult } from './sipp.ts';

const sipp = sippAvailable();
const here = (p: string) => fileURLToPath(new URL(p, import.meta.url));
const FIXTURE = here('../fixtures/audio/caller-hello.wav');

/** Whether a started daemon bridges calls (as in bridge-e2e.test.ts). BRIDGE_E2E=1/0 forces it. */
function bridgeWired(): { ok: boolean; reason: string } {
  if (process.env.BRIDGE_E2E === '0') return { ok: false, reason: 'BRIDGE_E2E=0' };
  if (process.env.BRIDGE_E2E === '1') return { ok: true, reason: 'BRIDGE_E2E=1' };
  const main = here('../../src/main.ts');
  if (!existsSync(here('../../src/bridge/call-bridge.ts'))) return { ok: false, reason: 'src/bridge/call-bridge.ts does not exist' };
  if (!/bridge\/call-bridge(\.ts|\.js)?['"]/.test(existsSync(main) ? readFileSync(main, 'utf8') : '')) return { ok: false, reason: 'src/main.ts does not wire the call bridge' };
  return { ok: true, reason: 'bridge wired' };
}
const wired = bridgeWired();

const SEED = process.env.BRIDGE_IMPAIRED_SEED ? Number(process.env.BRIDGE_IMPAIRED_SEED) : 20_2611;
const IMPAIR: Impairment = { loss: 0.05, delayMs: 20, jitterMs: 60, distribution: 'uniform', duplicate: 0.01 };
const CALLER = '+15559990000';
const NUMBER = '+15550003000';
const VAD = { start_secs: 0.1, stop_secs: 0.4, silence_timeout_secs: 30 };
/** The caller hangs up this long after the ACK: first message ~2.5 s, caller 2.8 s, reply ~3 s, margins for a loaded machine. */
const CALL_MS = 18_000;
/** The caller's minimal jitter buffer: a frame later than this past its due time is a gap. */
const PLAYOUT_MS = 200;
/** A spurt is over when nothing loud arrived for this long (the analysis hangover + margin). */
const QUIET_MS = 700;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface GapShare {
  /** Frames the sender sent: the extended sequence-number span of what arrived. */
  expected: number;
  /** Distinct frames that arrived (duplicates counted once). */
  arrived: number;
  missing: number;
  /** Arrived, but later than playoutMs past their due time. */
  late: number;
  /** (missing + late) / expected. */
  share: number;
}

/**
 * The caller-side gap share of one RTP stream (the first SSRC seen), as a minimal jitter buffer
 * with a fixed playout delay would play it: frame k is due at its media time (timestamp / 8 kHz)
 * plus the smallest transit of any packet (arrival - media time), and plays if its first copy
 * arrived within `playoutMs` of that. Sequence numbers count frames sent (RFC 3550 5.1), so the
 * extended span is what was sent.
 */
function callerGapShare(packets: readonly CapturedPacket[], playoutMs = PLAYOUT_MS): GapShare {
  const ssrc = packets[0]?.ssrc;
  const ps = packets.filter((p) => p.ssrc === ssrc);
  if (ps.length === 0) return { expected: 0, arrived: 0, missing: 0, late: 0, share: 0 };
  // Extend 16-bit seq and 32-bit timestamps around the first packet (RFC 3550 A.1).
  const seq0 = ps[0]!.seq;
  const ts0 = ps[0]!.timestamp;
  const first = new Map<number, { at: number; mediaMs: number }>();
  let lo = 0;
  let hi = 0;
  let prevSeq = 0;
  let prevTs = 0;
  for (const p of ps) {
    const s = prevSeq + (((p.seq - ((seq0 + prevSeq) & 0xffff) + 0x8000) & 0xffff) - 0x8000);
    const t = prevTs + ((((p.timestamp - ((ts0 + prevTs) >>> 0)) | 0) as number));
    prevSeq = s;
    prevTs = t;
    lo = Math.min(lo, s);
    hi = Math.max(hi, s);
    if (!first.has(s)) first.set(s, { at: p.at, mediaMs: (t * 1000) / 8000 });
  }
  let minTransit = Infinity;
  for (const f of first.values()) minTransit = Math.min(minTransit, f.at - f.mediaMs);
  let late = 0;
  for (const f of first.values()) if (f.at - (f.mediaMs + minTransit) > playoutMs) late++;
  const expected = hi - lo + 1;
  const missing = expected - first.size;
  return { expected, arrived: first.size, missing, late, share: (missing + late) / expected };
}

describe.skipIf(sipp.skip || !wired.ok)(`call bridge over an impaired network (seed ${SEED})${!sipp.ok ? `: skipped, ${sipp.reason}` : !wired.ok ? `: skipped, ${wired.reason}` : ''}`, () => {
  let d: TestDaemon;
  let agent: string;
  let trunk: string;
  const logLines: string[] = [];

  beforeAll(async () => {
    await new LocalEspeakProvider().warmUp();
    d = await startTestDaemon({ rtp: { media_timeout_secs: 10 } }, undefined, {}, logLines);
    const res = await d.api('POST', '/v1/agents', { name: 'Front desk', vad_settings: VAD });
    expect(res.status, res.text).toBe(201);
    agent = res.body.id;
    trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk}/assignments`, { agent_id: agent, alternate_number: NUMBER })).status).toBe(201);
  });

  afterAll(async () => {
    await d?.close();
  });

  it('5 % loss, 60 ms jitter, reordering and duplicates both ways: the call holds, the first message is heard, the agent hears the caller and answers', async () => {
    const since = Date.now();
    const fixture = loadWav8k(FIXTURE);
    let peer: RtpPeer | undefined;
    let relay: ImpairingRelay | undefined;
    let proc: SippProcess | undefined;
    try {
      peer = await startRtpPeer();
      // A = the daemon (its address comes with the SDP answer), B = the caller's peer.
      relay = await startImpairingRelay({ seed: SEED, impair: IMPAIR, b: { address: peer.host, port: peer.port } });
      proc = await startSipp({
        scenario: 'bridge-acl',
        remote: `127.0.0.1:${d.daemon.sip!.port}`,
        service: NUMBER,
        keys: { caller: CALLER, media_port: relay.a.port },
        vars: { hangup: 1 },
        durationMs: CALL_MS,
        timeoutMs: CALL_MS + 20_000,
      });
      const answer = await waitForSdpAnswer(proc, 15_000);
      relay.setEndpoint('a', { address: answer.address, port: answer.port });
      peer.setRemote(relay.b);
      const p = peer;
      const r0 = relay;
      const ctx = () => `seed ${SEED}; relay ${describeRelayStats(r0.stats())}\ntalk spurts heard (from the answer):\n${describeSpurts(p.spurts(), answer.seenAt)}`;
      const finished = (after?: number) => p.spurts(after === undefined ? {} : { after }).filter((s) => nowMs() - s.lastLoudAt >= QUIET_MS);

      await p.waitFor(() => finished().length > 0, 15_000, `the agent's first message through the relay\n${ctx()}`);
      const play = await p.play(fixture);
      await p.waitFor(() => finished(play.lastLoudAt! + 1).length > 0, 15_000, `the agent's answer after the caller's speech\n${ctx()}`);
      const r: SippResult = await proc.result;
      // Not dropped: the scenario ran to the caller's BYE and its 200 (a BYE from callbridge
      // during the pause would be an unexpected message and fail it).
      expect(r.code, `seed ${SEED}\n${r.describe()}`).toBe(0);
      expect(r.failedCalls ?? 0, `seed ${SEED}\n${r.describe()}`).toBe(0);
      expect(r.requests('BYE', 'received').length, `callbridge hung up: seed ${SEED}\n${r.describe()}`).toBe(0);
      const answeredAt = sipTime(r, isInvite200)!;
      const byeAt = sipTime(r, isByeFromCaller)!;
      expect(byeAt, `seed ${SEED}: no BYE from the caller\n${r.describe()}`).toBeDefined();

      // What the caller heard: a first message before it spoke, an answer after.
      const spurts = p.spurts();
      const story = `${ctx()}\n(200 OK at +${(answeredAt - answer.seenAt).toFixed(0)} ms; caller spoke +${(play.firstLoudAt! - answer.seenAt).toFixed(0)}..+${(play.lastLoudAt! - answer.seenAt).toFixed(0)} ms)`;
      expect(spurts.filter((s) => s.start < play.firstLoudAt!).length, `no first message before the caller spoke\n${story}`).toBeGreaterThan(0);
      const answers = spurts.filter((s) => s.start > play.lastLoudAt!);
      expect(answers.length, `no answer after the caller spoke\n${story}`).toBeGreaterThan(0);
      expect(Math.max(...answers.map((s) => s.mediaMs)), `the answer is too short to be speech\n${story}`).toBeGreaterThanOrEqual(800);
      expect(Math.max(...spurts.map((s) => s.rmsDb)), story).toBeGreaterThan(-35);

      // The record: ended by the caller, with the caller's words and the agent's answer.
      let rec: any;
      for (const deadline = Date.now() + 15_000; ; ) {
        const res = await d.api('GET', '/v1/calls?outbound=false&source=sip&page_size=100');
        rec = (res.body.calls as any[]).find((c) => c.to === NUMBER && Date.parse(c.created_at) >= since - 1000);
        if ((rec && rec.ended_at) || Date.now() > deadline) break;
        await sleep(100);
      }
      const json = `seed ${SEED}\n${JSON.stringify(rec, null, 1)}`;
      expect(rec, `no call record: seed ${SEED}`).toBeDefined();
      expect(rec.status, json).toBe('ended');
      expect(rec.termination_reason, json).toBe('client_closed');
      expect(rec.agent_id, json).toBe(agent);
      expect(rec.sip_trunk_id, json).toBe(trunk);
      const entries = rec.transcript.entries as Array<{ role?: string; message: string }>;
      expect(entries.some((e) => e.role === 'user' && e.message.trim() !== ''), json).toBe(true);
      const firstUser = entries.findIndex((e) => e.role === 'user');
      expect(entries.slice(firstUser + 1).some((e) => e.role === 'assistant' && e.message.trim() !== ''), `no answer turn after the caller's words\n${json}`).toBe(true);

      // The figures.
      let ended: any;
      for (const deadline = Date.now() + 10_000; !ended && Date.now() < deadline; await sleep(50)) {
        ended = logLines.map((l) => JSON.parse(l)).find((l) => l.msg === 'bridged call ended' && l.sessionId === rec.id);
      }
      expect(ended, `no 'bridged call ended' log line: seed ${SEED}`).toBeDefined();
      const relayStats = relay.stats();
      const gaps = callerGapShare(p.captured);
      const concealShare = ended.framesIn > 0 ? ended.concealedFrames / ended.framesIn : NaN;
      const report = [
        `impaired call, seed ${SEED}: ${JSON.stringify(IMPAIR)} each way`,
        `  relay: ${describeRelayStats(relayStats)}`,
        `  caller side: ${gaps.expected} frames sent by the daemon, ${gaps.missing} never arrived, ${gaps.late} later than ${PLAYOUT_MS} ms: gap share ${(100 * gaps.share).toFixed(2)} %`,
        `  daemon side: ${ended.concealedFrames} of ${ended.framesIn} frames concealed: concealment share ${(100 * concealShare).toFixed(2)} % (packets received ${ended.packetsReceived}, lost ${ended.packetsLost}, jitter ${ended.jitterMs} ms, buffer depth ${ended.jitterBufferDepthMs} ms)`,
      ].join('\n');
      console.log(report);
      // Loose sanity only: 5 % is lost each way, so both shares are above 0 and far below 30 %.
      expect(relayStats.aToB.dropped + relayStats.bToA.dropped, report).toBeGreaterThan(0);
      expect(relayStats.aToB.reordered + relayStats.bToA.reordered, report).toBeGreaterThan(0);
      expect(gaps.share, report).toBeGreaterThan(0);
      expect(gaps.share, report).toBeLessThan(0.3);
      expect(concealShare, report).toBeGreaterThan(0);
      expect(concealShare, report).toBeLessThan(0.3);
    } finally {
      proc?.kill();
      if (proc) await proc.result.catch(() => undefined);
      await relay?.close();
      await peer?.close();
    }
  }, 60_000);
});
