/**
 * The dialog layer (RFC 3261 section 12, 13.2.2.4, 13.3.1.4) over TransactionLayer and the
 * in-memory FakeTransport on virtual timers.
 */
import { describe, expect, it } from 'vitest';
import { Dialog, DialogManager, endpointFromUri, SipDialogError, type DialogTerminationReason } from '../../src/sip/dialog/index.ts';
import { createResponse, parseUri, SipRequest, SipResponse } from '../../src/sip/message/index.ts';
import { TransactionLayer, type ClientTransaction, type ServerTransaction } from '../../src/sip/transaction/index.ts';
import type { Endpoint, Inbound } from '../../src/sip/transport/types.ts';
import { FakeTransport, flush, PEER, peerRequest, reply, tuRequest, VirtualClock } from './transaction-fakes.ts';

const CONTACT = '<sip:callbridge@192.0.2.1:5060>';
const ALICE_CONTACT: Endpoint = { protocol: 'udp', address: '198.51.100.7', port: 5062 };

function setup() {
  const clock = new VirtualClock();
  const transport = new FakeTransport(clock);
  const warnings: string[] = [];
  const logger = { debug: () => {}, warn: (_o: object, m: string) => void warnings.push(m) };
  const layer = new TransactionLayer({ transport, clock, logger });
  const manager = new DialogManager({ layer, clock, logger });
  return { clock, transport, layer, manager, warnings };
}

type Env = ReturnType<typeof setup>;

/** An incoming INVITE answered 200 by a UAS dialog (tag "ourtag", first local CSeq 100). */
function uasDialog(env: Env, opts: { recordRoutes?: string[]; answer?: boolean } = {}): { dialog: Dialog; tx: ServerTransaction; invite: SipRequest } {
  let dialog: Dialog | undefined;
  let tx: ServerTransaction | undefined;
  env.manager.once('new-request', (t, inbound) => {
    tx = t;
    dialog = env.manager.fromInvite(t, inbound, { localTag: 'ourtag', localContact: CONTACT, initialCSeq: 100 });
    if (opts.answer !== false) dialog.answer({ body: 'v=0\r\n', contentType: 'application/sdp' });
  });
  const invite = peerRequest('INVITE', { cseq: 1 });
  for (const rr of opts.recordRoutes ?? []) invite.append('Record-Route', rr);
  env.transport.deliverRequest(invite);
  return { dialog: dialog!, tx: tx!, invite };
}

const ackFor = (cseq = 1, toTag = 'ourtag') => peerRequest('ACK', { toTag, cseq });
const sentFor = (env: Env, pred: (m: SipRequest | SipResponse) => boolean) => env.transport.sent.filter((s) => pred(s.message));
const is200Invite = (m: SipRequest | SipResponse) => m instanceof SipResponse && m.status === 200 && m.cseq.method === 'INVITE';

