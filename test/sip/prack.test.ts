/**
 * Reliable provisional responses (RFC 3262, 100rel / PRACK), over real loopback sockets:
 *
 * - UAS: callbridge's daemon (sip.t1_ms 20, so 64*T1 is 1.28 s) called by a PBX made of our own
 *   SIP layers: a reliable 180 (Require: 100rel, RSeq), retransmitted until the PRACK; a PRACK
 *   with the wrong RAck gets 481; the 200 waits for the PRACK; no PRACK means 504; Require of an
 *   unknown extension means 420 with Unsupported; Supported: 100rel alone rings unreliably, and a
 *   PRACK in such a call gets 481.
 * - UAC: sendInvite against a UAS on our layers that sends a reliable 183 with SDP after a digest
 *   challenge: the PRACK (RAck, in the early dialog, with credentials for PRACK), a repeated and an
 *   out-of-order RSeq neither PRACKed nor reported, the 200 in the same dialog.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import type { SipCall } from '../../src/sip/ua/call.ts';
import { DialogManager, parseRAck, ReliableProvisionalSender, type Dialog } from '../../src/sip/dialog/index.ts';
import { challengeHeaderName, DigestServer } from '../../src/sip/digest/index.ts';
import { createRequest, createResponse, generateTag, type SipRequest, type SipResponse } from '../../src/sip/message/index.ts';
import { TransactionLayer, type ServerTransaction, type TransactionTimerConfig } from '../../src/sip/transaction/index.ts';
import { SipTransportLayer, type Inbound } from '../../src/sip/transport/index.ts';
import { sendInvite, type SendInviteOptions } from '../../src/sip/ua/uac.ts';
import { delay, until } from '../helpers/until.ts';

const TIMERS: TransactionTimerConfig = { t1: 20, t2: 80, t4: 100, timerD: 100 };
const NUMBER = '+15550002000';
const CALLER = '+15559990000';
const OFFER = 'v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\na=sendrecv\r\n';
const EARLY = 'v=0\r\no=- 7 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 41000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n';

interface Stack {
  transport: SipTransportLayer;
  layer: TransactionLayer;
  dialogs: DialogManager;
  port: number;
  /** Every request this stack's transport received (retransmissions included). */
  received: SipRequest[];
  /** Every response this stack's transport received (retransmissions included). */
  responses: SipResponse[];
  close(): Promise<void>;
}

async function stack(): Promise<Stack> {
  const transport = new SipTransportLayer({ listen: [{ protocol: 'udp', address: '127.0.0.1', port: 0 }] });
  const received: SipRequest[] = [];
  const responses: SipResponse[] = [];
  transport.on('request', (inbound) => received.push(inbound.message));
  transport.on('response', (inbound) => responses.push(inbound.message));
  await transport.start();
  const layer = new TransactionLayer({ transport, timers: TIMERS });
  const dialogs = new DialogManager({ layer });
  return {
    transport,
    layer,
    dialogs,
    port: transport.endpoints[0]!.port,
    received,
    responses,
    close: async () => {
      dialogs.close();
      layer.close();
      await transport.close();
    },
  };
}

