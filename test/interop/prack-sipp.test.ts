/**
 * Interop: reliable provisional responses (RFC 3262, 100rel / PRACK) between callbridge's real
 * daemon and SIPp, both ways, on loopback (sip.t1_ms 100, so 64*T1 is 6.4 s):
 *
 * - inbound-100rel.xml: a PBX requiring 100rel gets a reliable 180, PRACKs it, gets the PRACK's
 *   200 and only then the INVITE's; RTP both ways, BYE. Once through the call bridge (the voice
 *   session answers), once with the test as the call handler echoing RTP.
 * - inbound-100rel-no-prack.xml: the PBX never PRACKs; callbridge retransmits the 180 and rejects
 *   the INVITE 504.
 * - uas-100rel-183.xml: `POST /v1/agents/{id}/dial` through a trunk whose outbound_host is SIPp,
 *   which answers with a reliable 183 carrying SDP; callbridge PRACKs it (RAck checked by the
 *   scenario) and the early RTP SIPp sends before its 200 reaches callbridge's RTP session.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import type { SipCall } from '../../src/sip/ua/call.ts';
import { runSipp, sippAvailable, startSipp, type SippResult } from './sipp.ts';

const sipp = sippAvailable();
const ACL_NUMBER = '+15550006000';
const CALLER = '+15559990000';
const DIALLED = '+15557654321';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function expectOk(r: SippResult): void {
  expect(r.code, r.describe()).toBe(0);
  expect(r.killed, r.describe()).toBe(false);
  expect(r.failedCalls ?? 0, r.describe()).toBe(0);
}

describe.skipIf(sipp.skip)(`callbridge 100rel / PRACK vs SIPp${sipp.ok ? ` (${sipp.version})` : `: skipped, ${sipp.reason}`}`, () => {
  let d: TestDaemon;
  let remote: string;
  let agentId: string;
  const calls: { call: SipCall; received: number; sent: number }[] = [];

  beforeAll(async () => {
    d = await startTestDaemon({ sip: { t1_ms: 100 }, rtp: { media_timeout_secs: 10 } });
    remote = `127.0.0.1:${d.daemon.sip!.port}`;
    const agent = (await d.api('POST', '/v1/agents', { name: 'Front desk' })).body;
    agentId = agent.id;
    const acl = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${acl.id}/assignments`, { agent_id: agent.id, alternate_number: ACL_NUMBER })).status).toBe(201);
  }, 30_000);

  afterAll(async () => {
    await d?.close();
  });

  function echoInboundCalls(): void {
    d.daemon.sip!.ua.onInboundCall((call) => {
      const entry = { call, received: 0, sent: 0 };
      calls.push(entry);
      call.rtp.on('rtp', (p) => {
        entry.received++;
        if (call.rtp.send(Buffer.from(p.payload), { payloadType: p.payloadType, timestampIncrement: 160 })) entry.sent++;
      });
      call.answer();
    });
  }

  it('(a) through the call bridge (the daemon answers once the voice session is up): PRACK -> 200, then the INVITE 200, BYE; the call record is connected and ended by the caller', async () => {
    const since = Date.now();
    const r = await runSipp({ scenario: 'inbound-100rel', remote, service: ACL_NUMBER, keys: { caller: CALLER }, durationMs: 1000 });
    expectOk(r);
    const finals = r.messages.filter((m) => m.direction === 'received' && m.status !== undefined && m.status >= 200).map((m) => `${m.status} ${m.cseqMethod}`);
    expect(finals.slice(0, 2), r.describe()).toEqual(['200 PRACK', '200 INVITE']);
    let rec: { connected_at?: string | null; ended_at?: string | null; outcome?: string } | undefined;
    for (const end = Date.now() + 5000; Date.now() < end; await sleep(100)) {
      const res = await d.api('GET', '/v1/calls?page_size=100');
      rec = (res.body.calls as { direction: string; created_at: string; ended_at?: string | null }[]).find((c) => c.direction === 'inbound' && Date.parse(c.created_at) >= since - 1000);
      if (rec?.ended_at) break;
    }
    expect(rec, 'no inbound call in GET /v1/calls').toBeDefined();
    expect(rec!.connected_at, JSON.stringify(rec)).toBeTruthy();
    expect(rec!.ended_at).toBeTruthy();
    expect(rec!.outcome, JSON.stringify(rec)).toBe('ended_by_user');
  }, 30_000);

  it('(a) INVITE with Require: 100rel: reliable 180 with RSeq, PRACK -> 200, then the INVITE 200, ACK, RTP both ways, BYE', async () => {
    echoInboundCalls();
    const r = await runSipp({ scenario: 'inbound-100rel', remote, service: ACL_NUMBER, keys: { caller: CALLER }, durationMs: 1000 });
    expectOk(r);
    const ringing = r.messages.filter((m) => m.direction === 'received' && m.status === 180);
    expect(ringing.length, r.describe()).toBeGreaterThanOrEqual(1);
    expect(ringing[0]!.headers.find(([n]) => /^rseq$/i.test(n))?.[1], r.describe()).toMatch(/^\d+$/);
    // The PRACK's 200 came before the INVITE's: the 200 was held for the PRACK.
    const finals = r.messages.filter((m) => m.direction === 'received' && m.status !== undefined && m.status >= 200).map((m) => `${m.status} ${m.cseqMethod}`);
    expect(finals.slice(0, 2), r.describe()).toEqual(['200 PRACK', '200 INVITE']);
    const c = calls.at(-1)!;
    for (let i = 0; i < 50 && c.call.state !== 'ended'; i++) await sleep(20);
    expect(c.call.endInfo).toEqual({ reason: 'remote_bye', by: 'remote' });
    expect(c.received).toBeGreaterThan(20);
    expect(c.sent).toBeGreaterThan(20);
  }, 30_000);

  it('(a) over TCP: reliable 180, PRACK -> 200, then the INVITE 200, BYE', async () => {
    echoInboundCalls();
    const r = await runSipp({ scenario: 'inbound-100rel', transport: 'tcp', remote, service: ACL_NUMBER, keys: { caller: CALLER }, durationMs: 500 });
    expectOk(r);
    const finals = r.messages.filter((m) => m.direction === 'received' && m.status !== undefined && m.status >= 200).map((m) => `${m.status} ${m.cseqMethod}`);
    expect(finals, r.describe()).toEqual(['200 PRACK', '200 INVITE', '200 BYE']);
  }, 30_000);

  it('(b) INVITE with Require: 100rel and never a PRACK: the 180 is retransmitted, then 504 after 64*T1', async () => {
    echoInboundCalls();
    const before = calls.length;
    const r = await runSipp({ scenario: 'inbound-100rel-no-prack', remote, service: ACL_NUMBER, keys: { caller: CALLER }, timeoutMs: 20_000 });
    expectOk(r);
    const ringing = r.messages.filter((m) => m.direction === 'received' && m.status === 180);
    // T1 100 ms doubling to T2 4 s within 6.4 s: 100, 200, 400, 800, 1600, 3200 -> 6 retransmissions.
    expect(ringing.length, r.describe()).toBeGreaterThanOrEqual(5);
    expect(new Set(ringing.map((m) => m.headers.find(([n]) => /^rseq$/i.test(n))?.[1])).size, r.describe()).toBe(1);
    expect(r.statuses('received', 'INVITE').filter((s) => s >= 200)).toEqual([504]);
    expect(calls.length).toBe(before + 1);
    expect(calls.at(-1)!.call.endInfo).toMatchObject({ reason: 'rejected', status: 504 });
  }, 30_000);

  it('(c) dial (REST) to a SIPp UAS answering with a reliable 183 + SDP: PRACK with RAck, early RTP reaches callbridge before the 200, ACK, BYE', async () => {
    const server = await startSipp({ scenario: 'uas-100rel-183', timeoutMs: 20_000 });
    try {
      await server.ready;
      const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'carrier 100rel', inbound_auth_type: 'none', outbound_host: `127.0.0.1:${server.localPort}` })).body;
      expect((await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agentId, number: '+15550006001' })).status).toBe(201);
      const ua = d.daemon.sip!.ua;
      const dial = await d.api('POST', `/v1/agents/${agentId}/dial?sipTrunkId=${trunk.id}&number=${encodeURIComponent(DIALLED)}`);
      expect(dial.status, dial.text).toBe(200);
      // The call is tracked once answered; SIPp stopped its RTP before the 200, so what the RTP
      // session has received by then is early media.
      let call: SipCall | undefined;
      for (const end = Date.now() + 10_000; call === undefined && Date.now() < end; await sleep(10)) call = ua.calls.find((c) => c.direction === 'outbound');
      if (call === undefined) {
        server.kill();
        expect.fail(`the outbound call was not answered:\n${(await server.result).describe()}`);
      }
      // 2 s of 20 ms packets were sent before the 200; a busy machine starts SIPp's stream late, so
      // a tenth of them is enough to show the early media was taken.
      await sleep(300);
      const early = call!.rtp.stats().packetsReceived;
      expect(early).toBeGreaterThanOrEqual(10);
      call!.hangup();
      const uas = await server.result;
      expectOk(uas);
      expect(uas.statuses('sent', 'INVITE')).toEqual([100, 183, 200]);
      expect(uas.statuses('sent', 'PRACK')).toEqual([200]);
      const prack = uas.requests('PRACK')[0]!;
      const invite = uas.requests('INVITE')[0]!;
      expect(prack.header('RAck')).toBe(`5001 ${/^(\d+)/.exec(invite.header('CSeq') ?? '')?.[1]} INVITE`);
      expect(invite.raw).toMatch(/^(Supported|k):.*\b100rel\b/im);
      expect(uas.statuses('sent', 'BYE')).toEqual([200]);
    } finally {
      server.kill();
    }
  }, 40_000);
});
