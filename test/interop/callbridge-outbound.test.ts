/**
 * Interop: callbridge's daemon calls out through a trunk whose far end is SIPp (a carrier UAS
 * that challenges with 407 and echoes RTP), and transfers an answered inbound call with REFER to
 * a SIPp PBX that reports progress with NOTIFY. Trunks are created through the REST API; the
 * outbound call is placed with the user agent's dial() (the REST dial route comes with the
 * bridge).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSocket } from 'node:dgram';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import type { SipCall } from '../../src/sip/ua/call.ts';
import type { OutboundTrunk } from '../../src/sip/ua/outbound-call.ts';
import { runSipp, sippAvailable, startSipp, verifyDigest } from './sipp.ts';

const sipp = sippAvailable();
const NUMBER = '+15550004000';
const CALLER = '+15559990000';
const USER = 'carrier-user';
const PASSWORD = 'carrier-secret';

let d: TestDaemon;

async function trunkFor(port: number, extra: Record<string, unknown> = {}): Promise<OutboundTrunk> {
  const r = await d.api('POST', '/v1/sip-trunks', {
    pbx: 'generic',
    name: 'carrier',
    inbound_auth_type: 'none',
    outbound_host: `127.0.0.1:${port}`,
    outbound_sip_username: USER,
    outbound_sip_password: PASSWORD,
    caller_id_transforms: [{ type: 'strip_digits_start', number: 1 }],
    ...extra,
  });
  expect(r.status, r.text).toBe(201);
  // The API does not show org_id; the store's cross-org listing does (inbound_auth_type none).
  const stored = (await d.daemon.store.sipTrunks.listByInboundAuth('none')).find((t) => t.id === r.body.id)!;
  const creds = (await d.daemon.store.sipTrunks.credentials(stored.id))?.outbound;
  return { id: stored.id, orgId: stored.org_id, name: stored.name, pbx: stored.pbx, outbound_host: stored.outbound_host, caller_id_transforms: stored.caller_id_transforms, ...(creds ? { credentials: creds } : {}) };
}

describe.skipIf(sipp.skip)(`callbridge outbound calls and REFER vs SIPp${sipp.ok ? ` (${sipp.version})` : `: skipped, ${sipp.reason}`}`, () => {
  beforeAll(async () => {
    d = await startTestDaemon();
  });
  afterAll(async () => {
    await d?.close();
  });

  it('dial through a trunk to a UAS that challenges with 407: digest uri = Request-URI, answered, RTP echoed, BYE', async () => {
    const server = await startSipp({ scenario: 'uas-challenge-407', rtpEcho: true, timeoutMs: 20_000 });
    try {
      await server.ready;
      const trunk = await trunkFor(server.localPort);
      const progress: number[] = [];
      const result = await d.daemon.sip!.ua.dial({ trunk, to: NUMBER, callerId: CALLER, onProgress: (s) => progress.push(s) });
      expect(result.ok, JSON.stringify(result)).toBe(true);
      const call = (result as { ok: true; call: SipCall }).call;
      expect(progress).toContain(180);
      expect(call.direction).toBe('outbound');
      expect(call.media.codec.name).toBe('PCMU');
      // caller_id_transforms: strip_digits_start 1 removes the "+".
      expect(call.from).toBe(CALLER.slice(1));
      // Send 25 packets of PCMU; SIPp's -rtp_echo returns each to our RTP session.
      let echoed = 0;
      call.rtp.on('rtp', () => echoed++);
      const silence = Buffer.alloc(160, 0xff);
      for (let i = 0; i < 25; i++) {
        call.rtp.send(silence, { payloadType: 0, timestampIncrement: 160 });
        await new Promise((r) => setTimeout(r, 20));
      }
      await new Promise((r) => setTimeout(r, 200));
      expect(echoed).toBeGreaterThanOrEqual(20);
      call.hangup();
      const uas = await server.result;
      expect(uas.code, uas.describe()).toBe(0);
      expect(uas.statuses('sent', 'INVITE')).toEqual([100, 407, 100, 180, 200]);
      expect(uas.statuses('sent', 'BYE')).toEqual([200]);
      const [, second] = uas.requests('INVITE');
      const check = verifyDigest(second!, PASSWORD);
      expect(check, JSON.stringify(check)).toMatchObject({ ok: true, username: USER, uriIsRequestUri: true });
      expect(second!.raw).toMatch(new RegExp(`^(From|f): <sip:${CALLER.slice(1)}@`, 'm'));
      expect(call.endInfo).toEqual({ reason: 'local', by: 'local' });
    } finally {
      server.kill();
    }
  });

  it('dial to a host where nothing answers over TCP: unreachable, no call left behind', async () => {
    // A port with nothing listening on TCP: connection refused at once.
    const probe = createSocket('udp4');
    await new Promise<void>((r) => probe.bind(0, '127.0.0.1', () => r()));
    const port = probe.address().port;
    probe.close();
    const trunk = await trunkFor(port, { outbound_host: `127.0.0.1:${port};transport=tcp` });
    const before = d.daemon.sip!.ports.inUse;
    const result = await d.daemon.sip!.ua.dial({ trunk, to: NUMBER, callerId: CALLER });
    expect(result).toMatchObject({ ok: false, reason: 'unreachable' });
    expect(d.daemon.sip!.ports.inUse).toBe(before);
    expect(d.daemon.sip!.ua.calls).toHaveLength(0);
  });

  it('transfer: REFER with Refer-To the target, 202, NOTIFY 100 then 200, call ends as transferred', async () => {
    const agent = (await d.api('POST', '/v1/agents', { name: 'Transfer desk' })).body;
    const acl = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${acl.id}/assignments`, { agent_id: agent.id, alternate_number: '+15550005000' })).status).toBe(201);
    const outcomes: unknown[] = [];
    const progress: number[] = [];
    let call: SipCall | undefined;
    d.daemon.sip!.ua.onInboundCall((c) => {
      call = c;
      c.answer();
      setTimeout(() => {
        void c.transfer('+15550007777', { onProgress: (s) => progress.push(s) }).then((o) => outcomes.push(o));
      }, 200);
    });
    const r = await runSipp({ scenario: 'inbound-refer', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: '+15550005000', keys: { caller: CALLER } });
    expect(r.code, r.describe()).toBe(0);
    expect(r.statuses('received', 'NOTIFY')).toEqual([200, 200]);
    const refer = r.requests('REFER', 'received')[0];
    expect(refer?.header('Refer-To')).toMatch(/^<sip:\+15550007777@127\.0\.0\.1:\d+>$/);
    expect(outcomes).toEqual([{ outcome: 'success', status: 200, reason: 'OK' }]);
    expect(progress).toEqual([100, 200]);
    expect(call?.endInfo).toEqual({ reason: 'transferred', by: 'local' });
  });
});
