/**
 * Interop: SDES-SRTP over SIP/TLS against baresip 1.0.0 (Debian) with `mediaenc=srtp-mand`, on
 * a trunk with `media_encryption: require`, and the 488s of that policy.
 *
 *  1. baresip calls in over TLS: the INVITE offers RTP/SAVP with a=crypto, callbridge answers
 *     SAVP with its own key; baresip sends a 440 Hz tone, callbridge sends 1000 Hz back. Each
 *     side's DECODED audio is measured: callbridge's received RTP (after SRTP unprotect, mu-law
 *     decoded) must carry 440 Hz, baresip's recording (sndfile, after its libre SRTP) 1000 Hz.
 *  2. callbridge dials baresip through the trunk (outbound_host ;transport=tls, the far end's
 *     certificate verified against sip.tls_ca): same measurement, the other way round.
 *  3. Hold and resume (baresip's re-INVITEs): SRTP goes on, tones decoded after the resume.
 *  4. Plain RTP offered to the require trunk (a raw SIP client over TLS and over UDP): 488 with a
 *     Warning naming why; an INVITE without SDP gets our SAVP offer, the ACK's answer keys the
 *     call; a dial of a require trunk over UDP: refused at dial time.
 *  5. An allow trunk: SRTP when dialled over TLS, plain RTP over UDP.
 *
 * The certificate (CN localhost, SAN 127.0.0.1) is made with openssl for the run; callbridge and
 * baresip both use it, and both trust it as their CA.
 */
import { execFileSync } from 'node:child_process';
import dgram from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import tls from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import type { SipCall } from '../../src/sip/ua/call.ts';
import type { SipRequest } from '../../src/sip/message/index.ts';
import { decodeMuLaw, encodeMuLaw } from '../../src/media/g711.ts';
import { outboundTrunkFromStore } from '../../src/bridge/sip-store-directory.ts';
import { amplitudeAt } from '../media/signal-analysis.ts';
import { until } from '../helpers/until.ts';
import { opensslAvailable } from '../helpers/peer-availability.ts';
import { baresipAvailable, readWavPcm16, startBaresip, toneWav, runBaresip } from './baresip/baresip.ts';

const bs = baresipAvailable();
const openssl = opensslAvailable();
const NUMBER = '+15550002000';
const ACL_NUMBER = '+15550003000';
const USER = 'srtp-trunk-user';
const PASSWORD = 'srtp-trunk-secret';

let d: TestDaemon;
let dir: string;
let tlsPort: number;
let trunkId: string;
let orgId: string;
const requests: { req: SipRequest; protocol: string }[] = [];

interface CallSeen {
  call: SipCall;
  decoded: number[];
  ended: Promise<void>;
}
const calls: CallSeen[] = [];

/** Sends a 1000 Hz mu-law tone on the call's RTP every 20 ms and decodes what arrives. */
function attach(call: SipCall): CallSeen {
  const seen: CallSeen = { call, decoded: [], ended: new Promise<void>((r) => call.once('hangup', () => r())) };
  const pcm = new Int16Array(160);
  const out = new Int16Array(1024);
  call.rtp.on('rtp', (p) => {
    const n = decodeMuLaw(p.payload, out, p.payload.length);
    for (let i = 0; i < n; i++) seen.decoded.push(out[i]!);
  });
  let phase = 0;
  const timer = setInterval(() => {
    for (let i = 0; i < 160; i++) pcm[i] = Math.round(8000 * Math.sin((2 * Math.PI * 1000 * phase++) / 8000));
    const bytes = new Uint8Array(160);
    encodeMuLaw(pcm, bytes, 160);
    call.rtp.send(bytes, { payloadType: call.media.codec.payloadType, timestampIncrement: 160 });
  }, 20);
  call.once('hangup', () => clearInterval(timer));
  return seen;
}

/** The strongest amplitude of `freq` over 256 ms windows of the signal (after its first 0.25 s). */
function strongest(samples: ArrayLike<number>, freq: number): number {
  let best = 0;
  for (let start = 2000; start + 2048 <= samples.length; start += 1024) best = Math.max(best, amplitudeAt(samples, 8000, freq, start, 2048));
  return best;
}

