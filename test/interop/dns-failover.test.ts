/**
 * RFC 3263 against a real DNS server: dnsmasq (Debian) on a loopback port, started by this file
 * with the NAPTR, SRV and A records of each case, and the daemon pointed at it with
 * sip.dns_servers. The far ends are real sockets on loopback: SIP peers built on our own layers
 * (answering INVITEs with 200 + SDP, or 503), UDP sockets that never answer, and a raw carrier
 * registrar. The daemon runs with its default failover settings (sip.failover_timeout_ms 4000,
 * sip.dead_target_secs 60).
 *
 *   SRV, first target silent          -> the INVITE reaches the second, answered, well before Timer B
 *   same trunk again                  -> straight to the live target (dead-target memory)
 *   SRV, first target 503             -> second, answered
 *   ;transport=tcp, first refuses     -> the second TCP target, answered
 *   NAPTR SIP+D2T                     -> the TCP SRV target, not the UDP one
 *   no NAPTR, no SRV                  -> the A record, port 5060
 *   REGISTER, first target silent     -> registered at the second
 *   REGISTER, first target 503        -> registered at the second
 *   DNS server stopped                -> dial fails with dns_failed, a log line names the DNS failure
 *
 * A second daemon pings each target with OPTIONS: a target that stops answering is taken out
 * (tried last) while the trunk stays up; back when it answers again.
 */
import { createSocket, type Socket } from 'node:dgram';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startCarrierRegistrar, type CarrierRegistrar } from '../helpers/raw-carrier-registrar.ts';
import { waitOutboundStatus } from '../helpers/outbound-registration-status.ts';
import { until } from '../helpers/until.ts';
import { DialogManager } from '../../src/sip/dialog/index.ts';
import { createResponse, generateTag, type SipRequest } from '../../src/sip/message/index.ts';
import { TransactionLayer } from '../../src/sip/transaction/index.ts';
import { SipTransportLayer, type TransportProtocol } from '../../src/sip/transport/index.ts';
import type { OutboundTrunk } from '../../src/sip/ua/outbound-call.ts';
import type { SipCall } from '../../src/sip/ua/call.ts';
import { dnsmasqAvailable, startDnsmasq, type Dnsmasq } from './dnsmasq.ts';

const available = dnsmasqAvailable();
const DOMAIN = 'dnsfail.test';
const ANSWER = 'v=0\r\no=- 7 2 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 41000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n';
/** Timer B with the daemon's default T1 (500 ms): what a call would wait without failover. */
const TIMER_B_MS = 64 * 500;

interface Peer {
  protocol: TransportProtocol;
  address: string;
  port: number;
  /** INVITEs received (first copies: retransmissions not counted). */
  invites: SipRequest[];
  options: number;
  /** What the peer answers an INVITE with. */
  mode: 'answer' | 'unavailable' | 'busy';
  close(): Promise<void>;
}

/** A SIP peer on our own layers: answers INVITE with 200 + SDP (or 503), anything else 200. */
async function startPeer(protocol: TransportProtocol, opts: { address?: string; port?: number; mode?: Peer['mode'] } = {}): Promise<Peer> {
  const address = opts.address ?? '127.0.0.1';
  const transport = new SipTransportLayer({ listen: [{ protocol, address, port: opts.port ?? 0 }] });
  await transport.start();
  const layer = new TransactionLayer({ transport });
  const dialogs = new DialogManager({ layer });
  const port = transport.endpoints[0]!.port;
  const peer: Peer = {
    protocol,
    address,
    port,
    invites: [],
    options: 0,
    mode: opts.mode ?? 'answer',
    async close() {
      dialogs.close();
      layer.close();
      await transport.close();
    },
  };
  dialogs.on('new-request', (tx, inbound) => {
    const req = inbound.message;
    if (req.method === 'OPTIONS') peer.options++;
    if (req.method !== 'INVITE') {
      tx.respond(createResponse(req, 200, undefined, { toTag: generateTag() }));
      return;
    }
    peer.invites.push(req);
    if (peer.mode !== 'answer') {
      tx.respond(peer.mode === 'busy' ? createResponse(req, 486, 'Busy Here', { toTag: generateTag() }) : createResponse(req, 503, 'Service Unavailable', { toTag: generateTag() }));
      return;
    }
    const d = dialogs.fromInvite(tx, inbound, { localContact: `<sip:peer@${address}:${port}${protocol === 'udp' ? '' : `;transport=${protocol}`}>` });
    d.answer({ body: ANSWER, contentType: 'application/sdp' });
  });
  return peer;
}

