/**
 * Unauthenticated INVITE floods were once answered at full rate (10,000 x 401 at
 * 500/s from one source), and every INVITE from a blocked source wrote a warning line.
 *
 * A real daemon, a raw UDP socket (fast and exact: nothing retransmitted, every response seen):
 * - challenges per source are bounded by a token bucket (sip.challenge_rate / challenge_burst);
 *   over it, UDP INVITEs get no answer (the sender's retransmissions are its retry) and TCP ones
 *   503 with Retry-After; one warning per throttled source and minute; the rest counted in
 *   callbridge_sip_call_outcomes_total{outcome="throttled"};
 * - a blocked source's INVITEs get 403 with one warning per block, the rest counted as
 *   outcome="auth_blocked".
 */
import { connect } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { startLoggedDaemon, WARN, type LoggedDaemon } from '../helpers/logged-daemon.ts';
import { startRawSipPeer, type RawSipPeer } from '../helpers/raw-sip.ts';
import { DigestClient } from '../../src/sip/digest/index.ts';

const NUMBER = '+15550404000';
const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

let d: LoggedDaemon | undefined;
let peer: RawSipPeer | undefined;
afterEach(async () => {
  await peer?.close();
  await d?.close();
  peer = undefined;
  d = undefined;
});

function outcome(metrics: string, name: string): number {
  const line = metrics.split('\n').find((l) => l.startsWith(`callbridge_sip_call_outcomes_total{outcome="${name}"} `));
  return line === undefined ? 0 : Number(line.split(' ')[1]);
}

/** Call-IDs that got a final response of `status` (retransmissions counted once). */
function answered(p: RawSipPeer, status: number): Set<string> {
  return new Set(p.responses.filter((r) => r.status === status).map((r) => r.callId));
}

describe('challenge rate limit per source', () => {
  it('UDP: 300 INVITEs without credentials at once get at most the bucket’s 401s; the rest no answer, one warning, counted in /metrics', async () => {
    d = await startLoggedDaemon();
    peer = await startRawSipPeer('127.0.0.1');
    const N = 300;
    const t0 = performance.now();
    for (let i = 0; i < N; i++) peer.invite(d.sipPort, { user: NUMBER });
    // Every INVITE is handled once answered or counted as throttled.
    const end = Date.now() + 5000;
    for (;;) {
      const handled = answered(peer, 401).size + outcome(await d.metrics(), 'throttled');
      if (handled >= N) break;
      if (Date.now() > end) throw new Error(`only ${handled} of ${N} INVITEs handled`);
      await delay(20);
    }
    const elapsedSecs = (performance.now() - t0) / 1000;
    const challenged = answered(peer, 401).size;
    // Burst 40, then 20 a second for as long as the flood was being handled.
    expect(challenged).toBeGreaterThanOrEqual(40);
    expect(challenged).toBeLessThanOrEqual(40 + Math.ceil(20 * elapsedSecs) + 1);
    await delay(100);
    // Nothing else came back: no other status, no 401 for the dropped ones.
    expect(new Set(peer.responses.map((r) => r.status))).toEqual(new Set([401]));
    expect(answered(peer, 401).size).toBe(challenged);
    const metrics = await d.metrics();
    expect(outcome(metrics, 'throttled')).toBe(N - challenged);
    // The flood's warnings: the SIP layer's (start-up says its own, e.g. that no STT is configured).
    const warnings = d.lines.filter((l) => l.level >= WARN && l.component === 'sip');
    expect(warnings, JSON.stringify(warnings)).toHaveLength(1);
    expect(warnings[0]!.msg).toMatch(/challenge rate/);
    expect(JSON.stringify(warnings[0])).toContain('127.0.0.1');
  });

  it('TCP: over the bucket, INVITEs are answered 503 with Retry-After (a reliable transport does not retransmit)', async () => {
    d = await startLoggedDaemon({ sip: { challenge_burst: 5, challenge_rate: 1 } });
    const sock = connect(d.sipPort, '127.0.0.1');
    await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
    let text = '';
    sock.on('data', (b) => (text += b.toString('latin1')));
    const local = `127.0.0.1:${sock.localPort}`;
    const N = 15;
    let out = '';
    for (let i = 0; i < N; i++) {
      out += [
        `INVITE sip:${NUMBER}@127.0.0.1:${d.sipPort};transport=tcp SIP/2.0`,
        `Via: SIP/2.0/TCP ${local};branch=z9hG4bKtcpflood${i}`,
        `From: <sip:+15559990000@${local}>;tag=t${i}`,
        `To: <sip:${NUMBER}@127.0.0.1:${d.sipPort}>`,
        `Call-ID: tcp-flood-${i}`,
        'CSeq: 1 INVITE',
        `Contact: <sip:caller@${local};transport=tcp>`,
        'Max-Forwards: 70',
        'Content-Length: 0',
        '',
        '',
      ].join('\r\n');
    }
    const t0 = performance.now();
    sock.write(out);
    const end = Date.now() + 5000;
    const finals = () => [...text.matchAll(/^SIP\/2\.0 (\d{3})/gm)].map((m) => Number(m[1])).filter((s) => s >= 200);
    while (finals().length < N) {
      if (Date.now() > end) throw new Error(`responses so far:\n${text}`);
      await delay(20);
    }
    const elapsedSecs = (performance.now() - t0) / 1000;
    sock.destroy();
    const statuses = finals();
    // Burst 5, then 1 a second.
    expect(statuses.filter((s) => s === 401).length).toBeGreaterThanOrEqual(5);
    expect(statuses.filter((s) => s === 401).length).toBeLessThanOrEqual(5 + Math.ceil(elapsedSecs));
    expect(statuses.filter((s) => s !== 401).every((s) => s === 503)).toBe(true);
    const blocks = text.split(/(?=^SIP\/2\.0 )/m).filter((b) => b.startsWith('SIP/2.0 503'));
    expect(blocks.length).toBeGreaterThan(0);
    for (const b of blocks) expect(b).toMatch(/^Retry-After: *[1-9]\d*\r$/im);
  });
});

