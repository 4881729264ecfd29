/**
 * Call limits refuse before ringing: the call-limit refusal once came after a 180 Ringing and without Retry-After,
 * though bridge.max_calls promises Retry-After. The bridge now admits a routed INVITE before the
 * UAS sends any provisional response: over bridge.max_calls, 503 with Retry-After; over
 * bridge.max_calls_per_trunk, 486 Busy Here; no 18x either way (a 100 Trying is allowed).
 *
 * bridge.max_calls_per_org likewise 486. The per-trunk and per-organization limits are counted
 * in the store (call_slots): a slot taken at admission goes back when the call ends, or when the
 * admitted INVITE is refused before it is delivered; two daemons on one PostgreSQL store count
 * together (the call up on node A refuses the INVITE to node B).
 *
 * A real daemon and a raw UDP socket (every response seen, exactly): the first INVITE is routed
 * and bridged (it counts against the limits from then on), the second is refused.
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startRawSipPeer, type RawSipPeer } from '../helpers/raw-sip.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import type { SipResponse } from '../../src/sip/message/index.ts';

const NUMBER = '+15550408000';
const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

let d: TestDaemon | undefined;
let peer: RawSipPeer | undefined;
afterEach(async () => {
  await peer?.close();
  await d?.close();
  peer = undefined;
  d = undefined;
});

async function daemonWith(bridge: Record<string, unknown>, more: Record<string, unknown> = {}): Promise<TestDaemon> {
  const td = await startTestDaemon({ rtp: { address: '127.0.0.1', media_threads: 0 }, bridge, ...more });
  const agent = (await td.api('POST', '/v1/agents', { name: 'Desk', first_message: 'Hello.' })).body;
  const trunk = (await td.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
  expect((await td.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER })).status).toBe(201);
  return td;
}

async function finalOf(p: RawSipPeer, callId: string): Promise<SipResponse> {
  const end = Date.now() + 5000;
  for (;;) {
    const f = p.for(callId).find((r) => r.status >= 200);
    if (f) return f;
    if (Date.now() > end) throw new Error(`no final response for ${callId}: ${p.for(callId).map((r) => r.status).join(', ')}`);
    await delay(10);
  }
}

/** One call up on `first` (bridged, counted by the limits), then a second INVITE to `second` (default: the same daemon): its responses. */
async function secondCall(first: TestDaemon, secondTo: TestDaemon = first): Promise<SipResponse[]> {
  peer = await startRawSipPeer('127.0.0.1');
  peer.invite(first.daemon.sip!.port, { user: NUMBER, from: '+15559990001' });
  const end = Date.now() + 5000;
  while (first.daemon.bridge.active < 1) {
    if (Date.now() > end) throw new Error('the first call was never bridged');
    await delay(10);
  }
  const second = peer.invite(secondTo.daemon.sip!.port, { user: NUMBER, from: '+15559990002' });
  await finalOf(peer, second);
  await delay(100); // anything sent after the final would show up here
  return peer.for(second);
}

/** The call slots the daemon holds (counted in its memory on SQLite, in the store on PostgreSQL). */
const slotsHeld = (td: TestDaemon): Promise<number> => td.daemon.bridge.slotsHeld();

