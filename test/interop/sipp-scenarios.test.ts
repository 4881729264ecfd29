/**
 * Scenario self-check: every SIPp scenario in test/interop/scenarios runs against a SIPp
 * counterpart that plays callbridge's role (fake-callbridge-*.xml), on loopback. This proves the
 * scenario files are valid and do what README.md says (the flows, the RFC 3261 details such as
 * ACK and CANCEL branches, the checks that must fail when they should). It does NOT test
 * callbridge: the interop tests that point these scenarios at callbridge come with its UAS/UAC.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  parseMessageLog,
  parseSipMessage,
  runSipp,
  sippAvailable,
  startRtpProbe,
  startSipp,
  verifyDigest,
  type RtpProbe,
  type SippOptions,
  type SippResult,
} from './sipp.ts';
import { baresipAvailable, readWavPcm16, rmsDbfs, runBaresip, toneWav } from './baresip/baresip.ts';

const sipp = sippAvailable();
const NUMBER = '+15550001000';
const CALLER = '+15559990000';
const USER = 'trunk-user';
const PASSWORD = 'trunk-secret';

const probes: RtpProbe[] = [];
afterEach(async () => {
  await Promise.all(probes.splice(0).map((p) => p.close()));
});

async function echoProbe(): Promise<RtpProbe> {
  const p = await startRtpProbe({ echo: true });
  probes.push(p);
  return p;
}

/** Starts the UAS, waits until it listens, runs the UAC at it; both results. */
async function pair(uas: SippOptions, uac: Omit<SippOptions, 'remote'>): Promise<{ uas: SippResult; uac: SippResult }> {
  const server = await startSipp({ timeoutMs: 15_000, ...uas });
  try {
    await server.ready;
    const client = await runSipp({ timeoutMs: 15_000, ...uac, remote: `127.0.0.1:${server.localPort}` });
    if (client.code !== 0) server.kill();
    return { uac: client, uas: await server.result };
  } catch (err) {
    server.kill();
    throw err;
  }
}

function expectOk(r: SippResult): void {
  expect(r.code, r.describe()).toBe(0);
  expect(r.killed, r.describe()).toBe(false);
  expect(r.successfulCalls, r.describe()).toBe(1);
  expect(r.failedCalls, r.describe()).toBe(0);
}

function invites(r: SippResult) {
  return r.requests('INVITE');
}

const title = sipp.ok
  ? `scenario self-check (${sipp.version}): SIPp scenario files vs SIPp fakes of callbridge, not callbridge`
  : `scenario self-check: skipped, ${sipp.reason}`;