describe('UAS: reliable 18x from callbridge (RFC 3262 3)', () => {
  let d: TestDaemon;
  let pbx: Stack;
  const calls: SipCall[] = [];
  let handle: (call: SipCall) => void = (call) => void call.answer();
  /** The daemon's log lines at info and above (JSON). */
  const logLines: string[] = [];
  const outcomes: string[] = [];

  beforeAll(async () => {
    d = await startTestDaemon({ sip: { t1_ms: 20 } }, undefined, {}, logLines);
    d.daemon.sip!.ua.on('outcome', (o: string) => outcomes.push(o));
    const agent = (await d.api('POST', '/v1/agents', { name: 'Front desk' })).body;
    const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'loopback pbx', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER })).status).toBe(201);
    d.daemon.sip!.ua.onInboundCall((call) => {
      calls.push(call);
      handle(call);
    });
    pbx = await stack();
  });

  afterAll(async () => {
    await pbx?.close();
    await d?.close();
  });

  afterEach(() => {
    handle = (call) => void call.answer();
  });

  function invite(headers: [string, string][]) {
    const sipPort = d.daemon.sip!.port;
    const req = createRequest({
      method: 'INVITE',
      uri: `sip:${NUMBER}@127.0.0.1:${sipPort}`,
      from: `<sip:${CALLER}@127.0.0.1:${pbx.port}>`,
      to: `<sip:${NUMBER}@127.0.0.1:${sipPort}>`,
      contact: `<sip:pbx@127.0.0.1:${pbx.port}>`,
      headers,
      body: OFFER,
      contentType: 'application/sdp',
    });
    const tx = pbx.layer.sendRequest(req, { protocol: 'udp', address: '127.0.0.1', port: sipPort });
    const provisional: SipResponse[] = [];
    tx.on('provisional', (res) => provisional.push(res));
    const ofCall = () => pbx.responses.filter((r) => r.callId === req.callId && r.cseq.method === 'INVITE');
    return { req, tx, provisional, ofCall };
  }

  it('Require: 100rel: a 180 with Require and RSeq, retransmitted until the PRACK; a wrong RAck gets 481; the 200 comes after the PRACK', async () => {
    const before = calls.length;
    const inv = invite([['Require', '100rel'], ['Supported', '100rel']]);
    await until(() => inv.provisional.some((r) => r.status === 180), 'the 180');
    const ringing = inv.provisional.find((r) => r.status === 180)!;
    expect(ringing.require).toContain('100rel');
    const rseq = Number(ringing.get('RSeq'));
    expect(rseq).toBeGreaterThanOrEqual(1);
    // The handler answered at once, yet no 200 before the PRACK; meanwhile the 180 is retransmitted (T1 doubling).
    await until(() => calls.length > before, 'the call');
    expect(calls[before]!.state).toBe('ringing');
    await until(() => inv.ofCall().filter((r) => r.status === 180).length >= 3, 'the 180 retransmissions');
    expect(inv.ofCall().some((r) => r.status === 200)).toBe(false);
    expect(new Set(inv.ofCall().filter((r) => r.status === 180).map((r) => r.get('RSeq')))).toEqual(new Set([String(rseq)]));

    const early: Dialog = pbx.dialogs.fromResponse(inv.req, ringing);
    const wrong = await early.request('PRACK', { headers: [['RAck', `${rseq + 1} ${inv.req.cseq.seq} INVITE`]] }).finalResponse;
    expect(wrong.status).toBe(481);
    // Hang up before 64*T1, so this call's PRACK timeout does not land in the tests that follow.
    inv.tx.cancel();
    expect((await inv.tx.finalResponse).status).toBe(487);
  });

  it('the PRACK with the right RAck gets 200 inside the early dialog, then the INVITE its 200; the call is answered', async () => {
    const before = calls.length;
    const inv = invite([['Require', '100rel']]);
    await until(() => inv.provisional.some((r) => r.status === 180), 'the 180');
    const ringing = inv.provisional.find((r) => r.status === 180)!;
    const rseq = Number(ringing.get('RSeq'));
    const early = pbx.dialogs.fromResponse(inv.req, ringing);
    const prack = early.request('PRACK', { headers: [['RAck', `${rseq} ${inv.req.cseq.seq} INVITE`]] });
    const prackRes = await prack.finalResponse;
    expect(prackRes.status).toBe(200);
    expect(prackRes.to.tag).toBe(ringing.to.tag);
    const ok = await inv.tx.finalResponse;
    expect(ok.status).toBe(200);
    expect(ok.body.toString()).toMatch(/m=audio \d+ RTP\/AVP 0/);
    expect(ok.getAll('Allow').join(',')).toContain('PRACK');
    expect(ok.getAll('Supported').join(',')).toContain('100rel');
    const dialog = pbx.dialogs.fromResponse(inv.req, ok);
    expect(dialog).toBe(early);
    dialog.ack(ok);
    const call = calls[before]!;
    await until(() => call.state === 'answered', 'the call answered');
    expect((await dialog.bye()!.finalResponse).status).toBe(200);
    await until(() => call.state === 'ended', 'the call ended');
  });

  it('no PRACK: the 180 is retransmitted (T1 doubling to T2) and after 64*T1 the INVITE is rejected 504, logged once, counted prack_timeout', async () => {
    const before = calls.length;
    const inv = invite([['Require', '100rel']]);
    const callLines = () => logLines.filter((l) => l.includes(inv.req.callId));
    const final = await inv.tx.finalResponse;
    expect(final.status).toBe(504);
    const ringing = inv.ofCall().filter((r) => r.status === 180);
    // 64*T1 = 1.28 s at 20, 40, 80 ... capped at T2 (4 s): 20+40+80+160+320+640 -> about 6 retransmissions.
    expect(ringing.length).toBeGreaterThanOrEqual(5);
    expect(ringing.length).toBeLessThanOrEqual(9);
    const call = calls[before]!;
    await until(() => call.state === 'ended', 'the call ended');
    expect(call.endInfo).toMatchObject({ reason: 'rejected', status: 504 });
    // One warning for the missing PRACK and nothing per retransmission at info level and above.
    const lines = callLines().map((l) => JSON.parse(l) as { level: number; msg: string });
    expect(lines.filter((l) => /PRACK/.test(l.msg))).toEqual([expect.objectContaining({ level: 40, msg: expect.stringContaining('504') })]);
    expect(lines.map((l) => l.msg)).toEqual(['inbound call routed', expect.stringContaining('no PRACK'), 'call ended']);
    expect(outcomes.filter((o) => o === 'prack_timeout')).toHaveLength(1);
  });

  it('Supported: 100rel without Require: the 180 is sent unreliably (no RSeq) and the 200 follows at once', async () => {
    const inv = invite([['Supported', '100rel, timer']]);
    const ok = await inv.tx.finalResponse;
    expect(ok.status).toBe(200);
    const ringing = inv.provisional.filter((r) => r.status === 180);
    expect(ringing.length).toBeGreaterThan(0);
    expect(ringing[0]!.get('RSeq')).toBeUndefined();
    const dialog = pbx.dialogs.fromResponse(inv.req, ok);
    dialog.ack(ok);
    // A PRACK in a call that sent nothing reliably acknowledges nothing: 481 (RFC 3262 3).
    const prack = await dialog.request('PRACK', { headers: [['RAck', `1 ${inv.req.cseq.seq} INVITE`]] }).finalResponse;
    expect(prack.status).toBe(481);
    const call = calls.at(-1)!;
    call.hangup();
    await until(() => call.state === 'ended', 'the call ended');
  });

  it('Require of an extension we do not support: 420 Bad Extension with Unsupported naming it', async () => {
    const before = calls.length;
    const inv = invite([['Require', '100rel, foo-ext']]);
    const res = await inv.tx.finalResponse;
    expect(res.status).toBe(420);
    expect(res.get('Unsupported')).toBe('foo-ext');
    expect(calls.length).toBe(before);
  });
});