interface Silent {
  port: number;
  /** Datagrams received. */
  count: number;
  invites: number;
  close(): Promise<void>;
}

/** A UDP socket that takes everything and answers nothing: a dead server. */
async function startSilent(): Promise<Silent> {
  const s: Socket = createSocket('udp4');
  await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', () => resolve()));
  const silent: Silent = {
    port: s.address().port,
    count: 0,
    invites: 0,
    close: () => new Promise<void>((resolve) => s.close(() => resolve())),
  };
  s.on('message', (m) => {
    silent.count++;
    if (m.toString('utf8').startsWith('INVITE ')) silent.invites++;
  });
  return silent;
}

/** A TCP port with nothing listening: connections to it are refused at once. */
async function closedTcpPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

async function trunkFor(d: TestDaemon, outbound_host: string, extra: Record<string, unknown> = {}): Promise<OutboundTrunk> {
  const r = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: outbound_host, inbound_auth_type: 'none', outbound_host, ...extra });
  expect(r.status, r.text).toBe(201);
  const stored = (await d.daemon.store.sipTrunks.listByInboundAuth('none')).find((t) => t.id === r.body.id)!;
  return { id: stored.id, orgId: stored.org_id, name: stored.name, pbx: stored.pbx, outbound_host: stored.outbound_host, caller_id_transforms: stored.caller_id_transforms };
}

