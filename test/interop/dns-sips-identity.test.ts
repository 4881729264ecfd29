/**
 * RFC 5922 name checking on outbound TLS, against real TLS sockets on loopback and dnsmasq:
 * a CA made by openssl for this run (the daemon's sip.tls_ca), server certificates signed by it
 * with various identities, SIP peers on our own layers listening on TLS with them.
 *
 *   _sips._tcp.carrier.test -> peer whose cert says DNS:carrier.test        -> call answered
 *   SRV target cert names only the SRV host / a wildcard / nothing matching -> refused, the
 *     target counts as failed, the next SRV target (good cert) answers; a log line names the
 *     domain and what the certificate presented
 *   explicit host (A record, port given), cert for that host               -> answered
 *   outbound_host sips:carrier.test                                        -> _sips._tcp, sips:
 *     Request-URI and Contact
 *   sips: host whose only SRV is _sip._udp                                 -> no INVITE over UDP,
 *     the dial fails; sips:...;transport=udp is refused by the API
 */
import { execFileSync } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { DialogManager } from '../../src/sip/dialog/index.ts';
import { createResponse, generateTag, type SipRequest } from '../../src/sip/message/index.ts';
import { TransactionLayer } from '../../src/sip/transaction/index.ts';
import { SipTransportLayer } from '../../src/sip/transport/index.ts';
import type { OutboundTrunk } from '../../src/sip/ua/outbound-call.ts';
import type { SipCall } from '../../src/sip/ua/call.ts';
import { opensslAvailable } from '../helpers/peer-availability.ts';
import { dnsmasqAvailable, startDnsmasq, type Dnsmasq } from './dnsmasq.ts';

const available = dnsmasqAvailable();
const openssl = opensslAvailable();
const ANSWER = 'v=0\r\no=- 7 2 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 41000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n';

interface Pem {
  cert: string;
  key: string;
}

/** A CA, and leaf certificates signed by it with the given subject and subjectAltName. */
function makePki(dir: string): { ca: string; leaf(name: string, cn: string, san: string | undefined): Pem } {
  const run = (args: string[]): void => void execFileSync('openssl', args, { stdio: 'ignore', cwd: dir });
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=callbridge test CA', '-days', '1', '-keyout', 'ca.key', '-out', 'ca.pem']);
  return {
    ca: readFileSync(join(dir, 'ca.pem'), 'utf8'),
    leaf(name, cn, san) {
      run(['req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${cn}`, '-keyout', `${name}.key`, '-out', `${name}.csr`]);
      writeFileSync(join(dir, `${name}.ext`), san === undefined ? 'basicConstraints=CA:FALSE\n' : `basicConstraints=CA:FALSE\nsubjectAltName=${san}\n`);
      run(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '1', '-out', `${name}.pem`, '-extfile', `${name}.ext`]);
      return { cert: readFileSync(join(dir, `${name}.pem`), 'utf8'), key: readFileSync(join(dir, `${name}.key`), 'utf8') };
    },
  };
}

interface Peer {
  port: number;
  invites: SipRequest[];
  close(): Promise<void>;
}

/** A SIP peer on our own layers listening on TLS with `pem`: answers INVITE with 200 + SDP. */
async function startTlsPeer(pem: Pem): Promise<Peer> {
  const transport = new SipTransportLayer({ listen: [{ protocol: 'tls', address: '127.0.0.1', port: 0, tls: pem }] });
  await transport.start();
  const layer = new TransactionLayer({ transport });
  const dialogs = new DialogManager({ layer });
  const port = transport.endpoints[0]!.port;
  const peer: Peer = {
    port,
    invites: [],
    async close() {
      dialogs.close();
      layer.close();
      await transport.close();
    },
  };
  dialogs.on('new-request', (tx, inbound) => {
    const req = inbound.message;
    if (req.method !== 'INVITE') {
      tx.respond(createResponse(req, 200, undefined, { toTag: generateTag() }));
      return;
    }
    peer.invites.push(req);
    const d = dialogs.fromInvite(tx, inbound, { localContact: `<sip:peer@127.0.0.1:${port};transport=tls>` });
    d.answer({ body: ANSWER, contentType: 'application/sdp' });
  });
  return peer;
}

async function trunkFor(d: TestDaemon, outbound_host: string): Promise<OutboundTrunk> {
  const r = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: outbound_host, inbound_auth_type: 'none', outbound_host });
  expect(r.status, r.text).toBe(201);
  const stored = (await d.daemon.store.sipTrunks.listByInboundAuth('none')).find((t) => t.id === r.body.id)!;
  return { id: stored.id, orgId: stored.org_id, name: stored.name, pbx: stored.pbx, outbound_host: stored.outbound_host, caller_id_transforms: stored.caller_id_transforms };
}