describe('UAS dialog', () => {
  it('creates the dialog from the INVITE and answers with tag, Contact and Record-Route', () => {
    const env = setup();
    const { dialog } = uasDialog(env, { recordRoutes: ['<sip:10.0.0.1;lr>', '<sip:10.0.0.2;lr>'] });
    expect(dialog.state).toBe('confirmed');
    expect(dialog.role).toBe('uas');
    expect(dialog.callId).toBe('call-1@198.51.100.7');
    expect(dialog.localTag).toBe('ourtag');
    expect(dialog.remoteTag).toBe('alicetag');
    expect(dialog.remoteSeq).toBe(1);
    expect(String(dialog.remoteTarget)).toBe('sip:alice@198.51.100.7:5062');
    // 12.1.1: the route set is the Record-Route as received, in order.
    expect(dialog.routeSet.map((r) => String(r.uri))).toEqual(['sip:10.0.0.1;lr', 'sip:10.0.0.2;lr']);
    const ok = env.transport.responses(200)[0]!;
    expect(ok.to.tag).toBe('ourtag');
    expect(String(ok.contacts[0]!.uri)).toBe('sip:callbridge@192.0.2.1:5060');
    expect(ok.recordRoutes.map((r) => String(r.uri))).toEqual(['sip:10.0.0.1;lr', 'sip:10.0.0.2;lr']);
    expect(ok.body.toString()).toBe('v=0\r\n');
    expect(env.manager.get('call-1@198.51.100.7', 'ourtag', 'alicetag')).toBe(dialog);
  });

  it('retransmits its 2xx at T1 doubling to T2 until the ACK, then stops', () => {
    const env = setup();
    const { dialog } = uasDialog(env);
    const acks: Inbound<SipRequest>[] = [];
    dialog.on('ack', (i) => acks.push(i));
    env.clock.advance(12_000);
    expect(sentFor(env, is200Invite).map((s) => s.at)).toEqual([0, 500, 1500, 3500, 7500, 11500]);
    expect(dialog.awaitingAck).toBe(true);
    env.transport.deliverRequest(ackFor());
    expect(acks).toHaveLength(1);
    expect(dialog.awaitingAck).toBe(false);
    env.clock.advance(60_000);
    expect(sentFor(env, is200Invite)).toHaveLength(6);
    // A retransmitted ACK is absorbed quietly.
    env.transport.deliverRequest(ackFor());
    expect(acks).toHaveLength(1);
    expect(env.transport.requests('BYE')).toHaveLength(0);
    expect(dialog.state).toBe('confirmed');
  });

  it('ignores an ACK with another CSeq or other tags', () => {
    const env = setup();
    const { dialog } = uasDialog(env);
    env.transport.deliverRequest(ackFor(7));
    env.transport.deliverRequest(ackFor(1, 'othertag'));
    expect(dialog.awaitingAck).toBe(true);
  });

  it('sends BYE and emits ack-timeout when no ACK comes within 64*T1', () => {
    const env = setup();
    const { dialog } = uasDialog(env);
    const ended: DialogTerminationReason[] = [];
    let timedOut = 0;
    dialog.on('ack-timeout', () => timedOut++);
    dialog.on('terminated', (r) => ended.push(r));
    env.clock.advance(31_999);
    expect(env.transport.requests('BYE')).toHaveLength(0);
    env.clock.advance(1);
    expect(timedOut).toBe(1);
    expect(ended).toEqual(['ack-timeout']);
    expect(dialog.state).toBe('terminated');
    expect(env.manager.size).toBe(0);
    const bye = env.transport.sent.find((s) => s.message instanceof SipRequest && s.message.method === 'BYE')!;
    const m = bye.message as SipRequest;
    expect(bye.destination).toEqual(ALICE_CONTACT);
    expect(String(m.uri)).toBe('sip:alice@198.51.100.7:5062');
    expect(m.from.tag).toBe('ourtag');
    expect(m.to.tag).toBe('alicetag');
    expect(m.callId).toBe('call-1@198.51.100.7');
    expect(m.cseq.seq).toBe(101);
    const count = sentFor(env, is200Invite).length;
    env.clock.advance(60_000);
    expect(sentFor(env, is200Invite)).toHaveLength(count);
  });

  it('sends a 1xx with tag (early dialog) and answers a CANCEL 487', () => {
    const env = setup();
    const { dialog } = uasDialog(env, { answer: false });
    dialog.provisional(180);
    expect(dialog.state).toBe('early');
    const ringing = env.transport.responses(180)[0]!;
    expect(ringing.to.tag).toBe('ourtag');
    expect(ringing.contacts).toHaveLength(1);
    const ended: DialogTerminationReason[] = [];
    dialog.on('terminated', (r) => ended.push(r));
    const invite = env.transport.responses(180)[0]!;
    const cancel = peerRequest('CANCEL', { branch: invite.topVia!.branch, cseq: 1 });
    env.transport.deliverRequest(cancel);
    expect(env.transport.responses(487)).toHaveLength(1);
    expect(env.transport.responses(487)[0]!.to.tag).toBe('ourtag');
    expect(ended).toEqual(['cancelled']);
    expect(env.manager.size).toBe(0);
  });

  it('reject() ends the early dialog', () => {
    const env = setup();
    const { dialog } = uasDialog(env, { answer: false });
    dialog.reject(486);
    expect(env.transport.responses(486)[0]!.to.tag).toBe('ourtag');
    expect(dialog.state).toBe('terminated');
    expect(() => dialog.request('INFO')).toThrow(SipDialogError);
  });
});

