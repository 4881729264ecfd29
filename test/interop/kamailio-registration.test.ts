/**
 * Interop: callbridge registers with Kamailio (Debian `kamailio`, config and lifecycle in
 * kamailio.ts) as it would with a carrier's registrar, on loopback. Kamailio challenges, stores
 * the binding in memory and grants at most 6 s, so callbridge's refresh is due every 3 s; an
 * INVITE sent to Kamailio for the address-of-record is relayed to callbridge's registered Contact
 * and must reach the trunk's agent. Then a wrong password (auth_failed) and a Kamailio restart,
 * which loses every binding: callbridge's next refresh must register again by itself.
 *
 * Daemon settings: T1 100 ms (Timer F 6.4 s), 60 s asked, retries after 1 s doubling up to 2 s.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SipCall } from '../../src/sip/ua/index.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startRawSipPeer, type RawSipPeer } from '../helpers/raw-sip.ts';
import { getTrunk, waitOutboundStatus } from '../helpers/outbound-registration-status.ts';
import { kamailioAvailable, startKamailio, type Kamailio } from './kamailio.ts';

const kamailio = kamailioAvailable();
const USER = 'alice';
const PASSWORD = 'kam-secret-42';
const NUMBER = '+15550008000';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let d: TestDaemon;
let k: Kamailio;
let agentId: string;
let trunkId: string;
const calls: SipCall[] = [];

const trunk = (id: string) => getTrunk(d, id);
const waitStatus = (id: string, status: string, timeoutMs: number) => waitOutboundStatus(d, id, status, timeoutMs, () => k.log().slice(-3000));

async function createTrunk(password: string): Promise<string> {
  const t = await d.api('POST', '/v1/sip-trunks', {
    pbx: 'generic',
    name: 'kamailio carrier',
    inbound_auth_type: 'none',
    outbound_host: `127.0.0.1:${k.port}`,
    outbound_sip_username: USER,
    outbound_sip_password: password,
    register: true,
  });
  expect(t.status, t.text).toBe(201);
  return t.body.id;
}

/** An INVITE for the address-of-record sent to Kamailio; resolves with the final statuses seen. */
async function callThroughKamailio(peer: RawSipPeer): Promise<number[]> {
  const callId = peer.invite(k.port, { user: USER, to: NUMBER });
  for (let i = 0; i < 100 && !peer.for(callId).some((r) => r.status >= 200); i++) await sleep(50);
  return peer
    .for(callId)
    .map((r) => r.status)
    .filter((s) => s >= 200);
}

describe.skipIf(kamailio.skip)(`callbridge registering with Kamailio${kamailio.ok ? '' : `: skipped, ${kamailio.reason}`}`, () => {
  beforeAll(async () => {
    k = await startKamailio({ user: USER, password: PASSWORD, minExpires: 2, maxExpires: 6 });
    d = await startTestDaemon({ sip: { t1_ms: 100, outbound_register_expires_secs: 60, outbound_register_retry_min_secs: 1, outbound_register_retry_max_secs: 2 } });
    d.daemon.sip!.ua.onInboundCall((call) => {
      calls.push(call);
      call.answer();
    });
    agentId = (await d.api('POST', '/v1/agents', { name: 'Kamailio line agent' })).body.id;
    trunkId = await createTrunk(PASSWORD);
    const a = await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, number: NUMBER });
    expect(a.status, a.text).toBe(201);
  }, 30_000);

  afterAll(async () => {
    await d?.close();
    await k?.stop();
  });

  it('registers (challenged by Kamailio), and an INVITE to the address-of-record reaches the trunk agent through the registered Contact', async () => {
    const t = await waitStatus(trunkId, 'registered', 8000);
    expect(t.outbound_registration_error).toBe('');
    // Kamailio grants at most 6 s.
    expect(Date.parse(t.outbound_registration_expires_at) - Date.now()).toBeLessThanOrEqual(6500);
    expect(k.log()).toMatch(/REGISTER sip:alice@127\.0\.0\.1.* not authenticated/);
    expect(k.log()).toMatch(/REGISTER sip:alice@127\.0\.0\.1.* saved, Contact <sip:cb[0-9a-f]{16}@127\.0\.0\.1:/);

    const peer = await startRawSipPeer('127.0.0.1');
    try {
      const before = calls.length;
      expect(await callThroughKamailio(peer)).toContain(200);
      expect(calls.length).toBe(before + 1);
      const call = calls.at(-1)!;
      expect(call.trunk?.id).toBe(trunkId);
      expect(call.route?.agentId).toBe(agentId);
      expect(call.route?.number).toBe(NUMBER);
      expect(k.log()).toMatch(new RegExp(`INVITE to sip:\\${NUMBER}@127\\.0\\.0\\.1:${k.port} relayed to sip:cb[0-9a-f]{16}@127\\.0\\.0\\.1:${d.daemon.sip!.port}`));
      call.hangup();
    } finally {
      await peer.close();
    }
    // Still registered across several of Kamailio's 6 s grants: the refreshes land.
    await sleep(7000);
    expect((await trunk(trunkId)).outbound_registration_status).toBe('registered');
  }, 30_000);

  it('a wrong password is auth_failed (Kamailio challenges the credentials again)', async () => {
    const wrong = await createTrunk('not-the-password');
    const t = await waitStatus(wrong, 'auth_failed', 8000);
    expect(t.outbound_registration_error).toMatch(/401/);
    expect(t.outbound_registration_error).toMatch(/credentials refused/);
    expect(JSON.stringify(t)).not.toContain('not-the-password');
    expect((await d.api('DELETE', `/v1/sip-trunks/${wrong}`)).status).toBe(204);
  }, 20_000);

  it('registers again by itself after Kamailio restarts and forgets every binding', async () => {
    await waitStatus(trunkId, 'registered', 8000);
    const port = k.port;
    await k.stop();
    k = await startKamailio({ user: USER, password: PASSWORD, minExpires: 2, maxExpires: 6, port });
    const peer = await startRawSipPeer('127.0.0.1');
    try {
      // Right after the restart Kamailio knows no Contact for alice...
      expect(await callThroughKamailio(peer)).toContain(404);
      // ...until callbridge's next refresh (due within 3 s of its last, plus a challenge).
      const until = Date.now() + 7000;
      let statuses: number[] = [];
      while (Date.now() < until) {
        if (/saved, Contact <sip:cb/.test(k.log())) break;
        await sleep(200);
      }
      expect(k.log()).toMatch(/saved, Contact <sip:cb[0-9a-f]{16}@/);
      statuses = await callThroughKamailio(peer);
      expect(statuses).toContain(200);
      expect(calls.at(-1)!.trunk?.id).toBe(trunkId);
      calls.at(-1)!.hangup();
    } finally {
      await peer.close();
    }
    await waitStatus(trunkId, 'registered', 4000);
  }, 30_000);
});