async function until(what: string, check: () => Promise<boolean>): Promise<void> {
  const end = Date.now() + 5000;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting until ${what}`);
    await delay(20);
  }
}

/** Refused before any provisional response: no 18x, and this final status. */
function expectRefusedBeforeRinging(responses: SipResponse[], status: number): void {
  const statuses = responses.map((r) => r.status);
  expect(statuses.filter((s) => s > 100 && s < 200), `responses: ${statuses.join(', ')}`).toEqual([]);
  expect(responses.find((r) => r.status >= 200)!.status).toBe(status);
}

describe('call limits refuse before any provisional response', () => {
  it('bridge.max_calls 1: the second INVITE gets 503 with Retry-After and no 18x', async () => {
    d = await daemonWith({ max_calls: 1 });
    const responses = await secondCall(d);
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s > 100 && s < 200), `responses: ${statuses.join(', ')}`).toEqual([]);
    const final = responses.find((r) => r.status >= 200)!;
    expect(final.status).toBe(503);
    expect(final.get('Retry-After')).toMatch(/^[1-9]\d*$/);
    const metrics = (await fetch(`${d.url}/metrics`).then((r) => r.text())).split('\n');
    expect(metrics).toContain('callbridge_bridge_call_failures_total{reason="limit_global"} 1');
    expect(metrics).toContain('callbridge_sip_call_outcomes_total{outcome="over_limit"} 1');
    expect(d.daemon.bridge.active).toBe(1);
  });

  it('bridge.max_calls_per_trunk 1: the second INVITE on the trunk gets 486 and no 18x', async () => {
    d = await daemonWith({ max_calls_per_trunk: 1 });
    const responses = await secondCall(d);
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s > 100 && s < 200), `responses: ${statuses.join(', ')}`).toEqual([]);
    expect(responses.find((r) => r.status >= 200)!.status).toBe(486);
    const metrics = (await fetch(`${d.url}/metrics`).then((r) => r.text())).split('\n');
    expect(metrics).toContain('callbridge_bridge_call_failures_total{reason="limit_trunk"} 1');
  });

  it('bridge.max_calls_per_org 1: the second INVITE of the organization gets 486 and no 18x; the slot goes back when the call ends', async () => {
    d = await daemonWith({ max_calls_per_org: 1 });
    expectRefusedBeforeRinging(await secondCall(d), 486);
    const metrics = (await fetch(`${d.url}/metrics`).then((r) => r.text())).split('\n');
    expect(metrics).toContain('callbridge_bridge_call_failures_total{reason="limit_org"} 1');
    expect(await slotsHeld(d)).toBe(1);
    // The call ends (hung up from our side): its slot is given back, and the next call rings.
    d.daemon.sip!.ua.hangupAll();
    const td = d;
    await until('the slot is given back', async () => td.daemon.bridge.active === 0 && (await slotsHeld(td)) === 0);
    const third = peer!.invite(d.daemon.sip!.port, { user: NUMBER, from: '+15559990003' });
    await until('the third call rings', async () => peer!.for(third).some((r) => r.status === 180 || r.status === 183 || r.status === 200));
  });

  it('an admitted INVITE refused afterwards (422 Session Interval Too Small) gives its slot back', async () => {
    d = await daemonWith({ max_calls_per_org: 1 });
    peer = await startRawSipPeer('127.0.0.1');
    const refused = peer.invite(d.daemon.sip!.port, { user: NUMBER, headers: ['Supported: timer', 'Session-Expires: 10'] });
    expect((await finalOf(peer, refused)).status).toBe(422);
    expect(await slotsHeld(d)).toBe(0);
    // The organization's one slot is free: a call is admitted and rings.
    const next = peer.invite(d.daemon.sip!.port, { user: NUMBER, from: '+15559990004' });
    await until('the next call rings', async () => peer!.for(next).some((r) => r.status === 180 || r.status === 183 || r.status === 200));
  });
});

const pgAvailable = postgresAvailability();

describe.skipIf(pgAvailable.skip)(`limits across two nodes on one PostgreSQL store${pgAvailable.skip ? `: skipped, ${pgAvailable.reason}` : ''}`, () => {
  let server: PostgresServer | undefined;
  let b: TestDaemon | undefined;
  const shared = async (name: string) => ({
    store: { url: await server!.createDatabase(name), pool_size: 4 },
    security: { encryption_key: Buffer.alloc(32, 0x21).toString('base64'), token_secret: Buffer.alloc(32, 0x22).toString('base64') },
  });
  afterEach(async () => {
    await b?.close();
    b = undefined;
  });
  afterAll(async () => {
    await server?.stop();
  });

  for (const [setting, limit] of [['max_calls_per_trunk', 'trunk'], ['max_calls_per_org', 'org']] as const) {
    it(`bridge.${setting} 1: a call up on node A, the INVITE to node B gets 486 before any 18x`, async () => {
      server ??= await startPostgres();
      const more = await shared(`limits_${limit}`);
      d = await daemonWith({ [setting]: 1 }, more);
      // Node B: its own data directory and node id, the same database (it finds the trunk and agent).
      b = await startTestDaemon({ rtp: { address: '127.0.0.1', media_threads: 0 }, bridge: { [setting]: 1 }, ...more });
      expectRefusedBeforeRinging(await secondCall(d, b), 486);
      const metrics = (await fetch(`${b.url}/metrics`).then((r) => r.text())).split('\n');
      expect(metrics).toContain(`callbridge_bridge_call_failures_total{reason="limit_${limit}"} 1`);
      expect(b.daemon.bridge.active).toBe(0);
    });
  }
});