describe.skipIf(sipp.skip)(title, () => {
  it('inbound-digest.xml vs fake-callbridge-digest.xml: 401, ACK on the INVITE branch, authenticated INVITE, 200, RTP both ways, BYE', async () => {
    const media = await echoProbe();
    const { uac, uas } = await pair(
      { scenario: 'fake-callbridge-digest', keys: { user: USER, password: PASSWORD, rtp_port: media.port } },
      { scenario: 'inbound-digest', service: NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD }, durationMs: 1000 },
    );
    expectOk(uac);
    expectOk(uas);
    expect(uac.statuses('received', 'INVITE').filter((s) => s >= 200)).toEqual([401, 200]);
    expect(uac.statuses('received', 'BYE')).toEqual([200]);

    const [first, second] = invites(uac);
    expect(first?.header('Authorization')).toBeUndefined();
    // RFC 3261 17.1.1.3: the ACK of a non-2xx response carries the branch of the INVITE.
    const acks = uac.requests('ACK');
    expect(acks[0]?.branch()).toBe(first?.branch());
    expect(acks[1]?.branch()).not.toBe(second?.branch());
    // The credentials: right password, digest uri exactly the Request-URI.
    const check = verifyDigest(second!, PASSWORD);
    expect(check, JSON.stringify(check)).toMatchObject({ ok: true, username: USER, uriIsRequestUri: true });
    expect(second?.requestUri).toMatch(new RegExp(`^sip:\\${NUMBER}@127\\.0\\.0\\.1:\\d+$`));
    expect(uas.logs).toMatch(/authorization ok=true .* uri_ok=true nonce_ok=true/);

    // RTP: SIPp streamed PCMU to the answer's port, and got it echoed back.
    expect(media.received).toBeGreaterThanOrEqual(25);
    expect([...media.payloadTypes]).toEqual([0]);
    expect(media.echoed).toBe(media.received);
    expect(media.lastSender?.port).toBe(Number(/m=audio (\d+)/.exec(first!.body)?.[1]));
  });

  it('inbound-digest.xml vs fake-callbridge-digest.xml over TCP (-t t1): the same flow on a stream transport', async () => {
    const media = await echoProbe();
    const { uac, uas } = await pair(
      { scenario: 'fake-callbridge-digest', transport: 'tcp', keys: { user: USER, password: PASSWORD, rtp_port: media.port } },
      { scenario: 'inbound-digest', transport: 'tcp', service: NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD }, durationMs: 300 },
    );
    expectOk(uac);
    expectOk(uas);
    expect(uac.messages.every((m) => m.transport === 'TCP')).toBe(true);
    expect(invites(uac)[0]?.header('Via')).toMatch(/^SIP\/2\.0\/TCP /);
    expect(uac.statuses('received', 'INVITE').filter((s) => s >= 200)).toEqual([401, 200]);
    expect(media.received).toBeGreaterThanOrEqual(5);
  });

  it('inbound-acl.xml vs fake-callbridge-acl.xml: no challenge, 200, RTP both ways, BYE', async () => {
    const media = await echoProbe();
    const { uac, uas } = await pair(
      { scenario: 'fake-callbridge-acl', keys: { rtp_port: media.port } },
      { scenario: 'inbound-acl', service: NUMBER, keys: { caller: CALLER }, durationMs: 600 },
    );
    expectOk(uac);
    expectOk(uas);
    expect(uac.statuses('received', 'INVITE')).toEqual([100, 180, 200]);
    expect(invites(uac)).toHaveLength(1);
    expect(invites(uac)[0]?.header('Authorization')).toBeUndefined();
    expect(media.received).toBeGreaterThanOrEqual(15);
    expect(media.echoed).toBe(media.received);
  });

  it('inbound-acl.xml fails (exit 1) when the far end challenges: an ACL trunk must not', async () => {
    const media = await echoProbe();
    const { uac } = await pair(
      { scenario: 'fake-callbridge-digest', keys: { user: USER, password: PASSWORD, rtp_port: media.port } },
      { scenario: 'inbound-acl', service: NUMBER, keys: { caller: CALLER }, durationMs: 0 },
    );
    expect(uac.code, uac.describe()).toBe(1);
    expect(uac.errors).toMatch(/401/);
  });

  it('wrong-password.xml vs fake-callbridge-digest.xml: 401, INVITE with credentials that do not verify, 403, ACK', async () => {
    const { uac, uas } = await pair(
      { scenario: 'fake-callbridge-digest', keys: { user: USER, password: PASSWORD, rtp_port: 9 } },
      { scenario: 'wrong-password', service: NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: 'not-the-password' } },
    );
    expectOk(uac);
    expectOk(uas);
    expect(uac.statuses('received', 'INVITE').filter((s) => s >= 200)).toEqual([401, 403]);
    const [, second] = invites(uac);
    expect(verifyDigest(second!, PASSWORD)).toMatchObject({ ok: false, uriIsRequestUri: true });
    expect(verifyDigest(second!, 'not-the-password').ok).toBe(true);
    const acks = uac.requests('ACK');
    expect(acks.map((a) => a.branch())).toEqual(invites(uac).map((i) => i.branch()));
    expect(uas.logs).toMatch(/authorization ok=false/);
  });

  it('unknown-number.xml vs fake-callbridge-unknown-number.xml (digest trunk): 401, authenticated INVITE, 404, ACK', async () => {
    const { uac, uas } = await pair(
      { scenario: 'fake-callbridge-unknown-number', vars: { challenge: 1 } },
      { scenario: 'unknown-number', service: '+15550009999', keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD } },
    );
    expectOk(uac);
    expectOk(uas);
    expect(uac.statuses('received', 'INVITE').filter((s) => s >= 200)).toEqual([401, 404]);
    expect(verifyDigest(invites(uac)[1]!, PASSWORD).ok).toBe(true);
    expect(uac.requests('ACK').map((a) => a.branch())).toEqual(invites(uac).map((i) => i.branch()));
    expect(uas.logs).toMatch(/challenged: nonce_ok=true/);
  });

  it('unknown-number.xml vs fake-callbridge-unknown-number.xml (ACL trunk): 404 directly, ACK', async () => {
    const { uac, uas } = await pair({ scenario: 'fake-callbridge-unknown-number' }, { scenario: 'unknown-number', service: '+15550009999', keys: { caller: CALLER } });
    expectOk(uac);
    expectOk(uas);
    expect(uac.statuses('received', 'INVITE')).toEqual([100, 404]);
    expect(uac.requests('ACK')[0]?.branch()).toBe(invites(uac)[0]?.branch());
  });

  it('cancel-before-answer.xml vs fake-callbridge-cancel.xml: 180, CANCEL on the INVITE branch, 200 (CANCEL), 487, ACK', async () => {
    const { uac, uas } = await pair({ scenario: 'fake-callbridge-cancel' }, { scenario: 'cancel-before-answer', service: NUMBER, keys: { caller: CALLER } });
    expectOk(uac);
    expectOk(uas);
    expect(uac.statuses('received', 'INVITE')).toEqual([100, 180, 487]);
    expect(uac.statuses('received', 'CANCEL')).toEqual([200]);
    const [invite] = invites(uac);
    const [cancel] = uac.requests('CANCEL');
    const [ack] = uac.requests('ACK');
    // RFC 3261 9.1: same Request-URI, Call-ID, From, CSeq number and top Via branch as the INVITE.
    expect(cancel?.branch()).toBe(invite?.branch());
    expect(cancel?.requestUri).toBe(invite?.requestUri);
    expect(cancel?.header('Call-ID')).toBe(invite?.header('Call-ID'));
    expect(cancel?.header('From')).toBe(invite?.header('From'));
    expect(cancel?.header('CSeq')).toBe(invite?.header('CSeq')?.replace('INVITE', 'CANCEL'));
    expect(cancel?.header('To')).not.toMatch(/tag=/);
    expect(ack?.branch()).toBe(invite?.branch());
  });

  it('cancel-before-answer.xml vs fake-callbridge-cancel.xml (digest trunk, 487 before the 200 of the CANCEL): either order is taken', async () => {
    const { uac, uas } = await pair(
      { scenario: 'fake-callbridge-cancel', vars: { challenge: 1, reverse: 1 } },
      { scenario: 'cancel-before-answer', service: NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD } },
    );
    expectOk(uac);
    expectOk(uas);
    expect(uac.messages.filter((m) => m.direction === 'received' && (m.status ?? 0) >= 200).map((m) => `${m.status} ${m.cseqMethod}`)).toEqual([
      '401 INVITE',
      '487 INVITE',
      '200 CANCEL',
    ]);
    const second = invites(uac)[1];
    expect(uac.requests('CANCEL')[0]?.branch()).toBe(second?.branch());
    expect(uac.requests('CANCEL')[0]?.header('CSeq')).toBe(second?.header('CSeq')?.replace('INVITE', 'CANCEL'));
  });

  it('reinvite-hold.xml vs fake-callbridge-hold.xml: challenge, 200, re-INVITE sendonly -> 200 recvonly, re-INVITE sendrecv -> 200, BYE', async () => {
    const media = await echoProbe();
    const { uac, uas } = await pair(
      { scenario: 'fake-callbridge-hold', keys: { rtp_port: media.port }, vars: { challenge: 1 } },
      { scenario: 'reinvite-hold', service: NUMBER, keys: { caller: CALLER }, auth: { username: USER, password: PASSWORD }, durationMs: 400 },
    );
    expectOk(uac);
    expectOk(uas);
    expect(uac.statuses('received', 'INVITE').filter((s) => s >= 200)).toEqual([401, 200, 200, 200]);
    const all = invites(uac);
    expect(all.map((i) => /a=(sendrecv|sendonly|recvonly|inactive)/.exec(i.body)?.[1])).toEqual(['sendrecv', 'sendrecv', 'sendonly', 'sendrecv']);
    // re-INVITEs are in the dialog: the Contact of the 200 as Request-URI, the remote tag in To.
    const answer = uac.messages.find((m) => m.status === 200 && m.cseqMethod === 'INVITE');
    const contact = /<([^>]+)>/.exec(answer?.header('Contact') ?? '')?.[1];
    expect(all[2]?.requestUri).toBe(contact);
    expect(all[2]?.header('To')).toMatch(/;tag=/);
    const okBodies = uac.messages.filter((m) => m.status === 200 && m.cseqMethod === 'INVITE').map((m) => m.body);
    expect(okBodies[1]).toMatch(/a=recvonly/);
    expect(media.received).toBeGreaterThanOrEqual(25);
  });

  it('uas-challenge-407.xml vs fake-callbridge-uac-407.xml: 407, ACK, INVITE with Proxy-Authorization (verified), 200, RTP echo, BYE', async () => {
    const media = await startRtpProbe();
    probes.push(media);
    const server = await startSipp({ scenario: 'uas-challenge-407', rtpEcho: true, timeoutMs: 15_000 });
    await server.ready;
    const sending = media.send({ port: server.mediaPort }, 40);
    const uac = await runSipp({
      scenario: 'fake-callbridge-uac-407',
      remote: `127.0.0.1:${server.localPort}`,
      service: NUMBER,
      keys: { caller: CALLER, rtp_port: media.port },
      auth: { username: USER, password: PASSWORD },
      durationMs: 900,
      timeoutMs: 15_000,
    });
    if (uac.code !== 0) server.kill();
    const uas = await server.result;
    await sending;
    expectOk(uac);
    expectOk(uas);
    expect(uas.statuses('sent', 'INVITE')).toEqual([100, 407, 100, 180, 200]);
    const [first, second] = uas.requests('INVITE');
    expect(first?.header('Proxy-Authorization')).toBeUndefined();
    const check = verifyDigest(second!, PASSWORD);
    expect(check, JSON.stringify(check)).toMatchObject({ ok: true, username: USER, realm: 'callbridge-interop', uriIsRequestUri: true });
    expect(verifyDigest(second!, 'wrong').ok).toBe(false);
    expect(uas.logs).toContain(`proxy-authorization username=${USER} uri=sip:${NUMBER}@127.0.0.1:${server.localPort}`);
    // -rtp_echo sent every packet back.
    expect(media.sent).toBe(40);
    expect(media.received).toBeGreaterThanOrEqual(38);
  });

  it('uas-challenge-407.xml fails (403, exit 1) when the digest uri is not the Request-URI', async () => {
    const server = await startSipp({ scenario: 'uas-challenge-407', rtpEcho: true, timeoutMs: 15_000 });
    await server.ready;
    const uac = await runSipp({
      scenario: 'fake-callbridge-uac-407',
      remote: `127.0.0.1:${server.localPort}`,
      service: NUMBER,
      keys: { caller: CALLER, rtp_port: 9 },
      // SIPp's default digest uri: sip:<remote_ip>:<remote_port>, without the user part.
      auth: { username: USER, password: PASSWORD, uri: false },
      timeoutMs: 15_000,
    });
    if (uac.code !== 0 && uac.code !== 1) server.kill();
    const uas = await server.result;
    expect(uac.code, uac.describe()).toBe(1);
    expect(uac.statuses('received', 'INVITE')).toContain(403);
    expect(uas.code, uas.describe()).toBe(1);
    expect(uas.errors).toMatch(/is not the Request-URI/);
  });
});

