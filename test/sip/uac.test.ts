/**
 * The outbound UAC (src/sip/ua/uac.ts) against a small UAS built on our own real layers
 * (SipTransportLayer on 127.0.0.1 port 0 + TransactionLayer + DialogManager), over UDP and TCP
 * loopback, with T1 = 20 ms so Timer B is 1.28 s. The UAS checks credentials with DigestServer,
 * so what is verified is what went over the wire: the digest uri, CSeq/Call-ID/From tag of the
 * retry, the CANCEL, the ACK of the 2xx, the BYE, the ACK + BYE of a forked 2xx.
 */
import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { DialogManager, type Dialog } from '../../src/sip/dialog/index.ts';
import { challengeHeaderName, DigestServer, parseDigestCredentials } from '../../src/sip/digest/index.ts';
import { SipTransportError } from '../../src/sip/message/errors.ts';
import { createResponse, generateTag, type SipRequest } from '../../src/sip/message/index.ts';
import { TransactionLayer, type ServerTransaction, type TransactionTimerConfig } from '../../src/sip/transaction/index.ts';
import { SipTransportLayer, type Inbound, type TransportProtocol } from '../../src/sip/transport/index.ts';
import { inviteFailureReason, resolveDestination, sendInvite, type SendInviteOptions, type UacLogger } from '../../src/sip/ua/uac.ts';

const TIMERS: TransactionTimerConfig = { t1: 20, t2: 80, t4: 100, timerD: 100 };
const USER = 'trunk-user';
const PASSWORD = 'trunk-secret-9f3';
const REALM = 'carrier.test';
const OFFER = 'v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n';
const EARLY = 'v=0\r\no=- 7 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 41000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendonly\r\n';
const ANSWER = 'v=0\r\no=- 7 2 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 41000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function until(cond: () => boolean, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await delay(5);
  }
}

interface Stack {
  transport: SipTransportLayer;
  layer: TransactionLayer;
  dialogs: DialogManager;
  port(p: TransportProtocol): number;
}

async function stack(): Promise<Stack> {
  const transport = new SipTransportLayer({
    listen: [
      { protocol: 'udp', address: '127.0.0.1', port: 0 },
      { protocol: 'tcp', address: '127.0.0.1', port: 0 },
    ],
  });
  await transport.start();
  const layer = new TransactionLayer({ transport, timers: TIMERS });
  const dialogs = new DialogManager({ layer });
  cleanups.push(async () => {
    dialogs.close();
    layer.close();
    await transport.close();
  });
  const port = (p: TransportProtocol): number => {
    const e = transport.endpoints.find((x) => x.protocol === p);
    if (!e) throw new Error(`no ${p} listener`);
    return e.port;
  };
  return { transport, layer, dialogs, port };
}

type Script = (tx: ServerTransaction, inbound: Inbound<SipRequest>, n: number) => void | Promise<void>;

interface Uas extends Stack {
  /** Every request the UAS transport received (retransmissions included), in order. */
  received: SipRequest[];
  invites(): SipRequest[];
  methods(): string[];
  dialogsMade: Dialog[];
  server: DigestServer;
  script: Script;
  contact(p: TransportProtocol): string;
  uri(p: TransportProtocol, user?: string): string;
}

async function startUas(server = new DigestServer({ realm: REALM })): Promise<Uas> {
  const s = await stack();
  const received: SipRequest[] = [];
  s.transport.on('request', (inbound) => received.push(inbound.message));
  const uas: Uas = {
    ...s,
    received,
    invites: () => received.filter((r, i, all) => r.method === 'INVITE' && all.findIndex((x) => x.method === 'INVITE' && x.topVia?.branch === r.topVia?.branch) === i),
    methods: () => received.map((r) => r.method),
    dialogsMade: [],
    server,
    script: () => {},
    contact: (p) => `<sip:uas@127.0.0.1:${s.port(p)}${p === 'udp' ? '' : `;transport=${p}`}>`,
    uri: (p, user = '+15551234567') => `sip:${user}@127.0.0.1:${s.port(p)}${p === 'udp' ? '' : `;transport=${p}`}`,
  };
  let n = 0;
  s.dialogs.on('new-request', (tx, inbound) => {
    if (inbound.message.method !== 'INVITE') {
      tx.respond(createResponse(inbound.message, 405, undefined, { toTag: generateTag() }));
      return;
    }
    void uas.script(tx, inbound, n++);
  });
  return uas;
}

