/**
 * callbridge registering with its carrier (register: true), against a real daemon
 * (test/helpers/daemon.ts) and a raw carrier registrar on a loopback UDP socket
 * (raw-carrier-registrar.ts), each test with its own registrar and trunk made through the REST API.
 *
 * Settings of the daemon: T1 50 ms (so Timer F, a REGISTER without answer, is 3.2 s), the expiry
 * asked 60 s, retries after 1 s doubling up to 4 s. The registrar grants 4 s, so a refresh is due
 * 2 s after each success.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { SipCall } from '../../src/sip/ua/index.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startCarrierRegistrar, type CarrierRegistrar, type ReceivedRegister } from '../helpers/raw-carrier-registrar.ts';
import { startRawSipPeer } from '../helpers/raw-sip.ts';
import { getTrunk, waitOutboundStatus } from '../helpers/outbound-registration-status.ts';

const USER = 'acct-4711';
const PASSWORD = 'carrier-secret-9';
const NUMBER = '+15550007000';
const SIP = { t1_ms: 50, outbound_register_expires_secs: 60, outbound_register_retry_min_secs: 1, outbound_register_retry_max_secs: 4 };

let d: TestDaemon;
let agentId: string;
const registrars: CarrierRegistrar[] = [];
const inbound: SipCall[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function registrar(grantSecs = 4): Promise<CarrierRegistrar> {
  const r = await startCarrierRegistrar({ user: USER, password: PASSWORD, grantSecs });
  registrars.push(r);
  return r;
}

async function createTrunk(r: CarrierRegistrar, extra: Record<string, unknown> = {}): Promise<string> {
  const t = await d.api('POST', '/v1/sip-trunks', {
    pbx: 'generic',
    name: 'carrier registration',
    inbound_auth_type: 'none',
    outbound_host: `127.0.0.1:${r.port}`,
    outbound_sip_username: USER,
    outbound_sip_password: PASSWORD,
    register: true,
    ...extra,
  });
  expect(t.status, t.text).toBe(201);
  return t.body.id;
}

const trunk = (id: string) => getTrunk(d, id);
const waitStatus = (id: string, status: string, timeoutMs: number) => waitOutboundStatus(d, id, status, timeoutMs);

const isUnregister = (x: ReceivedRegister) => x.expires === 0;
const success = (x: ReceivedRegister) => x.answered === 200 && x.expires !== 0;

describe('callbridge registering with its carrier (register: true)', () => {
  beforeAll(async () => {
    d = await startTestDaemon({ sip: SIP });
    agentId = (await d.api('POST', '/v1/agents', { name: 'Carrier line agent' })).body.id;
    d.daemon.sip!.ua.onInboundCall((call) => {
      inbound.push(call);
      call.answer();
    });
  });

  afterEach(async () => {
    // Trunks go first, so their un-REGISTERs find their registrar still listening.
    const list = (await d.api('GET', '/v1/sip-trunks')).body as { id: string }[];
    for (const t of list) await d.api('DELETE', `/v1/sip-trunks/${t.id}`);
    // Each registrar that last granted a registration hears its un-REGISTER answered before it
    // closes (2.5 s at most: a registrar gone silent gets none, or none in time).
    await Promise.all(
      registrars.map((r) => {
        const lastGrant = r.registers.findLastIndex(success);
        if (lastGrant < 0) return undefined;
        return r.waitFor((x) => isUnregister(x) && x.answered === 200, 2500, lastGrant + 1).catch(() => undefined);
      }),
    );
    await Promise.all(registrars.splice(0).map((r) => r.close()));
  });

  afterAll(async () => {
    await d?.close();
  });

  it('answers the challenge, shows registered with the granted expiry, and refreshes before it runs out', async () => {
    const r = await registrar(4);
    const id = await createTrunk(r);
    const first = await r.waitFor(success, 5000);
    expect(r.registers[0]!.authorized).toBe(false);
    expect(r.registers[0]!.answered).toBe(401);
    const req = first.request;
    expect(req.uri.toString()).toBe(`sip:127.0.0.1:${r.port}`);
    expect(req.to.uri.toString()).toBe(`sip:${USER}@127.0.0.1:${r.port}`);
    expect(req.from.uri.toString()).toBe(`sip:${USER}@127.0.0.1:${r.port}`);
    expect(first.expires).toBe(60);
    const contact = req.contacts[0]!.uri;
    expect(contact.kind === 'sip' && contact.user).toMatch(/^cb[0-9a-f]{16}$/);
    expect(contact.kind === 'sip' && contact.port).toBe(d.daemon.sip!.port);

    const t = await waitStatus(id, 'registered', 2000);
    expect(t.outbound_registration_error).toBe('');
    const until = Date.parse(t.outbound_registration_expires_at);
    expect(until - first.at).toBeGreaterThan(3000);
    expect(until - first.at).toBeLessThanOrEqual(4500);

    // The refresh: same Call-ID, a higher CSeq, due at half of the 4 s granted.
    const refresh = await r.waitFor((x) => success(x) && x !== first, 5000, r.registers.indexOf(first) + 1);
    expect(refresh.at - first.at).toBeGreaterThan(1500);
    expect(refresh.at - first.at).toBeLessThan(3500);
    expect(refresh.request.callId).toBe(req.callId);
    expect(refresh.request.cseq.seq).toBeGreaterThan(req.cseq.seq);
    expect((await trunk(id)).outbound_registration_status).toBe('registered');
    // Still registered after the first granted expiry: the refresh kept it.
    await sleep(Math.max(0, until + 500 - Date.now()));
    expect((await trunk(id)).outbound_registration_status).toBe('registered');

    const metrics = await fetch(`${d.url}/metrics`).then((x) => x.text());
    expect(metrics).toContain(`callbridge_sip_outbound_registration_up{trunk_id="${id}"} 1`);
    expect(metrics).toMatch(new RegExp(`callbridge_sip_outbound_registration_attempts_total\\{trunk_id="${id}",outcome="registered"\\} [2-9]`));
    expect(metrics).toMatch(new RegExp(`callbridge_sip_outbound_registration_attempts_total\\{trunk_id="${id}",outcome="challenged"\\} [1-9]`));
  });

  it('asks again with Min-Expires after 423 Interval Too Brief', async () => {
    const r = await registrar(600);
    r.minExpires = 120;
    const id = await createTrunk(r);
    const ok = await r.waitFor(success, 5000);
    expect(r.registers.some((x) => x.answered === 423 && x.expires === 60)).toBe(true);
    expect(ok.expires).toBe(120);
    await waitStatus(id, 'registered', 2000);
  });

  it('refused credentials after a challenge are auth_failed, with the reason and no password in the response', async () => {
    const r = await registrar();
    r.password = 'not-what-callbridge-has';
    const id = await createTrunk(r);
    const t = await waitStatus(id, 'auth_failed', 5000);
    expect(r.registers.some((x) => x.authorized && x.answered === 403)).toBe(true);
    expect(t.outbound_registration_error).toMatch(/403/);
    expect(JSON.stringify(t)).not.toContain(PASSWORD);
    expect(t.outbound_registration_expires_at).toBeNull();
  });

  it('403 without a challenge is failed, and the retries back off (doubling, capped)', async () => {
    const r = await registrar();
    r.mode = 'forbid';
    const id = await createTrunk(r);
    const t = await waitStatus(id, 'failed', 5000);
    expect(t.outbound_registration_error).toMatch(/403 Forbidden without a challenge/);
    await r.waitFor(() => r.registers.length >= 5, 15_000);
    const at = r.registers.map((x) => x.at);
    const gaps = at.slice(1).map((x, i) => x - at[i]!);
    // Retry 1: 0.5-1 s; retry 2: 1-2 s; retries 3 and 4: 2-4 s (the cap); timer slack allowed.
    expect(gaps[0]).toBeGreaterThanOrEqual(450);
    expect(gaps[0]).toBeLessThan(1300);
    expect(gaps[2]).toBeGreaterThanOrEqual(1900);
    expect(gaps[2]!).toBeGreaterThan(gaps[0]!);
    for (const g of gaps) expect(g).toBeLessThan(4400);
    // The carrier comes back: registered on the next retry.
    r.mode = 'normal';
    await waitStatus(id, 'registered', 6000);
  });

  it('a registrar that never answers is failed (timeout), then registered once it answers', async () => {
    const r = await registrar();
    r.mode = 'silent';
    const id = await createTrunk(r);
    // Before the first answer (none comes here): pending, from the moment the trunk exists.
    expect((await trunk(id)).outbound_registration_status).toBe('pending');
    const t = await waitStatus(id, 'failed', 6000);
    expect(t.outbound_registration_error).toMatch(/no answer/);
    r.mode = 'normal';
    await waitStatus(id, 'registered', 10_000);
  });

  it('PATCH of the password un-registers (Expires 0) and registers anew; register: false un-registers and reads not_registered', async () => {
    const r = await registrar(600);
    const id = await createTrunk(r);
    await r.waitFor(success, 5000);
    await waitStatus(id, 'registered', 2000);
    const mark = r.registers.length;
    r.password = 'rotated-secret-2';
    const patched = await d.api('PATCH', `/v1/sip-trunks/${id}`, { outbound_sip_password: 'rotated-secret-2' });
    expect(patched.status).toBe(200);
    // What was reported is about the old password: pending until the new registration answers.
    expect(patched.body.outbound_registration_status).toBe('pending');
    expect(patched.body.outbound_registration_expires_at).toBeNull();
    const gone = await r.waitFor(isUnregister, 5000, mark);
    expect(gone.request.contacts[0]!.expires).toBe(0);
    const again = await r.waitFor(success, 5000, r.registers.indexOf(gone) + 1);
    expect(again.request.callId).not.toBe(gone.request.callId);
    await waitStatus(id, 'registered', 2000);
    // A PATCH of something else leaves the registration alone.
    const renamed = await d.api('PATCH', `/v1/sip-trunks/${id}`, { name: 'renamed' });
    expect(renamed.body.outbound_registration_status).toBe('registered');

    const mark2 = r.registers.length;
    const off = await d.api('PATCH', `/v1/sip-trunks/${id}`, { register: false });
    expect(off.status).toBe(200);
    expect(off.body.outbound_registration_status).toBe('not_registered');
    await r.waitFor(isUnregister, 5000, mark2);
    expect(r.contact).toBeUndefined();
    await sleep(2500);
    expect(r.registers.slice(mark2).filter((x) => !isUnregister(x))).toEqual([]);
  });

  it('sends no un-REGISTER to a registrar that never answered', async () => {
    const r = await registrar();
    r.mode = 'silent';
    const id = await createTrunk(r);
    await waitStatus(id, 'failed', 6000);
    const mark = r.registers.length;
    expect((await d.api('DELETE', `/v1/sip-trunks/${id}`)).status).toBe(204);
    await sleep(2500);
    expect(r.registers.slice(mark).filter(isUnregister)).toEqual([]);
  });

  it('set inactive (another node of the cluster registers): stops refreshing without an un-REGISTER, forgets its state; active again: registers at once', async () => {
    const r = await registrar(4);
    await createTrunk(r);
    await r.waitFor(success, 5000);
    const registrations = d.daemon.sip!.registrations;
    try {
      await registrations.setActive(false);
      expect(registrations.states.size).toBe(0);
      const stoppedAt = r.registers.length;
      // Two refresh periods (a refresh is due 2 s after each success): nothing goes out.
      await sleep(4500);
      expect(r.registers.slice(stoppedAt), 'REGISTERs while inactive').toEqual([]);
      await registrations.setActive(true);
      const again = await r.waitFor(success, 3000, stoppedAt);
      expect(again.expires).not.toBe(0);
      expect(r.registers.slice(stoppedAt).filter(isUnregister)).toEqual([]);
    } finally {
      await registrations.setActive(true);
    }
  });

  it('DELETE of the trunk un-registers', async () => {
    const r = await registrar(600);
    const id = await createTrunk(r);
    await r.waitFor(success, 5000);
    const mark = r.registers.length;
    expect((await d.api('DELETE', `/v1/sip-trunks/${id}`)).status).toBe(204);
    const gone = await r.waitFor(isUnregister, 5000, mark);
    expect(gone.answered).toBeDefined();
  });

  it("routes the carrier's INVITE to the registered Contact by its To user; another Contact user is not taken for a registration", async () => {
    const r = await registrar(600);
    const id = await createTrunk(r);
    const a = await d.api('POST', `/v1/sip-trunks/${id}/assignments`, { agent_id: agentId, number: NUMBER });
    expect(a.status, a.text).toBe(201);
    await r.waitFor(success, 5000);
    const contactUser = (r.contact ?? '').replace(/^sip:([^@]+)@.*$/, '$1');
    expect(contactUser).toMatch(/^cb[0-9a-f]{16}$/);

    const carrier = await startRawSipPeer('127.0.0.1');
    try {
      const sipPort = d.daemon.sip!.port;
      const before = inbound.length;
      const callId = carrier.invite(sipPort, { user: contactUser, to: NUMBER });
      for (let i = 0; i < 50 && !carrier.for(callId).some((x) => x.status >= 200); i++) await sleep(50);
      expect(carrier.for(callId).map((x) => x.status)).toContain(200);
      expect(inbound.length).toBe(before + 1);
      const call = inbound.at(-1)!;
      expect(call.trunk?.id).toBe(id);
      expect(call.route?.agentId).toBe(agentId);
      expect(call.route?.number).toBe(NUMBER);
      call.hangup();

      const unknownTo = carrier.invite(sipPort, { user: contactUser, to: '+15550009999' });
      for (let i = 0; i < 50 && !carrier.for(unknownTo).some((x) => x.status >= 200); i++) await sleep(50);
      expect(carrier.for(unknownTo).map((x) => x.status)).toContain(404);

      // A Contact user that is no trunk's: the ordinary path (no ACL for this source: a challenge).
      const stranger = carrier.invite(sipPort, { user: 'cb0123456789abcdef', to: NUMBER });
      for (let i = 0; i < 50 && !carrier.for(stranger).some((x) => x.status >= 200); i++) await sleep(50);
      expect(carrier.for(stranger).map((x) => x.status)).toContain(401);
    } finally {
      await carrier.close();
    }
  });

  it('un-registers when the daemon stops and registers again after a restart (a new Call-ID)', async () => {
    const r = await registrar(600);
    const id = await createTrunk(r);
    const before = await r.waitFor(success, 5000);
    const mark = r.registers.length;
    await d.stop();
    await r.waitFor(isUnregister, 1000, mark);
    d = await d.restart();
    d.daemon.sip!.ua.onInboundCall((call) => {
      inbound.push(call);
      call.answer();
    });
    const after = await r.waitFor(success, 5000, mark + 1);
    expect(after.request.callId).not.toBe(before.request.callId);
    await waitStatus(id, 'registered', 2000);
  });

  it('a registrar that stops answering holds up the drain at most the un-REGISTER bound (3 s), not Timer F (32 s)', async () => {
    // A daemon of its own with the default T1 (500 ms): an unbounded un-REGISTER would wait 32 s.
    const own = await startTestDaemon({ sip: { outbound_register_retry_min_secs: 1 } });
    try {
      const r = await registrar(600);
      const t = await own.api('POST', '/v1/sip-trunks', { pbx: 'generic', inbound_auth_type: 'none', outbound_host: `127.0.0.1:${r.port}`, outbound_sip_username: USER, outbound_sip_password: PASSWORD, register: true });
      expect(t.status, t.text).toBe(201);
      await r.waitFor(success, 5000);
      r.mode = 'silent';
      const mark = r.registers.length;
      const started = Date.now();
      await own.stop();
      const took = Date.now() - started;
      expect(r.registers.slice(mark).some(isUnregister)).toBe(true);
      expect(took).toBeGreaterThanOrEqual(2900);
      expect(took).toBeLessThan(4500);
    } finally {
      await own.close();
    }
  });
});