describe.skipIf(available.skip)(`RFC 3263 resolution and failover against dnsmasq${available.ok ? '' : `: skipped, ${available.reason}`}`, () => {
  let dns: Dnsmasq;
  let d: TestDaemon;
  const logLines: string[] = [];
  const closers: (() => Promise<void>)[] = [];
  let silentA: Silent;
  let liveA: Peer;
  let unavailableB: Peer;
  let liveB: Peer;
  let tcpC: Peer;
  let udpC: Peer;
  let plainD: Peer;
  let refusedPort: number;
  let busyF: Peer;
  let liveF: Peer;
  let tcpE: Peer;
  let silentReg: Silent;
  let registrar: CarrierRegistrar;
  let registrar503: CarrierRegistrar;

  beforeAll(async () => {
    silentA = await startSilent();
    liveA = await startPeer('udp');
    unavailableB = await startPeer('udp', { mode: 'unavailable' });
    liveB = await startPeer('udp');
    tcpC = await startPeer('tcp');
    udpC = await startPeer('udp');
    // No SRV: the A record's address and the default port 5060, on an address of loopback no other test uses.
    plainD = await startPeer('udp', { address: '127.0.0.77', port: 5060 });
    refusedPort = await closedTcpPort();
    tcpE = await startPeer('tcp');
    busyF = await startPeer('udp', { mode: 'busy' });
    liveF = await startPeer('udp');
    silentReg = await startSilent();
    registrar = await startCarrierRegistrar({ user: 'reg-user', password: 'reg-secret', grantSecs: 600 });
    registrar503 = await startCarrierRegistrar({ user: 'reg-user', password: 'reg-secret', grantSecs: 600 });
    registrar503.mode = 'unavailable';
    closers.push(() => silentA.close(), () => liveA.close(), () => unavailableB.close(), () => liveB.close(), () => tcpC.close(), () => udpC.close(), () => plainD.close(), () => tcpE.close(), () => busyF.close(), () => liveF.close(), () => silentReg.close(), () => registrar.close(), () => registrar503.close());
    const host = `host.${DOMAIN}`;
    dns = await startDnsmasq({
      local: [DOMAIN],
      hosts: [
        [host, '127.0.0.1'],
        [`plain.${DOMAIN}`, '127.0.0.77'],
      ],
      srv: [
        { name: `_sip._udp.srv.${DOMAIN}`, target: host, port: silentA.port, priority: 10, weight: 10 },
        { name: `_sip._udp.srv.${DOMAIN}`, target: host, port: liveA.port, priority: 20, weight: 10 },
        { name: `_sip._udp.busy.${DOMAIN}`, target: host, port: unavailableB.port, priority: 10, weight: 10 },
        { name: `_sip._udp.busy.${DOMAIN}`, target: host, port: liveB.port, priority: 20, weight: 10 },
        { name: `_sip._tcp.naptr.${DOMAIN}`, target: host, port: tcpC.port, priority: 10, weight: 10 },
        // Would answer too: only the NAPTR decides that TCP is used.
        { name: `_sip._udp.naptr.${DOMAIN}`, target: host, port: udpC.port, priority: 10, weight: 10 },
        { name: `_sip._tcp.refused.${DOMAIN}`, target: host, port: refusedPort, priority: 10, weight: 10 },
        { name: `_sip._tcp.refused.${DOMAIN}`, target: host, port: tcpE.port, priority: 20, weight: 10 },
        { name: `_sip._udp.busyhere.${DOMAIN}`, target: host, port: busyF.port, priority: 10, weight: 10 },
        { name: `_sip._udp.busyhere.${DOMAIN}`, target: host, port: liveF.port, priority: 20, weight: 10 },
        { name: `_sip._udp.reg.${DOMAIN}`, target: host, port: silentReg.port, priority: 10, weight: 10 },
        { name: `_sip._udp.reg.${DOMAIN}`, target: host, port: registrar.port, priority: 20, weight: 10 },
        { name: `_sip._udp.reg503.${DOMAIN}`, target: host, port: registrar503.port, priority: 10, weight: 10 },
        { name: `_sip._udp.reg503.${DOMAIN}`, target: host, port: registrar.port, priority: 20, weight: 10 },
      ],
      naptr: [{ name: `naptr.${DOMAIN}`, order: 10, preference: 10, flags: 's', service: 'SIP+D2T', replacement: `_sip._tcp.naptr.${DOMAIN}` }],
    });
    d = await startTestDaemon({ sip: { dns_servers: dns.server } }, undefined, {}, logLines);
  }, 30_000);

  afterAll(async () => {
    await d?.close();
    await dns?.stop();
    for (const c of closers.reverse()) await c();
  });

  it('SRV: the first target never answers -> the INVITE goes to the second within sip.failover_timeout_ms, answered; the next call goes straight to it', async () => {
    const trunk = await trunkFor(d, `srv.${DOMAIN}`);
    const started = Date.now();
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550001111', callerId: '+15559990000' });
    const elapsed = Date.now() - started;
    expect(result.ok, JSON.stringify(result)).toBe(true);
    const call = (result as { ok: true; call: SipCall }).call;
    expect(silentA.invites).toBeGreaterThanOrEqual(1);
    expect(liveA.invites).toHaveLength(1);
    // The Request-URI keeps the trunk's domain (RFC 3263 changes where it goes, not what it says).
    expect(liveA.invites[0]!.uri.toString()).toBe(`sip:+15550001111@srv.${DOMAIN}`);
    expect(elapsed, 'failed over before Timer B would have ended the INVITE').toBeLessThan(TIMER_B_MS);
    call.hangup();

    // Dead-target memory: the silent target is tried last now, so nothing more reaches it.
    const before = silentA.count;
    const again = await d.daemon.sip!.ua.dial({ trunk, to: '+15550001112', callerId: '+15559990000' });
    expect(again.ok, JSON.stringify(again)).toBe(true);
    expect(liveA.invites).toHaveLength(2);
    expect(silentA.count).toBe(before);
    (again as { ok: true; call: SipCall }).call.hangup();
    expect(d.daemon.sip!.ua.targets.status.isOut({ protocol: 'udp', address: '127.0.0.1', port: silentA.port })).toBe(true);
  }, 40_000);

  it('SRV: the first target answers 503 -> the second, answered', async () => {
    const trunk = await trunkFor(d, `busy.${DOMAIN}`);
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550002222', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(unavailableB.invites).toHaveLength(1);
    expect(liveB.invites).toHaveLength(1);
    // RFC 3263 4.3: a new transaction of the same call (same Call-ID, new branch).
    expect(liveB.invites[0]!.callId).toBe(unavailableB.invites[0]!.callId);
    expect(liveB.invites[0]!.topVia?.branch).not.toBe(unavailableB.invites[0]!.topVia?.branch);
    (result as { ok: true; call: SipCall }).call.hangup();
  });

  it('SRV: the first target answers 486 -> busy, the second target gets nothing (only 503 fails over)', async () => {
    const trunk = await trunkFor(d, `busyhere.${DOMAIN}`);
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550008888', callerId: '+15559990000' });
    expect(result).toMatchObject({ ok: false, reason: 'busy', status: 486 });
    expect(busyF.invites).toHaveLength(1);
    expect(liveF.invites).toHaveLength(0);
    expect(d.daemon.sip!.ua.targets.status.isOut({ protocol: 'udp', address: '127.0.0.1', port: busyF.port })).toBe(false);
  });

  it(';transport=tcp: the _sip._tcp SRV; the first target refuses the connection -> the second, answered', async () => {
    const trunk = await trunkFor(d, `refused.${DOMAIN};transport=tcp`);
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550007777', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(tcpE.invites).toHaveLength(1);
    expect(tcpE.invites[0]!.uri.toString()).toBe(`sip:+15550007777@refused.${DOMAIN};transport=tcp`);
    expect(d.daemon.sip!.ua.targets.status.isOut({ protocol: 'tcp', address: '127.0.0.1', port: refusedPort })).toBe(true);
    (result as { ok: true; call: SipCall }).call.hangup();
  });

  it('NAPTR SIP+D2T -> the TCP SRV target (the UDP SRV is not used); our Contact says transport=tcp', async () => {
    const trunk = await trunkFor(d, `naptr.${DOMAIN}`);
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550003333', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(tcpC.invites).toHaveLength(1);
    expect(udpC.invites).toHaveLength(0);
    expect(tcpC.invites[0]!.topVia?.transport).toBe('TCP');
    expect(tcpC.invites[0]!.contacts[0]?.uri.toString()).toMatch(/;transport=tcp$/);
    (result as { ok: true; call: SipCall }).call.hangup();
  });

  it('no NAPTR and no SRV -> the A record, port 5060', async () => {
    const trunk = await trunkFor(d, `plain.${DOMAIN}`);
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550004444', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(plainD.invites).toHaveLength(1);
    (result as { ok: true; call: SipCall }).call.hangup();
  });

  it('REGISTER: the first SRV target never answers -> registered at the second', async () => {
    const r = await d.api('POST', '/v1/sip-trunks', {
      pbx: 'generic',
      name: 'registering',
      inbound_auth_type: 'none',
      outbound_host: `reg.${DOMAIN}`,
      register: true,
      outbound_sip_username: 'reg-user',
      outbound_sip_password: 'reg-secret',
    });
    expect(r.status, r.text).toBe(201);
    await waitOutboundStatus(d, r.body.id, 'registered', 20_000, () => `silent got ${silentReg.count}, registrar got ${registrar.registers.length}`);
    expect(silentReg.count).toBeGreaterThanOrEqual(1);
    expect(registrar.registers.some((x) => x.authorized && x.answered === 200)).toBe(true);
    // The REGISTER's Request-URI names the registrar's domain, not the address it went to.
    expect(registrar.registers[0]!.request.uri.toString()).toBe(`sip:reg.${DOMAIN}`);
  }, 30_000);

  it('REGISTER: the first SRV target answers 503 -> registered at the second', async () => {
    const before = registrar.registers.length;
    const r = await d.api('POST', '/v1/sip-trunks', {
      pbx: 'generic',
      name: 'registering 503',
      inbound_auth_type: 'none',
      outbound_host: `reg503.${DOMAIN}`,
      register: true,
      outbound_sip_username: 'reg-user',
      outbound_sip_password: 'reg-secret',
    });
    expect(r.status, r.text).toBe(201);
    await waitOutboundStatus(d, r.body.id, 'registered', 10_000, () => `503 registrar got ${registrar503.registers.length}, registrar got ${registrar.registers.length - before}`);
    expect(registrar503.registers.map((x) => x.answered)).toContain(503);
    expect(registrar.registers.slice(before).some((x) => x.request.uri.toString() === `sip:reg503.${DOMAIN}` && x.answered === 200)).toBe(true);
  }, 20_000);

  it('the DNS server does not answer -> the dial fails with dns_failed and a log line says why; no crash', async () => {
    await dns.stop();
    const trunk = await trunkFor(d, `gone.${DOMAIN}`);
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550005555', callerId: '+15559990000' });
    expect(result).toMatchObject({ ok: false, reason: 'dns_failed', status: 503 });
    expect((result as { detail: string }).detail).toMatch(/cannot resolve gone\.dnsfail\.test: the DNS server \(127\.0\.0\.1:\d+\) did not answer/);
    const line = logLines.map((l) => JSON.parse(l) as { msg: string; level: number; err?: string }).find((l) => l.msg.includes('DNS resolution of outbound_host failed'));
    expect(line?.err).toMatch(/did not answer/);
    expect(line?.level).toBe(40);
    expect(d.daemon.sip!.ua.calls).toHaveLength(0);
    expect(d.daemon.sip!.ua.listening).toBe(true);
  });
});