function challenge(uas: Uas, tx: ServerTransaction, status: 401 | 407, stale = false): void {
  const headers = uas.server.challenge({ stale }).map((v): [string, string] => [challengeHeaderName(status), v]);
  tx.respond(createResponse(tx.request, status, undefined, { toTag: generateTag(), headers }));
}

function verify(uas: Uas, req: SipRequest, header: 'Authorization' | 'Proxy-Authorization') {
  return uas.server.verify({ method: req.method, uri: req.uri.toString(), authorization: req.getAll(header), password: (u) => (u === USER ? PASSWORD : undefined) });
}

/** 180, 183 with SDP, 200 with SDP and Contact, a little apart so UDP keeps them in order. */
async function ringAndAnswer(uas: Uas, tx: ServerTransaction, inbound: Inbound<SipRequest>, protocol: TransportProtocol): Promise<Dialog> {
  const d = uas.dialogs.fromInvite(tx, inbound, { localContact: uas.contact(protocol) });
  uas.dialogsMade.push(d);
  d.provisional(180);
  await delay(10);
  d.provisional(183, { body: EARLY, contentType: 'application/sdp' });
  await delay(10);
  d.answer({ body: ANSWER, contentType: 'application/sdp' });
  return d;
}

/** Records log lines; the test checks no secret ever reaches them. */
function recordingLogger(): UacLogger & { lines: { level: string; obj: object; msg: string }[] } {
  const lines: { level: string; obj: object; msg: string }[] = [];
  return {
    lines,
    debug: (obj, msg) => lines.push({ level: 'debug', obj, msg }),
    info: (obj, msg) => lines.push({ level: 'info', obj, msg }),
    warn: (obj, msg) => lines.push({ level: 'warn', obj, msg }),
  };
}

function inviteOptions(uac: Stack, uas: Uas, protocol: TransportProtocol, extra: Partial<SendInviteOptions> = {}): SendInviteOptions {
  return {
    layer: uac.layer,
    dialogs: uac.dialogs,
    destination: { protocol, address: '127.0.0.1', port: uas.port(protocol) },
    requestUri: uas.uri(protocol),
    from: { user: '+15550001000', host: '127.0.0.1', displayName: 'Agent "Ada"' },
    to: { user: '+15551234567', host: '127.0.0.1' },
    contact: `<sip:callbridge@127.0.0.1:${uac.port(protocol)}${protocol === 'udp' ? '' : `;transport=${protocol}`}>`,
    sdp: OFFER,
    credentials: { username: USER, password: PASSWORD },
    ...extra,
  };
}