describe('UAC dialog', () => {
  function uacInvite(env: Env): ClientTransaction {
    return env.layer.sendRequest(tuRequest('INVITE'), { protocol: 'udp', address: '10.0.0.2', port: 5060 });
  }
  const RR = [
    ['Record-Route', '<sip:10.0.0.1;lr>'],
    ['Record-Route', '<sip:10.0.0.2;lr>'],
  ] as [string, string][];
  function ok(tx: ClientTransaction, status = 200): SipResponse {
    return reply(tx.request, status, { toTag: 'bobtag', headers: [...RR, ['Contact', '<sip:bob@198.51.100.9:5070>']] });
  }

  it('builds the ACK with the reversed route set and sends it to the first (loose) route', async () => {
    const env = setup();
    const tx = uacInvite(env);
    let dialog: Dialog | undefined;
    tx.on('final', (res) => {
      dialog = env.manager.fromResponse(tx.request, res);
      dialog.ack(res);
    });
    env.transport.deliverResponse(ok(tx));
    await flush();
    expect(dialog!.state).toBe('confirmed');
    expect(dialog!.routeSet.map((r) => String(r.uri))).toEqual(['sip:10.0.0.2;lr', 'sip:10.0.0.1;lr']);
    const sent = env.transport.sent.find((s) => s.message instanceof SipRequest && s.message.method === 'ACK')!;
    const ack = sent.message as SipRequest;
    expect(sent.destination).toEqual({ protocol: 'udp', address: '10.0.0.2', port: 5060 });
    expect(String(ack.uri)).toBe('sip:bob@198.51.100.9:5070');
    expect(ack.routes.map((r) => String(r.uri))).toEqual(['sip:10.0.0.2;lr', 'sip:10.0.0.1;lr']);
    expect(ack.cseq.seq).toBe(1);
    expect(ack.cseq.method).toBe('ACK');
    expect(ack.to.tag).toBe('bobtag');
    expect(ack.from.tag).toBe('ourtag');
    expect(ack.callId).toBe('out-1@192.0.2.1');
    expect(ack.topVia!.branch).not.toBe(tx.branch);
  });

  it('re-ACKs a 2xx retransmission arriving as stray after Timer M', async () => {
    const env = setup();
    const tx = uacInvite(env);
    const res = ok(tx);
    env.transport.deliverResponse(res);
    const dialog = env.manager.fromResponse(tx.request, res);
    dialog.ack(res);
    await flush();
    env.clock.advance(40_000);
    env.transport.deliverResponse(res);
    await flush();
    const acks = env.transport.requests('ACK');
    expect(acks).toHaveLength(2);
    expect(acks[1]!.topVia!.branch).toBe(acks[0]!.topVia!.branch);
  });

  it('watch(tx) re-ACKs 2xx retransmissions passed up by the INVITE transaction', async () => {
    const env = setup();
    const tx = uacInvite(env);
    const res = ok(tx);
    tx.once('final', (r) => {
      const d = env.manager.fromResponse(tx.request, r);
      d.watch(tx);
      d.ack(r);
    });
    env.transport.deliverResponse(res);
    env.transport.deliverResponse(res);
    env.transport.deliverResponse(res);
    await flush();
    expect(env.transport.requests('ACK')).toHaveLength(3);
  });

  it('an early dialog from a 1xx with tag is confirmed by the 2xx, whose route set wins', () => {
    const env = setup();
    const tx = uacInvite(env);
    const ringing = reply(tx.request, 180, { toTag: 'bobtag', headers: [['Contact', '<sip:bob@198.51.100.9:5070>']] });
    const d = env.manager.fromResponse(tx.request, ringing);
    expect(d.state).toBe('early');
    expect(d.routeSet).toHaveLength(0);
    const d2 = env.manager.fromResponse(tx.request, ok(tx));
    expect(d2).toBe(d);
    expect(d.state).toBe('confirmed');
    expect(d.routeSet.map((r) => String(r.uri))).toEqual(['sip:10.0.0.2;lr', 'sip:10.0.0.1;lr']);
  });

  it('sends an in-dialog BYE per 12.2.1.1 and terminates', async () => {
    const env = setup();
    const tx = uacInvite(env);
    const res = ok(tx);
    const dialog = env.manager.fromResponse(tx.request, res);
    dialog.ack(res);
    const bye = dialog.bye()!;
    await flush();
    expect(dialog.state).toBe('terminated');
    expect(env.manager.size).toBe(0);
    const sent = env.transport.sent.find((s) => s.message instanceof SipRequest && s.message.method === 'BYE')!;
    const m = sent.message as SipRequest;
    expect(sent.destination).toEqual({ protocol: 'udp', address: '10.0.0.2', port: 5060 });
    expect(String(m.uri)).toBe('sip:bob@198.51.100.9:5070');
    expect(m.routes.map((r) => String(r.uri))).toEqual(['sip:10.0.0.2;lr', 'sip:10.0.0.1;lr']);
    expect(m.cseq.seq).toBe(2);
    expect(m.has('Contact')).toBe(false);
    env.transport.deliverResponse(reply(m, 200));
    expect((await bye.finalResponse).status).toBe(200);
    expect(dialog.bye()).toBeUndefined();
  });

  it('re-INVITE carries Contact, its 2xx refreshes the remote target; a 481 ends the dialog', async () => {
    const env = setup();
    const tx = uacInvite(env);
    const res = ok(tx);
    const dialog = env.manager.fromResponse(tx.request, res);
    dialog.ack(res);
    const re = dialog.request('INVITE', { body: 'v=0\r\n', contentType: 'application/sdp' });
    const reInvite = env.transport.requests('INVITE').at(-1)!;
    expect(reInvite.cseq.seq).toBe(2);
    expect(String(reInvite.contacts[0]!.uri)).toBe('sip:callbridge@192.0.2.1:5060');
    env.transport.deliverResponse(reply(re.request, 200, { headers: [['Contact', '<sip:bob@198.51.100.9:5080>']] }));
    expect(String(dialog.remoteTarget)).toBe('sip:bob@198.51.100.9:5080');
    const info = dialog.request('INFO');
    env.transport.deliverResponse(reply(info.request, 481));
    await flush();
    expect(dialog.state).toBe('terminated');
  });

  it('a 408 to an in-dialog request sends BYE and ends the dialog; a 481 ends it without BYE; a 481 to NOTIFY leaves it', async () => {
    const env = setup();
    const tx = uacInvite(env);
    const res = ok(tx);
    const dialog = env.manager.fromResponse(tx.request, res);
    dialog.ack(res);
    const notify = dialog.request('NOTIFY');
    env.transport.deliverResponse(reply(notify.request, 481));
    await flush();
    expect(dialog.state).toBe('confirmed');
    const update = dialog.request('UPDATE');
    env.transport.deliverResponse(reply(update.request, 408));
    await flush();
    expect(dialog.state).toBe('terminated');
    expect(env.transport.requests('BYE')).toHaveLength(1);

    const env2 = setup();
    const tx2 = uacInvite(env2);
    const res2 = ok(tx2);
    const d2 = env2.manager.fromResponse(tx2.request, res2);
    const reasons: DialogTerminationReason[] = [];
    d2.on('terminated', (r) => reasons.push(r));
    const info = d2.request('INFO');
    env2.transport.deliverResponse(reply(info.request, 481));
    await flush();
    expect(reasons).toEqual(['remote-gone']);
    expect(env2.transport.requests('BYE')).toHaveLength(0);
  });

  it('refuses strict routing; host names pass through to the transport', () => {
    const env = setup();
    const tx = uacInvite(env);
    const res = reply(tx.request, 200, { toTag: 'bobtag', headers: [['Record-Route', '<sip:10.0.0.1>'], ['Contact', '<sip:bob@198.51.100.9>']] });
    const dialog = env.manager.fromResponse(tx.request, res);
    expect(() => dialog.nextHop()).toThrow(expect.objectContaining({ code: 'SIP_DIALOG_STRICT_ROUTE' }));
    // Names pass through: the transport resolves them when it sends.
    expect(endpointFromUri(parseUri('sip:bob@sbc.example.com;transport=tcp'))).toEqual({ protocol: 'tcp', address: 'sbc.example.com', port: 5060 });
    expect(() => endpointFromUri(parseUri('tel:+15551234567'))).toThrow(expect.objectContaining({ code: 'SIP_DIALOG_DESTINATION' }));
    expect(endpointFromUri(parseUri('sips:bob@[2001:db8::1]'))).toEqual({ protocol: 'tls', address: '2001:db8::1', port: 5061 });
    expect(endpointFromUri(parseUri('sip:bob@203.0.113.1:5070;transport=TCP'))).toEqual({ protocol: 'tcp', address: '203.0.113.1', port: 5070 });
  });

  it('rejects responses that create no dialog', () => {
    const env = setup();
    const tx = uacInvite(env);
    expect(() => Dialog.fromResponse(tx.request, reply(tx.request, 180), { layer: env.layer })).toThrow(SipDialogError);
    expect(() => Dialog.fromResponse(tx.request, reply(tx.request, 486, { toTag: 'x' }), { layer: env.layer })).toThrow(SipDialogError);
  });
});

