/**
 * callbridge as the registrar of PBXs on digest trunks (RFC 3261 10.3), against a real daemon
 * (test/helpers/daemon.ts) over real UDP and TCP sockets on loopback. The trunks, agents and
 * assignments are made through the REST API; REGISTERs are written as text by
 * raw-registrar-client.ts, each test from its own 127.0.0.x address so the per-source challenge
 * and failure limits of one test leave the others alone.
 *
 * Settings of the daemon: sip.register_min_expires_secs 2 (so expiry is testable in seconds),
 * sip.register_max_expires_secs 600, sip.auth_max_failures 3.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { trunkTransferDialer } from '../../src/bridge/sip-transfer-fallback.ts';
import { createLogger } from '../../src/log.ts';
import { createResponse } from '../../src/sip/message/index.ts';
import type { SipCall } from '../../src/sip/ua/index.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { bindingsOf, startRegistrarClient, type RegistrarClient } from '../helpers/raw-registrar-client.ts';

const USER = 'pbx-office';
const PASSWORD = 'registrar-secret-1';
const NUMBER = '+15550002000';
const SIP = { register_min_expires_secs: 2, register_max_expires_secs: 600, auth_max_failures: 3 };

let d: TestDaemon;
let trunkId: string;
let agentId: string;
const clients: RegistrarClient[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function client(address: string, protocol: 'udp' | 'tcp' = 'udp', daemon = d): Promise<RegistrarClient> {
  const c = await startRegistrarClient(protocol, address, daemon.daemon.sip!.port);
  clients.push(c);
  return c;
}

/** The organization of the daemon's initial key (the one that owns `trunkId`). */
async function orgIdOf(): Promise<string> {
  return (await d.daemon.store.organizations.byApiKey(d.key))!.id;
}

async function inboundStatus(id = trunkId, key?: string): Promise<string> {
  const r = await d.api('GET', `/v1/sip-trunks/${id}`, undefined, key === undefined ? {} : { key });
  expect(r.status, r.text).toBe(200);
  return r.body.inbound_registration_status;
}

/** Removes every binding of the trunk (Contact: *), so each test starts from none. */
async function unregisterAll(): Promise<void> {
  const c = await client('127.0.0.99');
  const r = await c.register({ user: USER, password: PASSWORD, contacts: ['*'], expires: 0 });
  expect(r.final.status).toBe(200);
}

async function createTrunk(td: TestDaemon, user: string, key?: string): Promise<string> {
  const t = await td.api('POST', '/v1/sip-trunks', { pbx: '3cx', name: `registering ${user}`, inbound_auth_type: 'digest', inbound_sip_username: user, inbound_sip_password: PASSWORD }, key === undefined ? {} : { key });
  expect(t.status, t.text).toBe(201);
  return t.body.id;
}