describe('sendInvite against a loopback UAS', () => {
  it('UDP: 401, retry with Authorization (verified; same Call-ID and From tag, CSeq+1, new branch), 180, 183 with SDP, 200 with SDP; ACK arrives; BYE via the dialog', async () => {
    const uas = await startUas();
    const uac = await stack();
    let uasDialog: Dialog | undefined;
    uas.script = async (tx, inbound, n) => {
      if (n === 0) return challenge(uas, tx, 401);
      const v = verify(uas, inbound.message, 'Authorization');
      if (!v.ok) return tx.respond(createResponse(inbound.message, 403, undefined, { toTag: generateTag() }));
      uasDialog = await ringAndAnswer(uas, tx, inbound, 'udp');
    };
    const provisionals: [number, string, string | undefined][] = [];
    const logger = recordingLogger();
    const outcome = await sendInvite(inviteOptions(uac, uas, 'udp', { logger, onProvisional: (s, r, sdp) => provisionals.push([s, r, sdp]) }));

    expect(outcome.ok, JSON.stringify(outcome.ok ? {} : { reason: outcome.reason, detail: outcome.detail })).toBe(true);
    if (!outcome.ok) return;
    expect(outcome.attempts).toBe(2);
    expect(outcome.response.status).toBe(200);
    expect(outcome.sdp).toBe(ANSWER);
    expect(outcome.dialog.state).toBe('confirmed');
    expect(outcome.dialog.remoteTarget.toString()).toBe(`sip:uas@127.0.0.1:${uas.port('udp')}`);
    expect(provisionals).toEqual([
      [180, 'Ringing', undefined],
      [183, 'Session Progress', EARLY],
    ]);

    const [first, second] = uas.invites();
    expect(uas.invites()).toHaveLength(2);
    expect(first!.uri.toString()).toBe(uas.uri('udp'));
    expect(first!.has('Authorization')).toBe(false);
    expect(first!.cseq.seq).toBe(1);
    expect(second!.cseq.seq).toBe(2);
    expect(second!.callId).toBe(first!.callId);
    expect(second!.from.tag).toBe(first!.from.tag);
    expect(second!.from.displayName).toBe('Agent "Ada"');
    expect(second!.to.tag).toBeUndefined();
    expect(second!.topVia!.branch).not.toBe(first!.topVia!.branch);
    expect(second!.get('Allow')).toContain('INVITE');
    expect(second!.supported).toEqual(['timer', '100rel']);
    expect(second!.contacts[0]!.uri.toString()).toBe(`sip:callbridge@127.0.0.1:${uac.port('udp')}`);
    expect(second!.body.toString()).toBe(OFFER);
    expect(second!.contentType?.mime).toBe('application/sdp');
    const cred = parseDigestCredentials(second!.get('Authorization')!);
    expect(cred.ok && cred.value.uri).toBe(uas.uri('udp'));

    // The ACK of the 401 (the transaction's) and of the 200 (the dialog's, CSeq 2, tags).
    await until(() => uas.received.filter((r) => r.method === 'ACK').length >= 2);
    const ack2xx = uas.received.find((r) => r.method === 'ACK' && r.to.tag === outcome.dialog.remoteTag)!;
    expect(ack2xx.cseq.seq).toBe(2);
    expect(ack2xx.uri.toString()).toBe(`sip:uas@127.0.0.1:${uas.port('udp')}`);
    await until(() => uasDialog !== undefined && !uasDialog.awaitingAck);

    const bye = outcome.dialog.bye()!;
    expect((await bye.finalResponse).status).toBe(200);
    await until(() => uasDialog!.state === 'terminated');
    expect(uas.received.find((r) => r.method === 'BYE')!.cseq.seq).toBe(3);
    expect(JSON.stringify(logger.lines)).not.toContain(PASSWORD);
  });

  it('TCP: 407, Proxy-Authorization whose uri is the Request-URI including ;transport=tcp, then 200', async () => {
    const uas = await startUas();
    const uac = await stack();
    uas.script = async (tx, inbound, n) => {
      if (n === 0) return challenge(uas, tx, 407);
      const v = verify(uas, inbound.message, 'Proxy-Authorization');
      if (!v.ok) return tx.respond(createResponse(inbound.message, 403, undefined, { toTag: generateTag() }));
      await ringAndAnswer(uas, tx, inbound, 'tcp');
    };
    // A listener that throws is logged, never breaks the call.
    const logger = recordingLogger();
    const outcome = await sendInvite(
      inviteOptions(uac, uas, 'tcp', {
        logger,
        onProvisional: () => {
          throw new Error('listener bug');
        },
      }),
    );
    expect(outcome.ok).toBe(true);
    const second = uas.invites()[1]!;
    expect(second.uri.toString()).toBe(uas.uri('tcp'));
    expect(uas.uri('tcp')).toMatch(/;transport=tcp$/);
    expect(second.has('Authorization')).toBe(false);
    const cred = parseDigestCredentials(second.get('Proxy-Authorization')!);
    expect(cred.ok).toBe(true);
    if (!cred.ok) return;
    expect(cred.value.uri).toBe(second.uri.toString());
    expect(cred.value.username).toBe(USER);
    expect(cred.value.realm).toBe(REALM);
    expect(logger.lines.some((l) => l.level === 'warn' && l.msg.includes('onProvisional threw'))).toBe(true);
    if (outcome.ok) await outcome.dialog.bye()!.finalResponse;
  });

  it('wrong password: challenged again without stale -> auth_failed after exactly one retry (no loop), nothing secret logged', async () => {
    const uas = await startUas();
    const uac = await stack();
    uas.script = (tx, inbound, n) => {
      if (n === 0) return challenge(uas, tx, 401);
      const v = verify(uas, inbound.message, 'Authorization');
      expect(v.ok).toBe(false);
      challenge(uas, tx, 401); // a server that keeps challenging
    };
    const logger = recordingLogger();
    const outcome = await sendInvite(inviteOptions(uac, uas, 'udp', { logger, credentials: { username: USER, password: 'not-the-password' } }));
    expect(outcome).toMatchObject({ ok: false, reason: 'auth_failed', status: 401, reasonPhrase: 'Unauthorized', attempts: 2 });
    await delay(150);
    expect(uas.invites()).toHaveLength(2);
    const warn = logger.lines.filter((l) => l.level === 'warn');
    expect(warn).toHaveLength(1);
    expect(warn[0]!.msg).toMatch(/auth_failed.*credentials refused/);
    expect(JSON.stringify(logger.lines)).not.toContain('not-the-password');
  });

  it('wrong password answered 403 -> auth_failed', async () => {
    const uas = await startUas();
    const uac = await stack();
    uas.script = (tx, inbound, n) => {
      if (n === 0) return challenge(uas, tx, 407);
      const v = verify(uas, inbound.message, 'Proxy-Authorization');
      tx.respond(createResponse(inbound.message, v.ok ? 200 : 403, undefined, { toTag: generateTag() }));
    };
    const outcome = await sendInvite(inviteOptions(uac, uas, 'tcp', { credentials: { username: USER, password: 'wrong' } }));
    expect(outcome).toMatchObject({ ok: false, reason: 'auth_failed', status: 403, attempts: 2 });
  });

  it('a stale=true re-challenge is answered once more with the new nonce', async () => {
    let now = 1_000_000;
    const uas = await startUas(new DigestServer({ realm: REALM, nonceLifetimeMs: 1000, clock: { now: () => now } }));
    const uac = await stack();
    uas.script = async (tx, inbound, n) => {
      if (n === 0) return challenge(uas, tx, 401);
      if (n === 1) now += 5000; // the nonce expired meanwhile
      const v = verify(uas, inbound.message, 'Authorization');
      if (!v.ok) return v.stale ? challenge(uas, tx, 401, true) : tx.respond(createResponse(inbound.message, 403, undefined, { toTag: generateTag() }));
      await ringAndAnswer(uas, tx, inbound, 'udp');
    };
    const outcome = await sendInvite(inviteOptions(uac, uas, 'udp'));
    expect(outcome.ok).toBe(true);
    expect(uas.invites().map((r) => r.cseq.seq)).toEqual([1, 2, 3]);
    if (outcome.ok) await outcome.dialog.bye()!.finalResponse;
  });

  it('a challenge without configured credentials -> auth_failed after one INVITE', async () => {
    const uas = await startUas();
    const uac = await stack();
    uas.script = (tx) => challenge(uas, tx, 401);
    const outcome = await sendInvite(inviteOptions(uac, uas, 'udp', { credentials: undefined }));
    expect(outcome).toMatchObject({ ok: false, reason: 'auth_failed', status: 401, attempts: 1 });
    expect(outcome.ok ? '' : outcome.detail).toMatch(/no outbound credentials/);
  });

  it('486 -> busy, with status and reason phrase', async () => {
    const uas = await startUas();
    const uac = await stack();
    uas.script = (tx) => tx.respond(createResponse(tx.request, 486, 'Busy Here', { toTag: generateTag() }));
    const outcome = await sendInvite(inviteOptions(uac, uas, 'udp'));
    expect(outcome).toMatchObject({ ok: false, reason: 'busy', status: 486, reasonPhrase: 'Busy Here', attempts: 1 });
    expect(outcome.ok ? undefined : outcome.response?.status).toBe(486);
  });

  it('ring timeout: CANCEL sent, 487 -> no_answer', async () => {
    const uas = await startUas();
    const uac = await stack();
    uas.script = (tx, inbound) => {
      uas.dialogs.fromInvite(tx, inbound, { localContact: uas.contact('udp') }).provisional(180); // rings forever
    };
    const started = Date.now();
    const outcome = await sendInvite(inviteOptions(uac, uas, 'udp', { credentials: undefined, ringTimeoutMs: 200 }));
    expect(outcome).toMatchObject({ ok: false, reason: 'no_answer', status: 487 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    const cancel = uas.received.find((r) => r.method === 'CANCEL')!;
    expect(cancel).toBeDefined();
    expect(cancel.topVia!.branch).toBe(uas.invites()[0]!.topVia!.branch);
    expect(cancel.uri.toString()).toBe(uas.uri('udp'));
    await until(() => uas.methods().includes('ACK')); // the ACK of the 487
  });

  it('abort before the answer: CANCEL, outcome cancelled at once', async () => {
    const uas = await startUas();
    const uac = await stack();
    uas.script = (tx, inbound) => {
      uas.dialogs.fromInvite(tx, inbound, { localContact: uas.contact('tcp') }).provisional(180);
    };
    const ac = new AbortController();
    const outcome = await sendInvite(inviteOptions(uac, uas, 'tcp', { credentials: undefined, signal: ac.signal, onProvisional: () => ac.abort() }));
    expect(outcome).toMatchObject({ ok: false, reason: 'cancelled', status: 487 });
    await until(() => uas.methods().includes('CANCEL'));
    await until(() => uas.methods().includes('ACK')); // 487 answered by the UAS dialog, ACKed by our transaction
    expect(uac.dialogs.size).toBe(0);
  });

  it('an already aborted signal sends nothing', async () => {
    const uas = await startUas();
    const uac = await stack();
    const outcome = await sendInvite(inviteOptions(uac, uas, 'udp', { signal: AbortSignal.abort() }));
    expect(outcome).toMatchObject({ ok: false, reason: 'cancelled', attempts: 0 });
    await delay(50);
    expect(uas.received).toHaveLength(0);
  });

  it('a 2xx that races the CANCEL is ACKed and hung up with BYE', async () => {
    const uas = await startUas();
    const uac = await stack();
    let uasDialog: Dialog | undefined;
    uas.script = (tx, inbound) => {
      const toTag = generateTag();
      tx.respond(createResponse(tx.request, 180, undefined, { toTag }));
      tx.on('cancel', () => {
        // The callee picked up as the CANCEL arrived: 200 to the INVITE instead of 487.
        uasDialog = uas.dialogs.fromInvite(tx, inbound, { localTag: toTag, localContact: uas.contact('udp') });
        uasDialog.answer({ body: ANSWER, contentType: 'application/sdp' });
      });
    };
    const ac = new AbortController();
    const outcome = await sendInvite(inviteOptions(uac, uas, 'udp', { credentials: undefined, signal: ac.signal, onProvisional: () => ac.abort() }));
    expect(outcome).toMatchObject({ ok: false, reason: 'cancelled' });
    await until(() => uasDialog?.state === 'terminated');
    expect(uas.methods()).toEqual(expect.arrayContaining(['INVITE', 'CANCEL', 'ACK', 'BYE']));
    const ack = uas.received.find((r) => r.method === 'ACK')!;
    expect(ack.cseq.seq).toBe(1);
  });

  it('forking: the first 2xx makes the dialog; a 2xx with another To tag is ACKed and BYEd (RFC 3261 13.2.2.4)', async () => {
    const uas = await startUas();
    const uac = await stack();
    const ends: Record<string, string> = {};
    const acked: string[] = [];
    uas.script = (tx, inbound) => {
      for (const localTag of ['fork-a', 'fork-b']) {
        const d = uas.dialogs.fromInvite(tx, inbound, { localTag, localContact: uas.contact('udp') });
        d.on('ack', () => acked.push(localTag));
        d.on('terminated', (why) => (ends[localTag] = why));
        uas.dialogsMade.push(d);
      }
      uas.dialogsMade[0]!.answer({ body: ANSWER, contentType: 'application/sdp' });
      uas.dialogsMade[1]!.answer({ body: ANSWER, contentType: 'application/sdp' });
    };
    const outcome = await sendInvite(inviteOptions(uac, uas, 'udp', { credentials: undefined }));
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) return;
    expect(outcome.dialog.remoteTag).toBe('fork-a');
    await until(() => ends['fork-b'] === 'bye-received' && acked.includes('fork-a') && acked.includes('fork-b'));
    expect(uas.dialogsMade[0]!.state).toBe('confirmed');
    expect(outcome.dialog.state).toBe('confirmed');
    expect(uac.dialogs.size).toBe(1);
    await outcome.dialog.bye()!.finalResponse;
    expect(ends['fork-a']).toBe('bye-received');
  });

  it('nothing listening on TCP -> unreachable (local 503)', async () => {
    const uac = await stack();
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    const port = (srv.address() as { port: number }).port;
    await new Promise<void>((r) => srv.close(() => r()));
    const outcome = await sendInvite({
      layer: uac.layer,
      dialogs: uac.dialogs,
      destination: { protocol: 'tcp', address: '127.0.0.1', port },
      requestUri: `sip:+15551234567@127.0.0.1:${port};transport=tcp`,
      from: { user: 'cb', host: '127.0.0.1' },
      to: { user: '+15551234567', host: '127.0.0.1' },
      contact: `<sip:callbridge@127.0.0.1:${uac.port('tcp')};transport=tcp>`,
      sdp: OFFER,
    });
    expect(outcome).toMatchObject({ ok: false, reason: 'unreachable', status: 503, response: undefined });
  });

  it('a UDP peer that never answers -> timeout (Timer B, local 408)', async () => {
    const uac = await stack();
    const sock = createSocket('udp4');
    let got = 0;
    sock.on('message', () => got++);
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
    cleanups.push(() => new Promise<void>((r) => sock.close(() => r())));
    const port = sock.address().port;
    const outcome = await sendInvite({
      layer: uac.layer,
      dialogs: uac.dialogs,
      destination: { protocol: 'udp', address: '127.0.0.1', port },
      requestUri: `sip:+15551234567@127.0.0.1:${port}`,
      from: { user: 'cb', host: '127.0.0.1' },
      to: { user: '+15551234567', host: '127.0.0.1' },
      contact: `<sip:callbridge@127.0.0.1:${uac.port('udp')}>`,
      sdp: OFFER,
    });
    expect(outcome).toMatchObject({ ok: false, reason: 'timeout', status: 408 });
    expect(got).toBeGreaterThan(1); // Timer A retransmissions
  });

  it('refuses a Request-URI that would not go out exactly as given', async () => {
    const uac = await stack();
    const base = { layer: uac.layer, dialogs: uac.dialogs, destination: { protocol: 'udp' as const, address: '127.0.0.1', port: 9 }, from: { user: 'a', host: '127.0.0.1' }, to: { user: 'b', host: '127.0.0.1' }, contact: '<sip:a@127.0.0.1>', sdp: OFFER };
    await expect(sendInvite({ ...base, requestUri: 'sip:%2b1555@127.0.0.1' })).rejects.toThrow(TypeError);
    await expect(sendInvite({ ...base, requestUri: 'not a uri' })).rejects.toThrow(TypeError);
    await expect(sendInvite({ ...base, requestUri: 'sip:b@127.0.0.1', from: { user: 'a', host: 'h;x=y' } })).rejects.toThrow(TypeError);
    await expect(sendInvite({ ...base, requestUri: 'sip:b@127.0.0.1', ringTimeoutMs: 0 })).rejects.toThrow(RangeError);
  });
});

describe('inviteFailureReason', () => {
  it('maps statuses to the stable reasons', () => {
    const table: [number, object, string][] = [
      [486, {}, 'busy'],
      [600, {}, 'busy'],
      [408, {}, 'no_answer'],
      [480, {}, 'no_answer'],
      [487, { ringTimedOut: true }, 'no_answer'],
      [487, {}, 'rejected'],
      [401, {}, 'auth_failed'],
      [407, {}, 'auth_failed'],
      [403, { credentialsSent: true }, 'auth_failed'],
      [403, {}, 'rejected'],
      [404, {}, 'not_found'],
      [484, {}, 'not_found'],
      [604, {}, 'not_found'],
      [302, {}, 'rejected'],
      [488, {}, 'rejected'],
      [503, {}, 'rejected'],
      [603, {}, 'rejected'],
      [408, { local: true }, 'timeout'],
      [503, { local: true }, 'unreachable'],
      [487, { local: true, ringTimedOut: true }, 'no_answer'],
      [487, { local: true }, 'cancelled'],
    ];
    for (const [status, ctx, reason] of table) expect([status, ctx, inviteFailureReason(status, ctx)]).toEqual([status, ctx, reason]);
  });
});

describe('resolveDestination', () => {
  it('takes IP literals as they are, resolves names, defaults the port per protocol', async () => {
    const lookup = async (h: string) => {
      if (h === 'carrier.test') return { address: '203.0.113.5' };
      throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${h}`), { code: 'ENOTFOUND' });
    };
    expect(await resolveDestination('198.51.100.7', 5080, 'tcp', { lookup })).toEqual({ protocol: 'tcp', address: '198.51.100.7', port: 5080 });
    expect(await resolveDestination('[2001:db8::1]', undefined, 'udp', { lookup })).toEqual({ protocol: 'udp', address: '2001:db8::1', port: 5060 });
    expect(await resolveDestination('carrier.test', undefined, 'tls', { lookup })).toEqual({ protocol: 'tls', address: '203.0.113.5', port: 5061 });
    const err = await resolveDestination('nowhere.test', 5060, 'udp', { lookup }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SipTransportError);
    expect((err as SipTransportError).code).toBe('SIP_TRANSPORT_RESOLVE');
  });

  it('resolves localhost with the system resolver', async () => {
    const e = await resolveDestination('localhost', 5060, 'udp');
    expect(['127.0.0.1', '::1']).toContain(e.address);
  });
});

describe('sendInvite failover between targets (RFC 3263 4.3)', () => {
  async function silentUdp(): Promise<{ port: number; invites: string[] }> {
    const s = createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    const out = { port: s.address().port, invites: [] as string[] };
    s.on('message', (m) => {
      const text = m.toString('utf8');
      if (text.startsWith('INVITE ')) out.invites.push(text);
    });
    cleanups.push(() => new Promise<void>((r) => s.close(() => r())));
    return out;
  }

  it('a silent UDP target, then a TCP target that challenges: answered there, digest for the new server, CSeq + 1 per attempt, its own Contact', async () => {
    const silent = await silentUdp();
    const uas = await startUas();
    const uac = await stack();
    uas.script = async (tx, inbound, n) => {
      if (n === 0) return challenge(uas, tx, 401);
      const v = verify(uas, inbound.message, 'Authorization');
      if (!v.ok) return tx.respond(createResponse(inbound.message, 403, undefined, { toTag: generateTag() }));
      await ringAndAnswer(uas, tx, inbound, 'tcp');
    };
    const told: [string, number][] = [];
    const tcpContact = `<sip:callbridge@127.0.0.1:${uac.port('tcp')};transport=tcp>`;
    const outcome = await sendInvite(
      inviteOptions(uac, uas, 'udp', {
        destination: { protocol: 'udp', address: '127.0.0.1', port: silent.port },
        requestUri: 'sip:+15551234567@carrier.test',
        failover: { targets: [{ destination: { protocol: 'tcp', address: '127.0.0.1', port: uas.port('tcp') }, contact: tcpContact }], timeoutMs: 200, onTarget: (e, r) => told.push([r, e.port]) },
      }),
    );
    expect(outcome.ok, JSON.stringify(outcome.ok ? {} : { reason: outcome.reason, detail: outcome.detail })).toBe(true);
    expect(outcome.targetsTried).toBe(2);
    expect(outcome.destination).toEqual({ protocol: 'tcp', address: '127.0.0.1', port: uas.port('tcp') });
    expect(silent.invites.length).toBeGreaterThanOrEqual(1);
    const [first, second] = uas.invites();
    expect(uas.invites()).toHaveLength(2);
    // CSeq 1 went to the silent target; the failover INVITE is CSeq 2, its authenticated retry 3.
    expect([first!.cseq.seq, second!.cseq.seq]).toEqual([2, 3]);
    expect(first!.callId).toBe(/Call-ID: (\S+)/i.exec(silent.invites[0]!)?.[1]);
    expect(first!.has('Authorization')).toBe(false);
    expect(first!.get('Contact')).toBe(tcpContact);
    expect(told[0]).toEqual(['failed', silent.port]);
    expect(told.slice(1).every(([r, port]) => r === 'answered' && port === uas.port('tcp'))).toBe(true);
    if (outcome.ok) outcome.dialog.bye();
  });

  it('aborted while a silent target is awaited: cancelled, the next target gets nothing', async () => {
    const silent = await silentUdp();
    const uas = await startUas();
    const uac = await stack();
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 50);
    const outcome = await sendInvite(
      inviteOptions(uac, uas, 'udp', {
        destination: { protocol: 'udp', address: '127.0.0.1', port: silent.port },
        signal: ac.signal,
        failover: { targets: [{ destination: { protocol: 'udp', address: '127.0.0.1', port: uas.port('udp') } }], timeoutMs: 5000 },
      }),
    );
    expect(outcome).toMatchObject({ ok: false, reason: 'cancelled', targetsTried: 1 });
    await delay(100);
    expect(uas.invites()).toHaveLength(0);
  });

  it('every target silent: the last one runs to Timer B (timeout, 408), each reported failed', async () => {
    const a = await silentUdp();
    const b = await silentUdp();
    const uas = await startUas();
    const uac = await stack();
    const told: [string, number][] = [];
    const outcome = await sendInvite(
      inviteOptions(uac, uas, 'udp', {
        destination: { protocol: 'udp', address: '127.0.0.1', port: a.port },
        failover: { targets: [{ destination: { protocol: 'udp', address: '127.0.0.1', port: b.port } }], timeoutMs: 200, onTarget: (e, r) => told.push([r, e.port]) },
      }),
    );
    expect(outcome).toMatchObject({ ok: false, reason: 'timeout', status: 408, targetsTried: 2 });
    expect(a.invites.length).toBeGreaterThanOrEqual(1);
    expect(b.invites.length).toBeGreaterThanOrEqual(1);
    expect(told).toEqual([
      ['failed', a.port],
      ['failed', b.port],
    ]);
  });
});