describe.skipIf(available.skip || openssl.skip)(`RFC 5922 certificate names on outbound TLS${available.ok ? '' : `: skipped, ${available.reason}`}`, () => {
  let dir: string;
  let dns: Dnsmasq;
  let d: TestDaemon;
  const logLines: string[] = [];
  const peers: Peer[] = [];
  let good: Peer;
  let hostOnly: Peer;
  let wildcard: Peer;
  let good2: Peer;
  let uriSan: Peer;
  let explicit: Peer;
  const udp = createSocket('udp4');
  let udpDatagrams = 0;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'callbridge-sips-'));
    const pki = makePki(dir);
    const own = pki.leaf('own', 'localhost', 'DNS:localhost,IP:127.0.0.1');
    writeFileSync(join(dir, 'own.pem'), own.cert);
    good = await startTlsPeer(pki.leaf('good', 'carrier.test', 'DNS:carrier.test'));
    hostOnly = await startTlsPeer(pki.leaf('hostonly', 'sbc1.carrier2.test', 'DNS:sbc1.carrier2.test'));
    wildcard = await startTlsPeer(pki.leaf('wild', 'carrier3.test', 'DNS:*.carrier3.test'));
    good2 = await startTlsPeer(pki.leaf('good2', 'x', 'DNS:carrier2.test'));
    uriSan = await startTlsPeer(pki.leaf('uri', 'x', 'URI:sip:carrier3.test'));
    explicit = await startTlsPeer(pki.leaf('explicit', 'sbc.direct.test', 'DNS:sbc.direct.test'));
    peers.push(good, hostOnly, wildcard, good2, uriSan, explicit);
    udp.on('message', () => udpDatagrams++);
    await new Promise<void>((r) => udp.bind(0, '127.0.0.1', () => r()));
    dns = await startDnsmasq({
      local: ['carrier.test', 'carrier2.test', 'carrier3.test', 'direct.test', 'udponly.test'],
      hosts: [
        ['sbc1.carrier.test', '127.0.0.1'],
        ['sbc1.carrier2.test', '127.0.0.1'],
        ['sbc2.carrier2.test', '127.0.0.1'],
        ['sbc1.carrier3.test', '127.0.0.1'],
        ['sbc2.carrier3.test', '127.0.0.1'],
        ['sbc.direct.test', '127.0.0.1'],
        ['sbc.udponly.test', '127.0.0.1'],
      ],
      srv: [
        { name: '_sips._tcp.carrier.test', target: 'sbc1.carrier.test', port: good.port, priority: 10, weight: 10 },
        { name: '_sips._tcp.carrier2.test', target: 'sbc1.carrier2.test', port: hostOnly.port, priority: 10, weight: 10 },
        { name: '_sips._tcp.carrier2.test', target: 'sbc2.carrier2.test', port: good2.port, priority: 20, weight: 10 },
        { name: '_sips._tcp.carrier3.test', target: 'sbc1.carrier3.test', port: wildcard.port, priority: 10, weight: 10 },
        { name: '_sips._tcp.carrier3.test', target: 'sbc2.carrier3.test', port: uriSan.port, priority: 20, weight: 10 },
        { name: '_sip._udp.udponly.test', target: 'sbc.udponly.test', port: udp.address().port, priority: 10, weight: 10 },
      ],
    });
    d = await startTestDaemon(
      { sip: { dns_servers: dns.server, tls_port: 0, tls_cert: join(dir, 'own.pem'), tls_key: join(dir, 'own.key'), tls_ca: join(dir, 'ca.pem') } },
      undefined,
      {},
      logLines,
    );
  }, 60_000);

  afterAll(async () => {
    await d?.close();
    await dns?.stop();
    for (const p of peers) await p.close();
    await new Promise<void>((r) => udp.close(() => r()));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('_sips._tcp SRV -> a target whose certificate names the SIP domain (DNS SAN carrier.test, not sbc1.carrier.test): answered', async () => {
    const trunk = await trunkFor(d, 'carrier.test;transport=tls');
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550001111', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(good.invites).toHaveLength(1);
    (result as { ok: true; call: SipCall }).call.hangup();
  }, 30_000);

  it('a certificate naming only the SRV target host -> refused, failover to the next target, a log line names the domain and the certificate', async () => {
    const trunk = await trunkFor(d, 'carrier2.test;transport=tls');
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550002222', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(hostOnly.invites).toHaveLength(0);
    expect(good2.invites).toHaveLength(1);
    expect(d.daemon.sip!.ua.targets.status.isOut({ protocol: 'tls', address: '127.0.0.1', port: hostOnly.port })).toBe(true);
    expect(logLines.join('\n')).toMatch(/SIP domain carrier2\.test.*presents DNS:sbc1\.carrier2\.test/);
    (result as { ok: true; call: SipCall }).call.hangup();
  }, 30_000);

  it('a wildcard certificate (*.carrier3.test) -> refused (RFC 5922 7.2); the next target with URI SAN sip:carrier3.test answers', async () => {
    const trunk = await trunkFor(d, 'carrier3.test;transport=tls');
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550003333', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(wildcard.invites).toHaveLength(0);
    expect(uriSan.invites).toHaveLength(1);
    expect(logLines.join('\n')).toMatch(/SIP domain carrier3\.test.*presents DNS:\*\.carrier3\.test/);
    (result as { ok: true; call: SipCall }).call.hangup();
  }, 30_000);

  it('an explicit host and port (A record, no SRV) -> its certificate must name that host: answered', async () => {
    const trunk = await trunkFor(d, `sbc.direct.test:${explicit.port};transport=tls`);
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550004444', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(explicit.invites).toHaveLength(1);
    (result as { ok: true; call: SipCall }).call.hangup();
  }, 30_000);

  it('outbound_host sips:carrier.test -> _sips._tcp, TLS; the INVITE has a sips: Request-URI (no transport=tls) and a sips: Contact', async () => {
    const trunk = await trunkFor(d, 'sips:carrier.test');
    const before = good.invites.length;
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550005555', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    expect(good.invites).toHaveLength(before + 1);
    const inv = good.invites[before]!;
    expect(inv.uri.toString()).toBe('sips:+15550005555@carrier.test');
    expect(inv.get('Contact')).toMatch(/^<sips:callbridge@/);
    (result as { ok: true; call: SipCall }).call.hangup();
  }, 30_000);

  it('a sips: host whose only SRV is _sip._udp -> nothing goes over UDP and the dial fails; sips: with ;transport=udp is refused', async () => {
    const trunk = await trunkFor(d, 'sips:udponly.test');
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550006666', callerId: '+15559990000' });
    expect(result.ok, JSON.stringify(result)).toBe(false);
    expect((result as { detail: string }).detail).toMatch(/udponly\.test: no NAPTR\/SRV target for TLS/);
    expect(udpDatagrams).toBe(0);
    const r = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'x', inbound_auth_type: 'none', outbound_host: 'sips:carrier.test;transport=udp' });
    expect(r.status).toBe(400);
    expect(r.text).toMatch(/TLS only/);
  }, 30_000);

  it('inbound: an INVITE with a sips: Request-URI over UDP -> 480 with Warning 381 "SIPS Required", no call', async () => {
    const port = d.daemon.sip!.ua.endpoints.find((e) => e.protocol === 'udp')!.port;
    const sock = createSocket('udp4');
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
    const local = sock.address().port;
    const got = new Promise<string>((resolve) => sock.on('message', (m) => {
      const text = m.toString('utf8');
      if (!text.startsWith('SIP/2.0 1')) resolve(text);
    }));
    const msg = [
      `INVITE sips:+15550007777@127.0.0.1:${port} SIP/2.0`,
      `Via: SIP/2.0/UDP 127.0.0.1:${local};branch=z9hG4bKsipsudp1;rport`,
      'Max-Forwards: 70',
      `From: <sip:caller@127.0.0.1:${local}>;tag=a1`,
      'To: <sips:+15550007777@127.0.0.1>',
      'Call-ID: sips-over-udp-1',
      'CSeq: 1 INVITE',
      `Contact: <sip:caller@127.0.0.1:${local}>`,
      'Content-Length: 0',
      '',
      '',
    ].join('\r\n');
    sock.send(msg, port, '127.0.0.1');
    const res = await got;
    sock.close();
    expect(res).toMatch(/^SIP\/2\.0 480 /);
    expect(res).toMatch(/\r\nWarning: 381 callbridge "SIPS Required/);
  }, 30_000);
});