describe('callbridge as a SIP registrar for PBXs on digest trunks', () => {
  beforeAll(async () => {
    d = await startTestDaemon({ sip: SIP });
    agentId = (await d.api('POST', '/v1/agents', { name: 'Registrar test agent' })).body.id;
    trunkId = await createTrunk(d, USER);
    const a = await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, number: NUMBER });
    expect(a.status, a.text).toBe(201);
  });

  afterEach(async () => {
    await Promise.all(clients.splice(0).map((c) => c.close()));
    await unregisterAll();
    await Promise.all(clients.splice(0).map((c) => c.close()));
  });

  afterAll(async () => {
    await d?.close();
  });

  it('challenges a REGISTER without credentials (401, the daemon realm) and lists REGISTER in Allow out of dialog', async () => {
    const c = await client('127.0.0.11');
    const r = await c.register({ user: USER });
    expect(r.final.status).toBe(401);
    expect(r.final.getAll('WWW-Authenticate').join(',')).toMatch(/^Digest realm="callbridge"/);
    expect(await inboundStatus()).toBe('not_registered');
    c.sendRaw(
      [`OPTIONS sip:127.0.0.1:${d.daemon.sip!.port} SIP/2.0`, `Via: SIP/2.0/UDP ${c.address}:${c.port};branch=z9hG4bKopt1`, `From: <sip:x@${c.address}>;tag=1`, 'To: <sip:127.0.0.1>', 'Call-ID: options-allow@test', 'CSeq: 1 OPTIONS', 'Max-Forwards: 70', 'Content-Length: 0', '', ''].join('\r\n'),
    );
    await expect.poll(() => c.received.find((m) => m.callId === 'options-allow@test')).toBeDefined();
    expect(c.received.find((m) => m.callId === 'options-allow@test')!.getAll('Allow').join(', ')).toMatch(/\bREGISTER\b/);
  });

  it('registers two Contacts with their own expiries, refreshes one, clamps to the maximum; GET and /metrics show the trunk registered', async () => {
    const c = await client('127.0.0.12');
    const a = '<sip:a@127.0.0.12:5071>;expires=120';
    const b = '<sip:b@127.0.0.12:5072>';
    const first = await c.register({ user: USER, password: PASSWORD, contacts: [a, b], expires: 300, cseq: 1 });
    expect(first.challenge?.status).toBe(401);
    expect(first.final.status).toBe(200);
    let bindings = bindingsOf(first.final);
    expect([...bindings.keys()].sort()).toEqual(['sip:a@127.0.0.12:5071', 'sip:b@127.0.0.12:5072']);
    expect(bindings.get('sip:a@127.0.0.12:5071')).toBeGreaterThanOrEqual(119);
    expect(bindings.get('sip:a@127.0.0.12:5071')).toBeLessThanOrEqual(120);
    expect(bindings.get('sip:b@127.0.0.12:5072')).toBeGreaterThanOrEqual(299);

    expect(await inboundStatus()).toBe('registered');
    const list = await d.api('GET', '/v1/sip-trunks');
    expect(list.body.find((t: { id: string }) => t.id === trunkId).inbound_registration_status).toBe('registered');
    const metrics = await d.api('GET', '/metrics', undefined, { key: null });
    expect(metrics.text).toContain(`callbridge_sip_registrations{trunk_id="${trunkId}"} 2`);

    // Refresh a (same Call-ID, higher CSeq) and ask for more than the maximum: 600.
    const refresh = await c.register({ user: USER, password: PASSWORD, contacts: ['<sip:a@127.0.0.12:5071>;expires=9999'], callId: first.callId, cseq: first.cseq + 1 });
    expect(refresh.final.status).toBe(200);
    bindings = bindingsOf(refresh.final);
    expect(bindings.size).toBe(2);
    expect(bindings.get('sip:a@127.0.0.12:5071')).toBeGreaterThanOrEqual(599);
    expect(bindings.get('sip:a@127.0.0.12:5071')).toBeLessThanOrEqual(600);
    expect(bindings.get('sip:b@127.0.0.12:5072')).toBeLessThanOrEqual(300);
  });

  it('answers 423 with Min-Expires below the minimum and changes nothing; Expires 0 removes that Contact only', async () => {
    const c = await client('127.0.0.13');
    const ok = await c.register({ user: USER, password: PASSWORD, contacts: ['<sip:a@127.0.0.13:5071>', '<sip:b@127.0.0.13:5072>'], expires: 60 });
    expect(ok.final.status).toBe(200);

    const brief = await c.register({ user: USER, password: PASSWORD, contacts: ['<sip:c@127.0.0.13:5073>;expires=1'] });
    expect(brief.final.status).toBe(423);
    expect(brief.final.get('Min-Expires')).toBe('2');
    const query = await c.register({ user: USER, password: PASSWORD, contacts: [] });
    expect(query.final.status).toBe(200);
    expect([...bindingsOf(query.final).keys()].sort()).toEqual(['sip:a@127.0.0.13:5071', 'sip:b@127.0.0.13:5072']);

    const removed = await c.register({ user: USER, password: PASSWORD, contacts: ['<sip:b@127.0.0.13:5072>'], expires: 0 });
    expect(removed.final.status).toBe(200);
    expect([...bindingsOf(removed.final).keys()]).toEqual(['sip:a@127.0.0.13:5071']);
    expect(await inboundStatus()).toBe('registered');
  });

  it('Contact: * with Expires 0 removes every binding; * with another Expires is 400', async () => {
    const c = await client('127.0.0.14');
    expect((await c.register({ user: USER, password: PASSWORD, contacts: ['<sip:a@127.0.0.14:5071>', '<sip:b@127.0.0.14:5072>'], expires: 60 })).final.status).toBe(200);
    const bad = await c.register({ user: USER, password: PASSWORD, contacts: ['*'], expires: 10 });
    expect(bad.final.status).toBe(400);
    expect(await inboundStatus()).toBe('registered');
    const all = await c.register({ user: USER, password: PASSWORD, contacts: ['*'], expires: 0 });
    expect(all.final.status).toBe(200);
    expect(all.final.contacts).toEqual([]);
    expect(await inboundStatus()).toBe('not_registered');
  });

  it('refuses a REGISTER older than the one that wrote a binding (same Call-ID, lower CSeq: 400), takes a new Call-ID', async () => {
    const c = await client('127.0.0.15');
    const newer = await c.register({ user: USER, password: PASSWORD, contacts: ['<sip:a@127.0.0.15:5071>'], expires: 60, cseq: 10 });
    expect(newer.final.status).toBe(200);
    const older = await c.register({ user: USER, password: PASSWORD, contacts: ['<sip:a@127.0.0.15:5071>'], expires: 0, callId: newer.callId, cseq: 3 });
    expect(older.final.status).toBe(400);
    expect(older.final.reason).toBe('Invalid CSeq number');
    expect(await inboundStatus()).toBe('registered');
    // A PBX that restarted uses a new Call-ID: its REGISTER wins whatever its CSeq.
    const restarted = await c.register({ user: USER, password: PASSWORD, contacts: ['<sip:a@127.0.0.15:5071>'], expires: 0, cseq: 1 });
    expect(restarted.final.status).toBe(200);
    expect(await inboundStatus()).toBe('not_registered');
  });

  it('wrong password: 401 then 403, the trunk reads auth_failed until a REGISTER authenticates', async () => {
    const c = await client('127.0.0.16');
    const wrong = await c.register({ user: USER, password: 'not-the-password' });
    expect(wrong.challenge?.status).toBe(401);
    expect(wrong.final.status).toBe(403);
    expect(await inboundStatus()).toBe('auth_failed');
    const right = await c.register({ user: USER, password: PASSWORD, expires: 60 });
    expect(right.final.status).toBe(200);
    expect(await inboundStatus()).toBe('registered');
    // A failed attempt by someone else does not make a registered trunk look broken.
    const other = await client('127.0.0.17');
    expect((await other.register({ user: USER, password: 'guess' })).final.status).toBe(403);
    expect(await inboundStatus()).toBe('registered');
  });

  it('unknown username, an ACL trunk, or credentials for another address-of-record: the same 403 as a wrong password, nothing told', async () => {
    const c = await client('127.0.0.18');
    const wrong = await c.register({ user: USER, password: 'not-the-password' });
    const unknown = await c.register({ user: 'nobody-here', password: PASSWORD });
    expect(unknown.challenge?.status).toBe(401);
    expect(unknown.final.status).toBe(403);
    expect(unknown.final.reason).toBe(wrong.final.reason);
    expect(unknown.final.getAll('WWW-Authenticate')).toEqual([]);

    const acl = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', inbound_auth_type: 'acl', inbound_acl: ['192.0.2.0/24'], inbound_sip_username: 'acl-trunk-user', inbound_sip_password: PASSWORD });
    expect(acl.status, acl.text).toBe(201);
    const c2 = await client('127.0.0.19');
    const onAcl = await c2.register({ user: 'acl-trunk-user', password: PASSWORD });
    expect(onAcl.challenge?.status).toBe(401);
    expect(onAcl.final.status).toBe(403);
    expect(onAcl.final.reason).toBe(wrong.final.reason);

    // Right credentials, but To names another user: 403 (one trunk, one address-of-record).
    const c3 = await client('127.0.0.20');
    const otherAor = await c3.register({ user: 'someone-else', authUser: USER, password: PASSWORD });
    expect(otherAor.final.status).toBe(403);
    // Only the wrong password of the first REGISTER marked the trunk; nothing since cleared it.
    expect(await inboundStatus()).toBe('auth_failed');
  });

  it('counts failed REGISTERs in the per-source failure limit: after sip.auth_max_failures the source gets 403 without a challenge', async () => {
    const c = await client('127.0.0.21');
    for (let i = 0; i < SIP.auth_max_failures; i++) expect((await c.register({ user: USER, password: `wrong-${i}` })).final.status).toBe(403);
    const blocked = await c.register({ user: USER, password: PASSWORD });
    expect(blocked.challenge).toBeUndefined();
    expect(blocked.final.status).toBe(403);
    // Another source is not blocked.
    const other = await client('127.0.0.22');
    expect((await other.register({ user: USER, password: PASSWORD, expires: 60 })).final.status).toBe(200);
  });

  it('REGISTERs take tokens of the per-source challenge rate like INVITEs: over it, 503 with Retry-After on TCP', async () => {
    const c = await client('127.0.0.28', 'tcp');
    // 100 at once: the burst is 40 and the rate 20/s (the defaults), so most get no challenge even
    // if handling them all took a second on a busy machine.
    const results = await Promise.all(Array.from({ length: 100 }, () => c.register({ user: USER })));
    const statuses = results.map((r) => r.final.status);
    expect(statuses.filter((s) => s === 401).length).toBeGreaterThanOrEqual(40);
    const throttled = results.filter((r) => r.final.status === 503);
    expect(throttled.length).toBeGreaterThan(20);
    expect(Number(throttled[0]!.final.get('Retry-After'))).toBeGreaterThanOrEqual(1);
    expect(statuses.every((s) => s === 401 || s === 503)).toBe(true);
  });

  it('a binding expires: the trunk reads not_registered once its expiry has passed', async () => {
    const c = await client('127.0.0.23');
    expect((await c.register({ user: USER, password: PASSWORD, expires: 2 })).final.status).toBe(200);
    expect(await inboundStatus()).toBe('registered');
    await sleep(2300);
    expect(await inboundStatus()).toBe('not_registered');
    const query = await c.register({ user: USER, password: PASSWORD, contacts: [] });
    expect(query.final.contacts).toEqual([]);
  });

  it('a dial through a trunk without outbound_host and without a registered PBX is a 400 saying so', async () => {
    const r = await d.api('POST', `/v1/agents/${agentId}/dial?sipTrunkId=${trunkId}&number=%2B15557770000`);
    expect(r.status, r.text).toBe(400);
    expect(r.body.error).toMatch(/no outbound_host, and no PBX is registered on it/);
  });

  it('dial through the trunk goes to the registered Contact over UDP: Request-URI the Contact, the number in To, sent to the REGISTER source', async () => {
    const c = await client('127.0.0.24');
    expect((await c.register({ user: USER, password: PASSWORD, expires: 60 })).final.status).toBe(200);
    const r = await d.api('POST', `/v1/agents/${agentId}/dial?sipTrunkId=${trunkId}&number=%2B15557770001`);
    expect(r.status, r.text).toBe(200);
    const invite = await c.nextRequest('INVITE');
    expect(invite.uri.toString()).toBe(`sip:pbx@127.0.0.24:${c.port}`);
    expect(invite.to.uri.toString()).toBe(`sip:+15557770001@127.0.0.24:${c.port}`);
    expect(invite.topVia?.transport).toBe('UDP');
    c.sendRaw(createResponse(invite, 486, undefined, { toTag: 'busy1' }).toString());
  });

  it('dial through the trunk goes over the TCP connection the PBX registered on, which is held open while the binding lives', async () => {
    const hold = vi.spyOn(d.daemon.sip!.ua.transport, 'holdConnection');
    const c = await client('127.0.0.25', 'tcp');
    expect((await c.register({ user: USER, password: PASSWORD, expires: 60 })).final.status).toBe(200);
    // Past the transport's idle timeout: until the binding expires, plus 30 s for a late refresh.
    const conn = d.daemon.sip!.ua.transport.connections().find((x) => x.remote.address === '127.0.0.25')!;
    expect(hold).toHaveBeenLastCalledWith(conn.id, expect.any(Number));
    expect(hold.mock.lastCall![1]).toBeGreaterThan(89_000);
    expect(hold.mock.lastCall![1]).toBeLessThanOrEqual(90_000);
    hold.mockRestore();
    const r = await d.api('POST', `/v1/agents/${agentId}/dial?sipTrunkId=${trunkId}&number=%2B15557770002`);
    expect(r.status, r.text).toBe(200);
    // The Contact's port is the client's own (ephemeral) port: nothing listens there, so the
    // INVITE reaching this socket can only have come over the REGISTER's connection.
    const invite = await c.nextRequest('INVITE');
    expect(invite.uri.toString()).toBe(`sip:pbx@127.0.0.25:${c.port};transport=tcp`);
    expect(invite.topVia?.transport).toBe('TCP');
    c.sendRaw(createResponse(invite, 486, undefined, { toTag: 'busy2' }).toString());
  });

  it('the PBX\'s RFC 5626 CRLF pings on its registered TCP connection are answered there, and calls still go over that connection', async () => {
    const c = await client('127.0.0.29', 'tcp');
    expect((await c.register({ user: USER, password: PASSWORD, expires: 60 })).final.status).toBe(200);
    const transport = d.daemon.sip!.ua.transport;
    const conn = transport.connections().find((x) => x.remote.address === '127.0.0.29')!;
    const before = transport.stats.keepAlives;
    for (let i = 1; i <= 3; i++) {
      c.sendRaw('\r\n\r\n');
      for (let t = Date.now() + 2000; transport.stats.keepAlives < before + i; await sleep(5)) if (Date.now() > t) throw new Error('ping not answered');
    }
    expect(transport.connections().filter((x) => x.remote.address === '127.0.0.29').map((x) => x.id)).toEqual([conn.id]);
    const r = await d.api('POST', `/v1/agents/${agentId}/dial?sipTrunkId=${trunkId}&number=%2B15557770009`);
    expect(r.status, r.text).toBe(200);
    const invite = await c.nextRequest('INVITE');
    expect(invite.topVia?.transport).toBe('TCP');
    c.sendRaw(createResponse(invite, 486, undefined, { toTag: 'busy9' }).toString());
  });

  it("the transfer fallback's new leg through a trunk without outbound_host goes to the registered PBX too", async () => {
    const c = await client('127.0.0.27');
    const dialTransfer = trunkTransferDialer(() => d.daemon.sip!.ua, d.daemon.store, createLogger('silent'));
    // The call being transferred: only what the fallback reads of it (its trunk and caller).
    const call = { id: 'transferred-call', from: '+15559990001', trunk: { id: trunkId, orgId: await orgIdOf(), name: '' } } as unknown as SipCall;
    // No PBX registered: no leg is placed.
    expect(await dialTransfer(call, '+15557770005')).toBeUndefined();
    expect(c.received).toEqual([]);

    expect((await c.register({ user: USER, password: PASSWORD, expires: 60 })).final.status).toBe(200);
    const leg = dialTransfer(call, '+15557770006');
    const invite = await c.nextRequest('INVITE');
    expect(invite.uri.toString()).toBe(`sip:pbx@127.0.0.27:${c.port}`);
    expect(invite.to.uri.toString()).toBe(`sip:+15557770006@127.0.0.27:${c.port}`);
    expect(invite.from.uri.kind === 'sip' ? invite.from.uri.user : '').toBe('+15559990001');
    c.sendRaw(createResponse(invite, 486, undefined, { toTag: 'busy4' }).toString());
    expect(await leg).toBeUndefined();
  });

  it('another organization sees neither the trunk nor its bindings, and cannot dial through it', async () => {
    const c = await client('127.0.0.26');
    expect((await c.register({ user: USER, password: PASSWORD, expires: 60 })).final.status).toBe(200);
    const otherKey = await d.newOrgKey('Other org');
    const own = await createTrunk(d, 'other-org-pbx', otherKey);
    expect(await inboundStatus(own, otherKey)).toBe('not_registered');
    expect((await d.api('GET', `/v1/sip-trunks/${trunkId}`, undefined, { key: otherKey })).status).toBe(404);
    const list = await d.api('GET', '/v1/sip-trunks', undefined, { key: otherKey });
    expect(list.body.map((t: { id: string }) => t.id)).toEqual([own]);
    const otherAgent = (await d.api('POST', '/v1/agents', { name: 'Other agent' }, { key: otherKey })).body.id;
    const dial = await d.api('POST', `/v1/agents/${otherAgent}/dial?sipTrunkId=${trunkId}&number=%2B15557770003`, undefined, { key: otherKey });
    expect(dial.status, dial.text).toBe(404);
    expect(await inboundStatus()).toBe('registered');
  });
});