const bs = baresipAvailable();
const bsTitle =
  sipp.ok && bs.ok
    ? `baresip self-check (${bs.version}): baresip vs the SIPp fake of callbridge, not callbridge`
    : `baresip self-check: skipped, ${!bs.ok ? bs.reason : sipp.reason}`;

describe.skipIf(sipp.skip || bs.skip)(bsTitle, () => {
  it('baresip dials fake-callbridge-digest.xml headless: 401, digest with the Request-URI as uri, 200, RTP both ways recorded, BYE at the end of its WAV', async () => {
    const media = await echoProbe();
    const server = await startSipp({ scenario: 'fake-callbridge-digest', keys: { user: USER, password: PASSWORD, rtp_port: media.port }, timeoutMs: 15_000 });
    await server.ready;
    const phone = await runBaresip({
      dial: `sip:${NUMBER}@127.0.0.1:${server.localPort}`,
      account: { user: USER, password: PASSWORD, domain: `127.0.0.1:${server.localPort}` },
      audio: toneWav(1.5),
      maxSeconds: 10,
    });
    if (phone.code !== 0) server.kill();
    const uas = await server.result;
    expect(phone.code, phone.describe()).toBe(0);
    expect(phone.established, phone.describe()).toBe(true);
    expect(phone.terminated).toMatch(/terminated/);
    expectOk(uas);
    expect(uas.statuses('sent', 'INVITE').filter((s) => s >= 200)).toEqual([401, 200]);
    expect(uas.requests('BYE')).toHaveLength(1);
    const check = verifyDigest(uas.requests('INVITE')[1]!, PASSWORD);
    expect(check, JSON.stringify(check)).toMatchObject({ ok: true, username: USER, uriIsRequestUri: true });
    // Sent: the WAV as PCMU; received: the echo, decoded and recorded by sndfile.
    expect(media.received).toBeGreaterThanOrEqual(60);
    expect([...media.payloadTypes]).toEqual([0]);
    const heard = readWavPcm16(phone.received!);
    expect(heard.rate).toBe(8000);
    expect(heard.samples.length).toBeGreaterThanOrEqual(8000);
    expect(rmsDbfs(heard.samples)).toBeGreaterThan(-25);
  });
});