describe('a blocked source', () => {
  it('its INVITEs get 403 with one warning for the whole block; /metrics counts them', async () => {
    d = await startLoggedDaemon({ sip: { auth_max_failures: 2, auth_block_secs: 60 } });
    const r = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx', inbound_auth_type: 'digest', inbound_sip_username: 'flood-pbx', inbound_sip_password: 'right-password-1' });
    expect(r.status, r.text).toBe(201);
    peer = await startRawSipPeer('127.0.0.1');
    const p = peer;
    const port = d.sipPort;
    const final = async (callId: string) => {
      const end = Date.now() + 3000;
      for (;;) {
        const f = p.for(callId).find((x) => x.status >= 200);
        if (f) return f;
        if (Date.now() > end) throw new Error(`no final response for ${callId}`);
        await delay(5);
      }
    };
    // Two logins with a wrong password: the second failure blocks the source.
    for (let i = 0; i < 2; i++) {
      const challenge = await final(p.invite(port, { user: NUMBER }));
      expect(challenge.status).toBe(401);
      const creds = new DigestClient({ username: 'flood-pbx', password: 'wrong-password' }).respond({
        challenges: challenge.getAll('WWW-Authenticate'),
        method: 'INVITE',
        uri: `sip:${NUMBER}@127.0.0.1:${port}`,
      });
      if (!creds.ok) throw new Error(creds.reason);
      expect((await final(p.invite(port, { user: NUMBER, headers: creds.authorizations.map((a) => `Authorization: ${a.value}`) }))).status).toBe(403);
    }
    const before = d.lines.length;
    const N = 30;
    const ids: string[] = [];
    for (let i = 0; i < N; i++) ids.push(p.invite(port, { user: NUMBER }));
    for (const id of ids) expect((await final(id)).status).toBe(403);
    const warnings = d.lines.slice(before).filter((l) => l.level >= WARN);
    expect(warnings, JSON.stringify(warnings)).toHaveLength(1);
    expect(warnings[0]!.msg).toMatch(/blocked/);
    expect(outcome(await d.metrics(), 'auth_blocked')).toBe(N);
  });
});