describe('DialogManager: incoming in-dialog requests', () => {
  function confirmed(env: Env, recordRoutes?: string[]): Dialog {
    const { dialog } = uasDialog(env, { recordRoutes });
    env.transport.deliverRequest(ackFor());
    return dialog;
  }

  it('answers BYE 200, emits bye and terminates; a second BYE gets 481', () => {
    const env = setup();
    const dialog = confirmed(env);
    const ended: DialogTerminationReason[] = [];
    let byes = 0;
    dialog.on('bye', () => byes++);
    dialog.on('terminated', (r) => ended.push(r));
    env.transport.deliverRequest(peerRequest('BYE', { toTag: 'ourtag', cseq: 2 }));
    expect(env.transport.responses(200).filter((r) => r.cseq.method === 'BYE')).toHaveLength(1);
    expect(byes).toBe(1);
    expect(ended).toEqual(['bye-received']);
    expect(dialog.state).toBe('terminated');
    expect(env.manager.size).toBe(0);
    env.transport.deliverRequest(peerRequest('BYE', { toTag: 'ourtag', cseq: 3 }));
    expect(env.transport.responses(481)).toHaveLength(1);
  });

  it('answers 481 for an unknown dialog', () => {
    const env = setup();
    confirmed(env);
    env.transport.deliverRequest(peerRequest('INFO', { toTag: 'nosuchtag', cseq: 2 }));
    env.transport.deliverRequest(peerRequest('BYE', { toTag: 'ourtag', callId: 'other@x', cseq: 2 }));
    expect(env.transport.responses(481)).toHaveLength(2);
  });

  it('answers 500 to a CSeq lower than or equal to the last one (12.2.2)', () => {
    const env = setup();
    const dialog = confirmed(env);
    dialog.on('info', (tx) => tx.respond(createResponse(tx.request, 200)));
    env.transport.deliverRequest(peerRequest('INFO', { toTag: 'ourtag', cseq: 5 }));
    env.transport.deliverRequest(peerRequest('INFO', { toTag: 'ourtag', cseq: 3 }));
    env.transport.deliverRequest(peerRequest('INFO', { toTag: 'ourtag', cseq: 5 }));
    expect(env.transport.responses(200).filter((r) => r.cseq.method === 'INFO').map((r) => r.cseq.seq)).toEqual([5]);
    expect(env.transport.responses(500).map((r) => r.cseq.seq)).toEqual([3, 5]);
    expect(dialog.remoteSeq).toBe(5);
    expect(dialog.state).toBe('confirmed');
  });

  it('dispatches a re-INVITE with its server transaction; answer(opts, tx) retransmits until its ACK', () => {
    const env = setup();
    const dialog = confirmed(env);
    let seen: ServerTransaction | undefined;
    dialog.on('reinvite', (tx) => {
      seen = tx;
      dialog.answer({ body: 'v=0\r\n', contentType: 'application/sdp' }, tx);
    });
    const re = peerRequest('INVITE', { toTag: 'ourtag', cseq: 2 });
    re.set('Contact', '<sip:alice@198.51.100.7:6000>');
    env.transport.deliverRequest(re);
    expect(seen?.request.cseq.seq).toBe(2);
    expect(String(dialog.remoteTarget)).toBe('sip:alice@198.51.100.7:6000');
    env.clock.advance(1600);
    const oks = env.transport.responses(200).filter((r) => r.cseq.method === 'INVITE' && r.cseq.seq === 2);
    expect(oks).toHaveLength(3);
    env.transport.deliverRequest(ackFor(2));
    env.clock.advance(40_000);
    expect(env.transport.responses(200).filter((r) => r.cseq.method === 'INVITE' && r.cseq.seq === 2)).toHaveLength(3);
    expect(env.transport.requests('BYE')).toHaveLength(0);
  });

  it('answers in-dialog requests nobody handles: OPTIONS 200, UPDATE 488, REFER 501', () => {
    const env = setup();
    confirmed(env);
    env.transport.deliverRequest(peerRequest('OPTIONS', { toTag: 'ourtag', cseq: 2 }));
    env.transport.deliverRequest(peerRequest('UPDATE', { toTag: 'ourtag', cseq: 3 }));
    env.transport.deliverRequest(peerRequest('REFER', { toTag: 'ourtag', cseq: 4 }));
    expect(env.transport.responses(200).some((r) => r.cseq.method === 'OPTIONS')).toBe(true);
    expect(env.transport.responses(488)).toHaveLength(1);
    expect(env.transport.responses(501)).toHaveLength(1);
  });

  it('catches a throwing listener and answers 500', () => {
    const env = setup();
    const dialog = confirmed(env);
    dialog.on('info', () => {
      throw new Error('boom');
    });
    env.transport.deliverRequest(peerRequest('INFO', { toTag: 'ourtag', cseq: 2 }));
    expect(env.transport.responses(500)).toHaveLength(1);
    expect(env.warnings.some((w) => w.includes("'info' listener threw"))).toBe(true);
  });

  it('sends BYE through the route set received as Record-Route, in order', async () => {
    const env = setup();
    const dialog = confirmed(env, ['<sip:10.0.0.1;lr>', '<sip:10.0.0.2:5070;lr>']);
    dialog.bye();
    await flush();
    const sent = env.transport.sent.find((s) => s.message instanceof SipRequest && s.message.method === 'BYE')!;
    const m = sent.message as SipRequest;
    expect(sent.destination).toEqual({ protocol: 'udp', address: '10.0.0.1', port: 5060 });
    expect(m.routes.map((r) => String(r.uri))).toEqual(['sip:10.0.0.1;lr', 'sip:10.0.0.2:5070;lr']);
    expect(String(m.uri)).toBe('sip:alice@198.51.100.7:5062');
    expect(m.cseq.seq).toBe(101);
    expect(dialog.state).toBe('terminated');
  });

  it('answers 503 to out-of-dialog requests when nobody listens; close() detaches and closes dialogs', () => {
    const env = setup();
    const dialog = confirmed(env);
    env.transport.deliverRequest(peerRequest('OPTIONS', { callId: 'x@y' }));
    expect(env.transport.responses(503)).toHaveLength(1);
    env.manager.close();
    env.manager.close();
    expect(dialog.state).toBe('terminated');
    expect(env.manager.closed).toBe(true);
  });

  it('passes a PEER-sourced request without To tag to new-request', () => {
    const env = setup();
    const got: string[] = [];
    env.manager.on('new-request', (tx) => {
      got.push(tx.request.method);
      tx.respond(createResponse(tx.request, 200));
    });
    env.transport.deliverRequest(peerRequest('OPTIONS'), PEER);
    expect(got).toEqual(['OPTIONS']);
  });
});