/** sendInvite from `uac` to `uas`, both on loopback UDP, with our usual offer. */
function inviteOptions(uac: Stack, uas: Stack): SendInviteOptions {
  return {
    layer: uac.layer,
    dialogs: uac.dialogs,
    destination: { protocol: 'udp', address: '127.0.0.1', port: uas.port },
    requestUri: `sip:+15551234567@127.0.0.1:${uas.port}`,
    from: { user: CALLER, host: `127.0.0.1:${uac.port}` },
    to: { user: '+15551234567', host: `127.0.0.1:${uas.port}` },
    contact: `<sip:callbridge@127.0.0.1:${uac.port}>`,
    sdp: OFFER,
  };
}

describe('UAC: PRACK for a reliable 18x (RFC 3262 4)', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('401, then a reliable 183 with SDP: PRACK with RAck and credentials in the early dialog; a repeated and an out-of-order RSeq are ignored; 200 in the same dialog', async () => {
    const uac = await stack();
    const uas = await stack();
    cleanups.push(uac.close, uas.close);
    const server = new DigestServer({ realm: 'carrier.test' });
    const password = (u: string) => (u === 'trunk-user' ? 'trunk-secret' : undefined);
    const pracks: { req: SipRequest; verified: boolean }[] = [];
    let reliable: ReliableProvisionalSender | undefined;
    let dialog: Dialog | undefined;
    let rseq = 0;
    uas.dialogs.on('new-request', (tx: ServerTransaction, inbound: Inbound<SipRequest>) => {
      if (inbound.message.method !== 'INVITE') return;
      if (!inbound.message.has('Authorization')) {
        const headers = server.challenge().map((v): [string, string] => [challengeHeaderName(401), v]);
        tx.respond(createResponse(inbound.message, 401, undefined, { toTag: generateTag(), headers }));
        return;
      }
      expect(inbound.message.supported).toContain('100rel');
      dialog = uas.dialogs.fromInvite(tx, inbound, { localContact: `<sip:uas@127.0.0.1:${uas.port}>` });
      dialog.on('prack', (_tx, prack) => {
        const req = prack.message;
        pracks.push({ req, verified: server.verify({ method: 'PRACK', uri: req.uri.toString(), authorization: req.getAll('Authorization'), password }).ok });
      });
      reliable = new ReliableProvisionalSender(dialog, { t1: 20, t2: 80, onUnacknowledged: () => {} });
      rseq = Number(reliable.send(183, { body: EARLY, contentType: 'application/sdp' }).get('RSeq'));
    });
    const progress: [number, string | undefined][] = [];
    const outcome = sendInvite({
      ...inviteOptions(uac, uas),
      credentials: { username: 'trunk-user', password: 'trunk-secret' },
      onProvisional: (status, _reason, sdp) => progress.push([status, sdp]),
    });
    await until(() => pracks.length === 1 && reliable?.pending === false, 'the PRACK');
    const prack = pracks[0]!.req;
    expect(pracks[0]!.verified).toBe(true);
    const invite = uas.received.filter((r) => r.method === 'INVITE').at(-1)!;
    expect(parseRAck(prack.get('RAck'))).toEqual({ rseq, cseq: invite.cseq.seq, method: 'INVITE' });
    expect(prack.cseq.seq).toBe(invite.cseq.seq + 1);
    expect(prack.to.tag).toBe(dialog!.localTag);
    expect(prack.callId).toBe(invite.callId);
    expect(progress).toEqual([[183, EARLY]]);

    // The same RSeq again (the PRACK crossed it) and one that skips ahead: neither PRACKed nor reported.
    dialog!.provisional(183, { body: EARLY, contentType: 'application/sdp', headers: [['Require', '100rel'], ['RSeq', String(rseq)]] });
    dialog!.provisional(180, { headers: [['Require', '100rel'], ['RSeq', String(rseq + 5)]] });
    await delay(100);
    expect(pracks.length).toBe(1);
    expect(progress).toEqual([[183, EARLY]]);

    // The next in order is PRACKed.
    expect(reliable!.send(180).get('RSeq')).toBe(String(rseq + 1));
    await until(() => pracks.length === 2 && !reliable!.pending, 'the second PRACK');
    expect(parseRAck(pracks[1]!.req.get('RAck'))?.rseq).toBe(rseq + 1);

    dialog!.answer({ body: EARLY, contentType: 'application/sdp' });
    const out = await outcome;
    expect(out.ok).toBe(true);
    if (!out.ok) return;
    expect(out.dialog.remoteTag).toBe(dialog!.localTag);
    // The first ACK is the 401's (the transaction's); the second the 200's (the dialog's).
    await until(() => uas.received.filter((r) => r.method === 'ACK').length === 2, 'the ACK');
    const ack = uas.received.filter((r) => r.method === 'ACK')[1]!;
    expect(ack.cseq.seq).toBe(invite.cseq.seq);
    expect((await out.dialog.bye()!.finalResponse).status).toBe(200);
    expect(uas.received.find((r) => r.method === 'BYE')!.cseq.seq).toBe(invite.cseq.seq + 3);
  });

  it('an unreliable 183 (no Require: 100rel) gets no PRACK', async () => {
    const uac = await stack();
    const uas = await stack();
    cleanups.push(uac.close, uas.close);
    uas.dialogs.on('new-request', (tx: ServerTransaction, inbound: Inbound<SipRequest>) => {
      const dlg = uas.dialogs.fromInvite(tx, inbound, { localContact: `<sip:uas@127.0.0.1:${uas.port}>` });
      dlg.provisional(183, { body: EARLY, contentType: 'application/sdp', headers: [['RSeq', '7']] });
      setTimeout(() => dlg.answer({ body: EARLY, contentType: 'application/sdp' }), 50);
    });
    const out = await sendInvite(inviteOptions(uac, uas));
    expect(out.ok).toBe(true);
    expect(uas.received.some((r) => r.method === 'PRACK')).toBe(false);
    if (out.ok) await out.dialog.bye()!.finalResponse;
  });
});