function plainOffer(port: number): string {
  return ['v=0', 'o=- 1 1 IN IP4 127.0.0.1', 's=-', 'c=IN IP4 127.0.0.1', 't=0 0', `m=audio ${port} RTP/AVP 0`, 'a=rtpmap:0 PCMU/8000', ''].join('\r\n');
}

function invite(protocol: 'TLS' | 'UDP', localPort: number, target: number, sdp: string, branch: string): string {
  const body = Buffer.from(sdp);
  return [
    `INVITE sip:${ACL_NUMBER}@127.0.0.1:${target} SIP/2.0`,
    `Via: SIP/2.0/${protocol} 127.0.0.1:${localPort};branch=z9hG4bK${branch};rport`,
    'Max-Forwards: 70',
    `From: <sip:caller@127.0.0.1>;tag=${branch}`,
    `To: <sip:${ACL_NUMBER}@127.0.0.1>`,
    `Call-ID: ${branch}@test`,
    'CSeq: 1 INVITE',
    `Contact: <sip:caller@127.0.0.1:${localPort}${protocol === 'TLS' ? ';transport=tls' : ''}>`,
    'Content-Type: application/sdp',
    `Content-Length: ${body.length}`,
    '',
    sdp,
  ].join('\r\n');
}

/** Reads SIP responses from a stream until a final one; returns it as text. */
function finalResponse(read: (onData: (chunk: Buffer) => void) => void): Promise<string> {
  return new Promise((resolve) => {
    let buf = '';
    read((chunk) => {
      buf += chunk.toString('utf8');
      for (const msg of buf.split(/\r\n\r\n/)) {
        const m = /^SIP\/2\.0 (\d{3})/.exec(msg);
        if (m && Number(m[1]) >= 200) resolve(msg);
      }
    });
  });
}

/**
 * The raw clients below do not answer digest challenges: a second require trunk admits 127.0.0.1
 * by ACL. Made on first use, after the baresip calls (which must go through the digest trunk).
 */
let aclReady: Promise<void> | undefined;
function aclTrunk(): Promise<void> {
  aclReady ??= (async () => {
    const acl = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'srtp-acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'], media_encryption: 'require' });
    expect(acl.status, acl.text).toBe(201);
    const agent = (await d.api('POST', '/v1/agents', { name: 'ACL desk' })).body;
    // ACL trunks route by the assignment's alternate_number (docs/sip-ua.md).
    const asg = await d.api('POST', `/v1/sip-trunks/${acl.body.id}/assignments`, { agent_id: agent.id, number: ACL_NUMBER, alternate_number: ACL_NUMBER });
    expect(asg.status, asg.text).toBe(201);
  })();
  return aclReady;
}

/** SIP messages read off a stream socket, one at a time (Content-Length framed). */
function sipReader(sock: tls.TLSSocket): () => Promise<{ start: string; head: string; body: string }> {
  let buf = Buffer.alloc(0);
  const waiting: Array<() => void> = [];
  sock.on('data', (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    for (const w of waiting.splice(0)) w();
  });
  return async () => {
    for (;;) {
      const end = buf.indexOf('\r\n\r\n');
      if (end >= 0) {
        const head = buf.subarray(0, end).toString('utf8');
        const len = Number(/^Content-Length:\s*(\d+)/im.exec(head)?.[1] ?? 0);
        if (buf.length >= end + 4 + len) {
          const body = buf.subarray(end + 4, end + 4 + len).toString('utf8');
          buf = buf.subarray(end + 4 + len);
          return { start: head.split('\r\n')[0]!, head, body };
        }
      }
      await new Promise<void>((r) => waiting.push(r));
    }
  };
}

