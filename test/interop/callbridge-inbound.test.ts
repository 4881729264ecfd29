/**
 * Interop: SIPp (Debian sip-tester) plays a PBX calling callbridge's real daemon on loopback.
 * Trunks and assignments are created through the REST API; the test registers itself as the
 * call handler (in the daemon, the call bridge takes that place) and echoes the caller's RTP,
 * so RTP flows both ways and callbridge's own RTP statistics can be checked.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import type { SipCall } from '../../src/sip/ua/call.ts';
import { runSipp, sippAvailable, type SippResult } from './sipp.ts';

const sipp = sippAvailable();
const DIGEST_NUMBER = '+15550001000';
const ACL_NUMBER = '+15550002000';
const INACTIVE_NUMBER = '+15550003000';
const CALLER = '+15559990000';
const USER = 'pbx-trunk-user';
const PASSWORD = 'pbx-trunk-secret';

let d: TestDaemon;
let remote: string;
/** Every call the daemon delivered, with its RTP statistics at hangup. */
const calls: { call: SipCall; received: number; sent: number; hold: boolean[] }[] = [];

function expectOk(r: SippResult): void {
  expect(r.code, r.describe()).toBe(0);
  expect(r.killed, r.describe()).toBe(false);
  expect(r.failedCalls ?? 0, r.describe()).toBe(0);
}

const finals = (r: SippResult, method = 'INVITE'): number[] => r.statuses('received', method).filter((s) => s >= 200);

async function lastCallEnded(): Promise<(typeof calls)[number]> {
  const c = calls.at(-1)!;
  for (let i = 0; i < 50 && c.call.state !== 'ended'; i++) await new Promise((r) => setTimeout(r, 20));
  return c;
}