describe('sipp harness helpers (no SIPp needed)', () => {
  it('verifyDigest matches the RFC 2617 section 3.5 example and rejects a wrong password', () => {
    const msg = parseSipMessage(
      [
        'GET /dir/index.html SIP/2.0',
        'Authorization: Digest username="Mufasa", realm="testrealm@host.com", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093",',
        ' uri="/dir/index.html", qop=auth, nc=00000001, cnonce="0a4f113b", response="6629fae49393a05397450978507c4ef1",',
        ' opaque="5ccc069c403ebaf9f0171e9517f40e41"',
        '',
        '',
      ].join('\r\n'),
    );
    expect(verifyDigest(msg, 'Circle Of Life')).toMatchObject({ ok: true, username: 'Mufasa', uriIsRequestUri: true });
    expect(verifyDigest(msg, 'circle of life')).toMatchObject({ ok: false, reason: 'response does not match the password' });
  });

  it('parseMessageLog reads SIPp -trace_msg blocks and skips the repeated "Unexpected" ones', () => {
    const log = [
      '----------------------------------------------- 2026-01-01 00:00:00.000000',
      'UDP message sent (100 bytes):',
      '',
      'INVITE sip:100@127.0.0.1:5060 SIP/2.0',
      'Via: SIP/2.0/UDP 127.0.0.1:5062;rport;branch=z9hG4bK-1-1-0',
      'CSeq: 1 INVITE',
      'Content-Length: 0',
      '',
      '----------------------------------------------- 2026-01-01 00:00:00.001000',
      'UDP message received [90] bytes :',
      '',
      'SIP/2.0 404 Not Found',
      'Via: SIP/2.0/UDP 127.0.0.1:5062;rport=5062;branch=z9hG4bK-1-1-0;received=127.0.0.1',
      'CSeq: 1 INVITE',
      '',
      '-----------------------------------------------',
      'Unexpected UDP message received:',
      '',
      'SIP/2.0 404 Not Found',
      '',
    ].join('\n');
    const msgs = parseMessageLog(log);
    expect(msgs.map((m) => [m.direction, m.method ?? m.status, m.cseqMethod])).toEqual([
      ['sent', 'INVITE', 'INVITE'],
      ['received', 404, 'INVITE'],
    ]);
    expect(msgs[1]?.branch()).toBe('z9hG4bK-1-1-0');
    expect(msgs[0]?.requestUri).toBe('sip:100@127.0.0.1:5060');
  });
});