describe.skipIf(bs.skip || openssl.skip)(`SDES-SRTP over TLS vs baresip${bs.ok ? ` (${bs.version})` : `: skipped, ${bs.reason}`}`, () => {
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'callbridge-srtp-'));
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-days', '1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'],
      { stdio: 'ignore' },
    );
    writeFileSync(join(dir, 'both.pem'), readFileSync(join(dir, 'cert.pem'), 'utf8') + readFileSync(join(dir, 'key.pem'), 'utf8'));
    d = await startTestDaemon({
      sip: { digest_algorithms: 'MD5', tls_cert: join(dir, 'cert.pem'), tls_key: join(dir, 'key.pem'), tls_port: 0, tls_ca: join(dir, 'cert.pem') },
      rtp: { media_timeout_secs: 10 },
    });
    const ua = d.daemon.sip!.ua;
    tlsPort = ua.endpoints.find((e) => e.protocol === 'tls')!.port;
    ua.transport.on('request', (inbound) => requests.push({ req: inbound.message, protocol: inbound.source.protocol }));
    ua.onInboundCall((call) => {
      calls.push(attach(call));
      call.answer();
    });
    const agent = (await d.api('POST', '/v1/agents', { name: 'Secure desk' })).body;
    const trunk = await d.api('POST', '/v1/sip-trunks', {
      pbx: 'generic',
      name: 'srtp',
      inbound_auth_type: 'digest',
      inbound_sip_username: USER,
      inbound_sip_password: PASSWORD,
      media_encryption: 'require',
    });
    expect(trunk.status, trunk.text).toBe(201);
    expect(trunk.body.media_encryption).toBe('require');
    trunkId = trunk.body.id;
    orgId = (await d.daemon.store.sipTrunks.listByInboundAuth('digest')).find((t) => t.id === trunkId)!.org_id;
    const asg = await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agent.id, number: NUMBER });
    expect(asg.status, asg.text).toBe(201);
  }, 30_000);

  afterAll(async () => {
    await d?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('baresip (srtp-mand) calls in over TLS: RTP/SAVP both ways, each side decodes the other tone', async () => {
    const phone = await runBaresip({
      dial: `sip:${NUMBER}@127.0.0.1:${tlsPort};transport=tls`,
      account: { user: USER, password: PASSWORD, domain: `127.0.0.1:${tlsPort};transport=tls` },
      tls: { certificateFile: join(dir, 'both.pem'), caFile: join(dir, 'cert.pem') },
      mediaenc: 'srtp-mand',
      audio: toneWav(3, 440, 8000),
      maxSeconds: 12,
    });
    expect(phone.established, phone.describe()).toBe(true);
    expect(calls, phone.describe()).toHaveLength(1);
    const c = calls[0]!;
    await c.ended;
    // The offer came over TLS with SAVP and a crypto line; callbridge took SRTP.
    const inv = requests.find((r) => r.req.method === 'INVITE' && r.req.callId === c.call.callId && r.req.body.length > 0)!;
    expect(inv.protocol).toBe('tls');
    expect(inv.req.body.toString()).toMatch(/^m=audio \d+ RTP\/SAVP /m);
    expect(inv.req.body.toString()).toMatch(/^a=crypto:\d+ AES_CM_128_HMAC_SHA1_(80|32) inline:/m);
    expect(c.call.media.srtp?.suite).toMatch(/^AES_CM_128_HMAC_SHA1_(80|32)$/);
    const stats = c.call.rtp.stats();
    expect(stats.packetsReceived, phone.describe()).toBeGreaterThan(80);
    expect(stats.dropped.srtpAuthFailed ?? 0).toBe(0);
    // baresip 1.0 sends its last RTCP (SDES + BYE, seen up to twice) in the clear after its SRTP
    // context is gone: dropped, as RFC 3711 wants.
    expect(stats.dropped.srtcpAuthFailed ?? 0).toBeLessThanOrEqual(2);

    // callbridge decoded baresip's 440 Hz (it could only after SRTP unprotect: SRTP payloads are noise).
    const at440 = strongest(c.decoded, 440);
    expect(at440, `440 Hz at callbridge: ${at440}`).toBeGreaterThan(2000);
    expect(strongest(c.decoded, 1000)).toBeLessThan(at440 / 10);
    // baresip decoded callbridge's 1000 Hz.
    const heard = readWavPcm16(phone.received!);
    const at1000 = strongest(heard.samples, 1000);
    expect(at1000, `1000 Hz at baresip: ${at1000}\n${phone.describe()}`).toBeGreaterThan(2000);
    expect(strongest(heard.samples, 440)).toBeLessThan(at1000 / 10);
  }, 30_000);

  it('callbridge dials baresip (srtp-mand) over TLS through the require trunk: SRTP both ways, tones decoded', async () => {
    const phone = await startBaresip({
      account: { user: 'baresip', domain: '127.0.0.1' },
      tls: { certificateFile: join(dir, 'both.pem'), caFile: join(dir, 'cert.pem') },
      mediaenc: 'srtp-mand',
      audio: toneWav(3, 440, 8000),
      maxSeconds: 20,
      quitAfterCall: true,
    });
    try {
      await phone.ready;
      const patch = await d.api('PATCH', `/v1/sip-trunks/${trunkId}`, { outbound_host: `127.0.0.1:${phone.sipPort + 1};transport=tls` });
      expect(patch.status, patch.text).toBe(200);
      const trunk = (await outboundTrunkFromStore(d.daemon.store, orgId, trunkId))!;
      expect(trunk.media_encryption).toBe('require');
      const result = await d.daemon.sip!.ua.dial({ trunk, to: 'baresip', callerId: '+15559990000' });
      expect(result.ok, JSON.stringify(result)).toBe(true);
      if (!result.ok) return;
      const seen = attach(result.call);
      expect(result.call.media.srtp?.suite).toMatch(/^AES_CM_128_HMAC_SHA1_(80|32)$/);
      await seen.ended;
      const r = await phone.result;
      expect(r.established, r.describe()).toBe(true);
      expect(result.call.rtp.stats().dropped.srtpAuthFailed ?? 0).toBe(0);
      const at440 = strongest(seen.decoded, 440);
      expect(at440, `440 Hz at callbridge: ${at440}`).toBeGreaterThan(2000);
      const heard = readWavPcm16(r.received!);
      const at1000 = strongest(heard.samples, 1000);
      expect(at1000, `1000 Hz at baresip: ${at1000}\n${r.describe()}`).toBeGreaterThan(2000);
      expect(strongest(heard.samples, 440)).toBeLessThan(at1000 / 10);
    } finally {
      phone.kill();
      await phone.result;
    }
  }, 40_000);

  it('hold and resume by re-INVITE (baresip): SRTP goes on, both tones decoded after the resume', async () => {
    const before = calls.length;
    const phone = await startBaresip({
      dial: `sip:${NUMBER}@127.0.0.1:${tlsPort};transport=tls`,
      account: { user: USER, password: PASSWORD, domain: `127.0.0.1:${tlsPort};transport=tls` },
      tls: { certificateFile: join(dir, 'both.pem'), caFile: join(dir, 'cert.pem') },
      mediaenc: 'srtp-mand',
      audio: toneWav(6, 440, 8000),
      maxSeconds: 20,
      ctrlTcp: true,
    });
    try {
      await until(() => calls.length > before && calls[before]!.decoded.length > 8000, 'the call with audio', 8000);
      const c = calls[before]!;
      const holds: boolean[] = [];
      c.call.on('hold', (h) => holds.push(h));
      const reinvites = () => requests.filter((r) => r.req.method === 'INVITE' && r.req.callId === c.call.callId).length;
      const invitesBefore = reinvites();
      const held = await phone.command('hold');
      expect(held.ok, held.data).toBe(true);
      await until(() => holds.includes(true), 'on hold (re-INVITE sendonly)', 5000);
      const resumed = await phone.command('resume');
      expect(resumed.ok, resumed.data).toBe(true);
      await until(() => holds.at(-1) === false, 'resumed (re-INVITE sendrecv)', 5000);
      expect(reinvites()).toBeGreaterThanOrEqual(invitesBefore + 2);
      for (const r of requests.filter((x) => x.req.method === 'INVITE' && x.req.callId === c.call.callId && x.req.body.length > 0)) {
        expect(r.protocol).toBe('tls');
        expect(r.req.body.toString()).toMatch(/^a=crypto:/m);
      }
      expect(c.call.media.srtp).toBeDefined();
      const mark = c.decoded.length;
      await c.ended; // baresip hangs up at the end of its 6 s WAV
      const r = await phone.result;
      const after = c.decoded.slice(mark);
      const at440 = strongest(after, 440);
      expect(at440, `440 Hz at callbridge after the resume: ${at440} over ${after.length} samples`).toBeGreaterThan(2000);
      expect(c.call.rtp.stats().dropped.srtpAuthFailed ?? 0).toBe(0);
      // baresip heard 1000 Hz in its last second (after the resume).
      const heard = readWavPcm16(r.received!).samples;
      const tail = heard.subarray(Math.max(0, heard.length - 8000 - 2000));
      const at1000 = strongest(tail, 1000);
      expect(at1000, `1000 Hz at baresip after the resume: ${at1000}\n${r.describe()}`).toBeGreaterThan(2000);
    } finally {
      phone.kill();
      await phone.result;
    }
  }, 40_000);

  it('plain RTP offered to the require trunk over TLS: 488 "SRTP required by the trunk"; SDES over UDP: 488 "SDES keys only over TLS"', async () => {
    await aclTrunk();

    const sock = tls.connect({ host: '127.0.0.1', port: tlsPort, ca: readFileSync(join(dir, 'cert.pem')) });
    await new Promise<void>((r) => sock.once('secureConnect', () => r()));
    const res = finalResponse((fn) => sock.on('data', fn));
    sock.write(invite('TLS', sock.localPort ?? 5061, tlsPort, plainOffer(40000), 'tlsplain'));
    const text = await res;
    sock.destroy();
    expect(text).toMatch(/^SIP\/2\.0 488 /);
    expect(text).toMatch(/^Warning: 302 \S+ "SRTP required by the trunk"/m);
    expect(text).toMatch(/^Reason: SIP ;cause=488 ;text="SRTP required by the trunk"/m);

    const udp = dgram.createSocket('udp4');
    await new Promise<void>((r) => udp.bind(0, '127.0.0.1', () => r()));
    const port = d.daemon.sip!.port;
    const got = finalResponse((fn) => udp.on('message', fn));
    const savp = plainOffer(40002).replace('RTP/AVP', 'RTP/SAVP') + `a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:${Buffer.alloc(30, 7).toString('base64')}\r\n`;
    udp.send(invite('UDP', (udp.address() as { port: number }).port, port, savp, 'udpsavp'), port, '127.0.0.1');
    const t2 = await got;
    udp.close();
    expect(t2).toMatch(/^SIP\/2\.0 488 /);
    expect(t2).toMatch(/^Warning: 302 \S+ "SDES keys only over TLS"/m);
  });

  it('an INVITE without SDP over TLS to the require trunk: our offer in the 200 is RTP/SAVP with both suites; the SAVP answer in the ACK keys the call', async () => {
    await aclTrunk();
    const sock = tls.connect({ host: '127.0.0.1', port: tlsPort, ca: readFileSync(join(dir, 'cert.pem')) });
    await new Promise<void>((r) => sock.once('secureConnect', () => r()));
    const next = sipReader(sock);
    const lp = sock.localPort ?? 5061;
    const callId = `delayed-${Date.now()}@test`;
    const head = (method: string, uri: string, cseq: number, branch: string, to: string, extra: string[], body = '') =>
      [
        `${method} ${uri} SIP/2.0`,
        `Via: SIP/2.0/TLS 127.0.0.1:${lp};branch=z9hG4bK${branch};rport`,
        'Max-Forwards: 70',
        'From: <sip:caller@127.0.0.1>;tag=delayed',
        `To: ${to}`,
        `Call-ID: ${callId}`,
        `CSeq: ${cseq} ${method}`,
        `Contact: <sip:caller@127.0.0.1:${lp};transport=tls>`,
        ...extra,
        `Content-Length: ${Buffer.byteLength(body)}`,
        '',
        body,
      ].join('\r\n');
    const before = calls.length;
    sock.write(head('INVITE', `sip:${ACL_NUMBER}@127.0.0.1:${tlsPort};transport=tls`, 1, 'dly1', `<sip:${ACL_NUMBER}@127.0.0.1>`, []));
    let res = await next();
    while (/^SIP\/2\.0 1\d\d/.test(res.start)) res = await next();
    expect(res.start).toMatch(/^SIP\/2\.0 200 /);
    expect(res.body).toMatch(/^m=audio \d+ RTP\/SAVP /m);
    const lines = res.body.split(/\r\n/).filter((l) => l.startsWith('a=crypto:'));
    expect(lines.map((l) => l.split(' ').slice(0, 2).join(' '))).toEqual(['a=crypto:1 AES_CM_128_HMAC_SHA1_80', 'a=crypto:2 AES_CM_128_HMAC_SHA1_32']);
    const to = /^To:\s*(.+)$/im.exec(res.head)![1]!.trim();
    const contact = /^(?:Contact|m):\s*<([^>]+)>/im.exec(res.head)![1]!;
    const ours = Buffer.alloc(30, 9).toString('base64');
    const answer = ['v=0', 'o=- 2 2 IN IP4 127.0.0.1', 's=-', 'c=IN IP4 127.0.0.1', 't=0 0', 'm=audio 40010 RTP/SAVP 0', 'a=rtpmap:0 PCMU/8000', `a=crypto:2 AES_CM_128_HMAC_SHA1_32 inline:${ours}`, ''].join('\r\n');
    sock.write(head('ACK', contact, 1, 'dly2', to, ['Content-Type: application/sdp'], answer));
    await until(() => calls.length > before && calls[before]!.call.media.srtp !== undefined, 'the ACK answer applied', 5000);
    const c = calls[before]!;
    expect(c.call.media.srtp!.suite).toBe('AES_CM_128_HMAC_SHA1_32');
    expect(Buffer.from(c.call.media.srtp!.receiveKey).toString('base64')).toBe(ours);
    sock.write(head('BYE', contact, 2, 'dly3', to, []));
    let bye = await next();
    while (!/^CSeq:\s*2 BYE/im.test(bye.head)) bye = await next();
    expect(bye.start).toMatch(/^SIP\/2\.0 200 /);
    await c.ended;
    sock.destroy();
  });

  it('allow: a dial over TLS offers SRTP (baresip srtp-mand takes it), a dial over UDP offers plain RTP (plain baresip takes it)', async () => {
    const trunk = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'srtp-allow', inbound_auth_type: 'digest', inbound_sip_username: 'allow-user', inbound_sip_password: 'allow-secret', media_encryption: 'allow' });
    expect(trunk.status, trunk.text).toBe(201);
    for (const secure of [true, false]) {
      const phone = await startBaresip({
        account: { user: 'baresip', domain: '127.0.0.1' },
        ...(secure ? { tls: { certificateFile: join(dir, 'both.pem'), caFile: join(dir, 'cert.pem') }, mediaenc: 'srtp-mand' } : {}),
        audio: toneWav(2, 440, 8000),
        maxSeconds: 15,
        quitAfterCall: true,
      });
      try {
        await phone.ready;
        const host = secure ? `127.0.0.1:${phone.sipPort + 1};transport=tls` : `127.0.0.1:${phone.sipPort}`;
        expect((await d.api('PATCH', `/v1/sip-trunks/${trunk.body.id}`, { outbound_host: host })).status).toBe(200);
        const t = (await outboundTrunkFromStore(d.daemon.store, orgId, trunk.body.id))!;
        const result = await d.daemon.sip!.ua.dial({ trunk: t, to: 'baresip', callerId: '+15559990000' });
        expect(result.ok, JSON.stringify(result)).toBe(true);
        if (!result.ok) return;
        const seen = attach(result.call);
        expect(result.call.media.srtp !== undefined, `secure=${secure}`).toBe(secure);
        await seen.ended;
        expect(strongest(seen.decoded, 440), `440 Hz at callbridge, secure=${secure}`).toBeGreaterThan(2000);
      } finally {
        phone.kill();
        await phone.result;
      }
    }
  }, 60_000);

  it('a dial of a require trunk whose outbound_host is not TLS is refused at dial time, naming why', async () => {
    const patch = await d.api('PATCH', `/v1/sip-trunks/${trunkId}`, { outbound_host: '127.0.0.1:5999' });
    expect(patch.status, patch.text).toBe(200);
    const trunk = (await outboundTrunkFromStore(d.daemon.store, orgId, trunkId))!;
    const result = await d.daemon.sip!.ua.dial({ trunk, to: '+15550009999', callerId: '+15559990000' });
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.reason).toBe('srtp_needs_tls');
    expect(result.detail).toMatch(/requires SRTP.*TLS/);
  });
});