describe.skipIf(sipp.skip)(`callbridge inbound calls vs SIPp${sipp.ok ? ` (${sipp.version})` : `: skipped, ${sipp.reason}`}`, () => {
  beforeAll(async () => {
    // SHA-256 offered too (RFC 8760), MD5 first: SIPp 3.6 answers the first challenge it sees and
    // knows only MD5. (The daemon's default challenges with MD5 alone; see sip.digest_algorithms.)
    d = await startTestDaemon({ sip: { digest_algorithms: 'MD5,SHA-256' }, rtp: { media_timeout_secs: 10 } });
    const sip = d.daemon.sip!;
    remote = `127.0.0.1:${sip.port}`;
    sip.ua.onInboundCall((call) => {
      const entry = { call, received: 0, sent: 0, hold: [] as boolean[] };
      calls.push(entry);
      call.on('hold', (h) => entry.hold.push(h));
      // Echo what the caller sends: RTP both ways through callbridge's own RTP session.
      call.rtp.on('rtp', (p) => {
        entry.received++;
        if (call.rtp.send(Buffer.from(p.payload), { payloadType: p.payloadType, timestampIncrement: 160 })) entry.sent++;
      });
      call.answer();
    });
    const agent = (await d.api('POST', '/v1/agents', { name: 'Front desk' })).body;
    const inactive = (await d.api('POST', '/v1/agents', { name: 'Closed desk', status: 'inactive' })).body;
    const digest = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx digest', inbound_auth_type: 'digest', inbound_sip_username: USER, inbound_sip_password: PASSWORD }))
      .body;
    const acl = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${digest.id}/assignments`, { agent_id: agent.id, number: DIGEST_NUMBER })).status).toBe(201);
    expect((await d.api('POST', `/v1/sip-trunks/${digest.id}/assignments`, { agent_id: inactive.id, number: INACTIVE_NUMBER })).status).toBe(201);
    expect((await d.api('POST', `/v1/sip-trunks/${acl.id}/assignments`, { agent_id: agent.id, alternate_number: ACL_NUMBER })).status).toBe(201);
  });

  afterAll(async () => {
    await d?.close();
  });

  it('inbound digest: 401 challenge, 200 OK with PCMU, ACK, RTP both ways, BYE', async () => {
    const r = await runSipp({ scenario: 'inbound-digest', remote, service: DIGEST_NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD }, durationMs: 1500 });
    expectOk(r);
    expect(finals(r)).toEqual([401, 200]);
    expect(finals(r, 'BYE')).toEqual([200]);
    const c = await lastCallEnded();
    expect(c.call.direction).toBe('inbound');
    expect(c.call.from).toBe(CALLER);
    expect(c.call.to).toBe(DIGEST_NUMBER);
    expect(c.call.route?.via).toBe('assignment_number');
    expect(c.call.endInfo).toEqual({ reason: 'remote_bye', by: 'remote' });
    // 1.5 s of 20 ms packets each way, minus start-up: RTP really flowed in both directions.
    expect(c.received).toBeGreaterThan(40);
    expect(c.sent).toBeGreaterThan(40);
    const stats = c.call.rtp.stats();
    expect(stats.packetsReceived).toBe(c.received);
    expect(stats.packetsSent).toBe(c.sent);
  });

  it('inbound ACL: 200 without any challenge, RTP both ways', async () => {
    const r = await runSipp({ scenario: 'inbound-acl', remote, service: ACL_NUMBER, keys: { caller: CALLER }, durationMs: 1000 });
    expectOk(r);
    expect(finals(r)).toEqual([200]);
    const c = await lastCallEnded();
    expect(c.call.route?.via).toBe('alternate_number');
    expect(c.received).toBeGreaterThan(20);
    expect(c.sent).toBeGreaterThan(20);
  });

  it('inbound ACL with a delayed offer (INVITE without SDP): our offer in the 200, the answer in the ACK, RTP both ways', async () => {
    const r = await runSipp({ scenario: 'inbound-delayed-offer', remote, service: ACL_NUMBER, keys: { caller: CALLER }, durationMs: 1000 });
    expectOk(r);
    expect(finals(r)).toEqual([200]);
    const c = await lastCallEnded();
    expect(c.call.media.codec.name).toBe('PCMU');
    expect(c.received).toBeGreaterThan(20);
    expect(c.sent).toBeGreaterThan(20);
  });

  it('inbound digest over TCP', async () => {
    const r = await runSipp({ scenario: 'inbound-digest', transport: 'tcp', remote, service: DIGEST_NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD }, durationMs: 500 });
    expectOk(r);
    expect(finals(r)).toEqual([401, 200]);
  });

  it('wrong password: 401, then 403', async () => {
    const r = await runSipp({ scenario: 'wrong-password', remote, service: DIGEST_NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: 'not-the-password' } });
    expectOk(r);
    expect(finals(r)).toEqual([401, 403]);
  });

  it('unknown number: 404 at once, since 127.0.0.1 is an ACL trunk and no digest trunk routes the number', async () => {
    const r = await runSipp({ scenario: 'unknown-number', remote, service: '+15550009999', keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD } });
    expectOk(r);
    expect(finals(r)).toEqual([404]);
  });

  it('agent inactive: 480 after authentication', async () => {
    const r = await runSipp({ scenario: 'unknown-number', remote, service: INACTIVE_NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD }, extraArgs: [] });
    // The scenario expects 404; 480 makes it fail on an unexpected message, and the flow shows it.
    expect(finals(r)).toEqual([401, 480]);
  });

  it('CANCEL before answer: 180, then 200 for the CANCEL and 487 for the INVITE', async () => {
    const before = calls.length;
    d.daemon.sip!.ua.onInboundCall((call) => {
      calls.push({ call, received: 0, sent: 0, hold: [] });
      // ring, never answer
    });
    try {
      const r = await runSipp({ scenario: 'cancel-before-answer', remote, service: DIGEST_NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD } });
      expectOk(r);
      expect(finals(r)).toEqual([401, 487]);
      expect(finals(r, 'CANCEL')).toEqual([200]);
      expect(calls.length).toBe(before + 1);
      const c = await lastCallEnded();
      expect(c.call.endInfo?.reason).toBe('cancelled');
    } finally {
      d.daemon.sip!.ua.onInboundCall((call) => {
        const entry = { call, received: 0, sent: 0, hold: [] as boolean[] };
        calls.push(entry);
        call.on('hold', (h) => entry.hold.push(h));
        call.rtp.on('rtp', (p) => {
          entry.received++;
          if (call.rtp.send(Buffer.from(p.payload), { payloadType: p.payloadType, timestampIncrement: 160 })) entry.sent++;
        });
        call.answer();
      });
    }
  });

  it('re-INVITE hold (sendonly -> recvonly) and resume; the call survives', async () => {
    const r = await runSipp({ scenario: 'reinvite-hold', remote, service: DIGEST_NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD }, durationMs: 400 });
    expectOk(r);
    expect(finals(r)).toEqual([401, 200, 200, 200]);
    const c = await lastCallEnded();
    expect(c.hold).toEqual([true, false]);
    expect(c.call.endInfo?.reason).toBe('remote_bye');
  });

  it('OPTIONS out of dialog is answered 200 with Allow', async () => {
    const { SipTransportLayer } = await import('../../src/sip/transport/index.ts');
    const { TransactionLayer } = await import('../../src/sip/transaction/index.ts');
    const { createRequest } = await import('../../src/sip/message/index.ts');
    const t = new SipTransportLayer({ listen: [{ protocol: 'udp', address: '127.0.0.1', port: 0 }] });
    await t.start();
    const layer = new TransactionLayer({ transport: t });
    try {
      const port = d.daemon.sip!.port;
      const req = createRequest({ method: 'OPTIONS', uri: `sip:127.0.0.1:${port}`, from: '<sip:probe@127.0.0.1>', to: `<sip:127.0.0.1:${port}>` });
      const res = await layer.sendRequest(req, { protocol: 'udp', address: '127.0.0.1', port }).finalResponse;
      expect(res.status).toBe(200);
      const allow = res.getAll('Allow').join(',');
      expect(allow).toContain('INVITE');
      expect(allow).toContain('REFER');
    } finally {
      layer.close();
      await t.close();
    }
  });
});