describe('registrar bindings across a restart', () => {
  let td: TestDaemon | undefined;
  const peers: RegistrarClient[] = [];

  afterAll(async () => {
    await Promise.all(peers.map((p) => p.close()));
    await td?.close();
  });

  it('a second daemon on the same data directory keeps the bindings: registered, listed, and calls go to them', async () => {
    td = await startTestDaemon({ sip: SIP });
    const agent = (await td.api('POST', '/v1/agents', { name: 'Restart agent' })).body.id;
    const id = await createTrunk(td, 'restart-pbx');
    expect((await td.api('POST', `/v1/sip-trunks/${id}/assignments`, { agent_id: agent, number: NUMBER })).status).toBe(201);
    const pbx = await startRegistrarClient('udp', '127.0.0.40', td.daemon.sip!.port);
    peers.push(pbx);
    expect((await pbx.register({ user: 'restart-pbx', password: PASSWORD, contacts: [`<sip:pbx@127.0.0.40:${pbx.port}>`], expires: 300 })).final.status).toBe(200);

    td = await td.restart();
    const t = await td.api('GET', `/v1/sip-trunks/${id}`);
    expect(t.body.inbound_registration_status).toBe('registered');
    // The PBX's UDP socket stays; the new daemon listens on another port.
    const again = await startRegistrarClient('udp', '127.0.0.41', td.daemon.sip!.port);
    peers.push(again);
    const query = await again.register({ user: 'restart-pbx', password: PASSWORD, contacts: [] });
    expect(query.final.status).toBe(200);
    const left = bindingsOf(query.final).get(`sip:pbx@127.0.0.40:${pbx.port}`);
    expect(left).toBeGreaterThan(290);
    expect(left).toBeLessThanOrEqual(300);

    const r = await td.api('POST', `/v1/agents/${agent}/dial?sipTrunkId=${id}&number=%2B15557770004`);
    expect(r.status, r.text).toBe(200);
    const invite = await pbx.nextRequest('INVITE');
    expect(invite.uri.toString()).toBe(`sip:pbx@127.0.0.40:${pbx.port}`);
    pbx.sendRaw(createResponse(invite, 486, undefined, { toTag: 'busy3' }).toString());
  });
});