describe.skipIf(available.skip)('OPTIONS health per resolved target', () => {
  let dns: Dnsmasq;
  let d: TestDaemon;
  let first: Peer;
  let second: Peer;

  beforeAll(async () => {
    first = await startPeer('tcp');
    second = await startPeer('tcp');
    const host = `host.${DOMAIN}`;
    dns = await startDnsmasq({
      local: [DOMAIN],
      hosts: [[host, '127.0.0.1']],
      srv: [
        { name: `_sip._tcp.health.${DOMAIN}`, target: host, port: first.port, priority: 10, weight: 10 },
        { name: `_sip._tcp.health.${DOMAIN}`, target: host, port: second.port, priority: 20, weight: 10 },
      ],
    });
    d = await startTestDaemon({ sip: { dns_servers: dns.server, options_ping_secs: 1 } });
  }, 30_000);

  afterAll(async () => {
    await d?.close();
    await dns?.stop();
    await first?.close();
    await second?.close();
  });

  it('pings each target; one that stops answering is taken out while the trunk stays up, and put back when it answers', async () => {
    const trunk = await trunkFor(d, `health.${DOMAIN};transport=tcp`);
    const health = d.daemon.sip!.health!;
    const status = d.daemon.sip!.ua.targets.status;
    const firstEndpoint = { protocol: 'tcp' as const, address: '127.0.0.1', port: first.port };
    await until(() => health.targets(trunk.id).length === 2 && health.targets(trunk.id).every((t) => t.status === 'up'), 'both targets up', 10_000);
    expect(health.status(trunk.id)).toBe(true);
    expect(first.options).toBeGreaterThan(0);
    expect(second.options).toBeGreaterThan(0);

    // The first target goes away: refused connections, down after two rounds.
    const port = first.port;
    await first.close();
    await until(() => health.targets(trunk.id).find((t) => t.destination.port === port)?.status === 'down', 'the first target down', 10_000);
    expect(status.isOut(firstEndpoint)).toBe(true);
    expect(health.status(trunk.id)).toBe(true);
    const metrics = await (await fetch(`${d.url}/metrics`)).text();
    expect(metrics).toContain(`callbridge_sip_trunk_up{trunk_id="${trunk.id}"} 1`);
    // A call now goes to the second target first.
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550006666', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(second.invites).toHaveLength(1);
    (result as { ok: true; call: SipCall }).call.hangup();

    // Back on the same port: answered again, put back.
    first = await startPeer('tcp', { port });
    await until(() => health.targets(trunk.id).find((t) => t.destination.port === port)?.status === 'up', 'the first target up again', 10_000);
    expect(status.isOut(firstEndpoint)).toBe(false);
  }, 40_000);
});
