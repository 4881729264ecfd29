/**
 * TransactionLayer over an in-memory SipTransport (a test double implementing the contract of
 * transport/types.ts; the real UDP/TCP transports are tested separately) on virtual timers.
 */
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.ts';
import { SipTransactionError } from '../../src/sip/message/errors.ts';
import { createResponse, SipRequest, SipResponse } from '../../src/sip/message/index.ts';
import { TransactionLayer, type ServerTransaction } from '../../src/sip/transaction/index.ts';
import type { TransactionTimerConfig } from '../../src/sip/transaction/timers.ts';
import type { Endpoint, Inbound } from '../../src/sip/transport/types.ts';
import { FakeTransport, flush, PEER, peerRequest, reply, tuRequest, VirtualClock } from './transaction-fakes.ts';

const DEST: Endpoint = { protocol: 'udp', address: '203.0.113.5', port: 5060 };
const DEST_TCP: Endpoint = { ...DEST, protocol: 'tcp' };
const PEER_TCP: Endpoint = { ...PEER, protocol: 'tcp' };

function setup(timers?: TransactionTimerConfig) {
  const clock = new VirtualClock();
  const transport = new FakeTransport(clock);
  const warnings: [object, string][] = [];
  const logger = { debug: () => {}, warn: (o: object, m: string) => void warnings.push([o, m]) };
  const layer = new TransactionLayer({ transport, clock, logger, ...(timers ? { timers } : {}) });
  return { clock, transport, layer, warnings };
}

const isMethod = (method: string) => (m: SipRequest | SipResponse) => m instanceof SipRequest && m.method === method;
const isStatus = (status: number) => (m: SipRequest | SipResponse) => m instanceof SipResponse && m.status === status;

/** Records the 'request' events and optionally answers them. */
function serve(layer: TransactionLayer, onRequest?: (tx: ServerTransaction, inbound: Inbound<SipRequest>) => void) {
  const txs: ServerTransaction[] = [];
  layer.on('request', (tx, inbound) => {
    txs.push(tx);
    onRequest?.(tx, inbound);
  });
  return txs;
}

const answer = (tx: ServerTransaction, status: number, toTag = 'uastag') => tx.respond(createResponse(tx.request, status, undefined, { toTag }));

// --------------------------------------------------------------------------------------------------

describe('client INVITE transaction over UDP', () => {
  it('retransmits on Timer A (500, 1000, 2000 ms ... doubling) until Timer B = 64*T1, then times out (408)', async () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE'), DEST);
    const timeouts: [SipTransactionError, number][] = [];
    tx.on('timeout', (e) => timeouts.push([e, clock.now]));
    clock.advance(40_000);
    expect(transport.sentAt(isMethod('INVITE'))).toEqual([0, 500, 1500, 3500, 7500, 15500, 31500]);
    expect(new Set(transport.requests('INVITE').map((r) => r.topVia!.branch))).toEqual(new Set([tx.branch]));
    expect(timeouts).toHaveLength(1);
    expect(timeouts[0]![1]).toBe(32_000);
    expect(timeouts[0]![0]).toMatchObject({ code: 'SIP_TX_TIMEOUT', timer: 'B', status: 408 });
    const final = await tx.finalResponse;
    expect(final.status).toBe(408);
    expect(tx.error?.code).toBe('SIP_TX_TIMEOUT');
    expect(tx.state).toBe('Terminated');
    const stats = layer.stats();
    expect(stats.timeouts.B).toBe(1);
    expect(stats.active['client-invite']).toBe(0);
    expect(stats.retransmissions.requests).toBe(6);
  });

  it('adds a Via for the transport (branch with the magic cookie, rport) and sends to the destination', () => {
    const { transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE'), DEST);
    const sent = transport.sent[0]!;
    expect(sent.destination).toEqual(DEST);
    const via = (sent.message as SipRequest).via;
    expect(via).toHaveLength(1);
    expect(via[0]!.toString()).toBe(`SIP/2.0/UDP 192.0.2.1:5060;branch=${tx.branch};rport`);
    expect(tx.branch.startsWith('z9hG4bK')).toBe(true);
    expect(tx.kind).toBe('client-invite');
  });

  it('a provisional response stops retransmissions; Timer B no longer applies in Proceeding', () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE'), DEST);
    const provisional: number[] = [];
    tx.on('provisional', (r) => provisional.push(r.status));
    clock.advance(700);
    transport.deliverResponse(reply(transport.requests('INVITE')[0]!, 180, { toTag: 'bob' }));
    clock.advance(120_000);
    expect(transport.sentAt(isMethod('INVITE'))).toEqual([0, 500]);
    expect(provisional).toEqual([180]);
    expect(tx.state).toBe('Proceeding');
  });

  it('3xx-6xx: the transaction ACKs it (same branch, one Via, To of the response, Route copied) and absorbs retransmissions until Timer D', async () => {
    const { clock, transport, layer } = setup();
    const invite = tuRequest('INVITE', { routes: ['<sip:edge1.example.net;lr>', '<sip:edge2.example.net;lr>'] });
    const tx = layer.sendRequest(invite, DEST);
    const finals: number[] = [];
    const responses: number[] = [];
    const stray: number[] = [];
    tx.on('final', (r) => finals.push(r.status));
    tx.on('response', (r) => responses.push(r.status));
    layer.on('stray', (i) => stray.push(i.message.status));
    const sentInvite = transport.requests('INVITE')[0]!;
    const busy = reply(sentInvite, 486, { toTag: 'bob' });
    transport.deliverResponse(busy);
    expect((await tx.finalResponse).status).toBe(486);
    expect(tx.error).toBeUndefined();

    const acks = transport.requests('ACK');
    expect(acks).toHaveLength(1);
    const ack = acks[0]!;
    expect(ack.uri.toString()).toBe(sentInvite.uri.toString());
    expect(ack.via.map(String)).toEqual([sentInvite.topVia!.toString()]);
    expect(ack.topVia!.branch).toBe(tx.branch);
    expect(ack.to.tag).toBe('bob');
    expect(ack.from.toString()).toBe(sentInvite.from.toString());
    expect(ack.callId).toBe(sentInvite.callId);
    expect(ack.cseq.toString()).toBe(`${sentInvite.cseq.seq} ACK`);
    expect(ack.routes.map(String)).toEqual(['<sip:edge1.example.net;lr>', '<sip:edge2.example.net;lr>']);
    expect(ack.body.length).toBe(0);
    expect(transport.sent.find((s) => s.message === ack)!.destination).toEqual(DEST);

    // The 486 again (our ACK was lost): ACKed again, not passed up again.
    clock.advance(1000);
    transport.deliverResponse(busy);
    expect(transport.requests('ACK')).toHaveLength(2);
    expect(finals).toEqual([486]);
    expect(responses).toEqual([486]);
    expect(tx.state).toBe('Completed');
    expect(layer.stats().retransmissions.acks).toBe(1);

    clock.advance(31_000); // Timer D: 32 s after the first 486
    expect(tx.state).toBe('Terminated');
    transport.deliverResponse(busy);
    expect(stray).toEqual([486]);
    expect(transport.requests('ACK')).toHaveLength(2);
  });

  it('2xx: passed up, no ACK from the transaction; Accepted passes retransmitted and forked 2xx up until Timer M, then they are stray', async () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE'), DEST);
    const responses: string[] = [];
    const finals: number[] = [];
    const stray: string[] = [];
    tx.on('response', (r) => responses.push(`${r.status} ${r.to.tag}`));
    tx.on('final', (r) => finals.push(r.status));
    layer.on('stray', (i) => stray.push(`${i.message.status} ${i.message.to.tag}`));
    const sentInvite = transport.requests('INVITE')[0]!;
    const ok = reply(sentInvite, 200, { toTag: 'bob' });
    transport.deliverResponse(ok);
    expect((await tx.finalResponse).status).toBe(200);
    expect(tx.state).toBe('Accepted');
    clock.advance(500);
    transport.deliverResponse(ok); // retransmission: the dialog must ACK it again
    transport.deliverResponse(reply(sentInvite, 200, { toTag: 'carol' })); // another branch of a fork
    expect(responses).toEqual(['200 bob', '200 bob', '200 carol']);
    expect(finals).toEqual([200]);
    expect(transport.requests('ACK')).toHaveLength(0);
    clock.advance(31_500); // Timer M = 64*T1
    expect(tx.state).toBe('Terminated');
    transport.deliverResponse(ok);
    expect(stray).toEqual(['200 bob']);
    expect(layer.stats().stray).toBe(1);
  });

  it('cancel() before any provisional response waits for one (RFC 3261 9.1), then sends a CANCEL built from the INVITE', async () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE', { routes: ['<sip:edge.example.net;lr>'] }), DEST);
    expect(tx.cancel({ headers: [['Reason', 'SIP;cause=487;text="caller hung up"']] })).toBe(true);
    clock.advance(1000);
    expect(transport.requests('CANCEL')).toHaveLength(0);
    const sentInvite = transport.requests('INVITE')[0]!;
    transport.deliverResponse(reply(sentInvite, 180, { toTag: 'bob' }));
    const cancels = transport.requests('CANCEL');
    expect(cancels).toHaveLength(1);
    const c = cancels[0]!;
    expect(c.uri.toString()).toBe(sentInvite.uri.toString());
    expect(c.callId).toBe(sentInvite.callId);
    expect(c.to.toString()).toBe(sentInvite.to.toString()); // the INVITE's To: no tag
    expect(c.to.tag).toBeUndefined();
    expect(c.from.toString()).toBe(sentInvite.from.toString());
    expect(c.cseq.toString()).toBe(`${sentInvite.cseq.seq} CANCEL`);
    expect(c.via.map(String)).toEqual([sentInvite.topVia!.toString()]);
    expect(c.routes.map(String)).toEqual(['<sip:edge.example.net;lr>']);
    expect(c.get('Reason')).toBe('SIP;cause=487;text="caller hung up"');
    expect(transport.sent.at(-1)!.destination).toEqual(DEST);

    // The CANCEL has its own non-INVITE client transaction (same branch, method CANCEL).
    const ctx = tx.cancelTransaction!;
    expect(ctx.kind).toBe('client-non-invite');
    expect(ctx.branch).toBe(tx.branch);
    transport.deliverResponse(reply(c, 200, { toTag: 'bob' }));
    expect((await ctx.finalResponse).status).toBe(200);
    transport.deliverResponse(reply(sentInvite, 487, { toTag: 'bob' }));
    expect((await tx.finalResponse).status).toBe(487);
    expect(transport.requests('ACK')).toHaveLength(1);
    expect(tx.cancel()).toBe(false);
    expect(transport.requests('CANCEL')).toHaveLength(1);
  });

  it('cancel() after a final response does nothing', () => {
    const { transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE'), DEST);
    transport.deliverResponse(reply(transport.requests('INVITE')[0]!, 200, { toTag: 'bob' }));
    expect(tx.cancel()).toBe(false);
    expect(transport.requests('CANCEL')).toHaveLength(0);
  });

  it('cancel() asked while waiting, then a final response arrives: no CANCEL ever', () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE'), DEST);
    tx.cancel();
    transport.deliverResponse(reply(transport.requests('INVITE')[0]!, 486, { toTag: 'bob' }));
    clock.advance(60_000);
    expect(transport.requests('CANCEL')).toHaveLength(0);
  });

  it('a CANCELled INVITE without final response within 64*T1 is considered cancelled (487 locally)', async () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE'), DEST);
    transport.deliverResponse(reply(transport.requests('INVITE')[0]!, 183, { toTag: 'bob' }));
    tx.cancel();
    const errors: SipTransactionError[] = [];
    tx.on('timeout', (e) => errors.push(e));
    clock.advance(32_000);
    expect(errors.map((e) => [e.code, e.timer, e.status])).toEqual([['SIP_TX_TIMEOUT', 'Cancel', 487]]);
    expect((await tx.finalResponse).status).toBe(487);
    expect(tx.state).toBe('Terminated');
    expect(layer.stats().timeouts.Cancel).toBe(1);
  });

  it('cancel() of a non-INVITE is a caller mistake', () => {
    const { layer } = setup();
    expect(() => layer.sendRequest(tuRequest('OPTIONS'), DEST).cancel()).toThrow(TypeError);
  });
});

describe('client non-INVITE transaction over UDP', () => {
  it('retransmits on Timer E doubling up to T2 (500, 1000, 2000, 4000, 4000 ...) until Timer F, then times out (408)', async () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('OPTIONS'), DEST);
    const at: number[] = [];
    tx.on('timeout', () => at.push(clock.now));
    clock.advance(40_000);
    expect(transport.sentAt(isMethod('OPTIONS'))).toEqual([0, 500, 1500, 3500, 7500, 11500, 15500, 19500, 23500, 27500, 31500]);
    expect(at).toEqual([32_000]);
    expect((await tx.finalResponse).status).toBe(408);
    expect(tx.error).toMatchObject({ code: 'SIP_TX_TIMEOUT', timer: 'F' });
    expect(layer.stats().timeouts.F).toBe(1);
  });

  it('after a provisional response, retransmits every T2', () => {
    const { clock, transport, layer } = setup();
    layer.sendRequest(tuRequest('OPTIONS'), DEST);
    clock.advance(600);
    transport.deliverResponse(reply(transport.requests('OPTIONS')[0]!, 100));
    clock.advance(40_000);
    expect(transport.sentAt(isMethod('OPTIONS'))).toEqual([0, 500, 1500, 5500, 9500, 13500, 17500, 21500, 25500, 29500]);
  });

  it('a final response: passed up once; retransmissions of it absorbed until Timer K = T4; then stray', async () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('OPTIONS'), DEST);
    const responses: number[] = [];
    const stray: number[] = [];
    tx.on('response', (r) => responses.push(r.status));
    layer.on('stray', (i) => stray.push(i.message.status));
    const ok = reply(transport.requests('OPTIONS')[0]!, 200, { toTag: 'x' });
    transport.deliverResponse(ok);
    expect((await tx.finalResponse).status).toBe(200);
    transport.deliverResponse(ok);
    expect(responses).toEqual([200]);
    expect(tx.state).toBe('Completed');
    clock.advance(4999);
    expect(tx.state).toBe('Completed');
    clock.advance(1);
    expect(tx.state).toBe('Terminated');
    transport.deliverResponse(ok);
    expect(stray).toEqual([200]);
    expect(transport.sent).toHaveLength(1);
  });
});

describe('reliable transports (TCP): no Timers A, E, G; D, I, J, K zero', () => {
  it('INVITE is sent once; Timer B still times it out', async () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE'), DEST_TCP);
    clock.advance(40_000);
    expect(transport.sentAt(isMethod('INVITE'))).toEqual([0]);
    expect(transport.requests('INVITE')[0]!.topVia!.transport).toBe('TCP');
    expect((await tx.finalResponse).status).toBe(408);
  });

  it('non-INVITE is sent once; the final response ends the transaction at once (K = 0)', () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('OPTIONS'), DEST_TCP);
    clock.advance(10_000);
    expect(transport.sent).toHaveLength(1);
    transport.deliverResponse(reply(transport.requests('OPTIONS')[0]!, 200, { toTag: 'x' }), PEER_TCP);
    expect(tx.state).toBe('Terminated');
  });

  it('INVITE 486: ACK sent, transaction ends at once (D = 0)', () => {
    const { transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('INVITE'), DEST_TCP);
    transport.deliverResponse(reply(transport.requests('INVITE')[0]!, 486, { toTag: 'b' }), PEER_TCP);
    expect(transport.requests('ACK')).toHaveLength(1);
    expect(tx.state).toBe('Terminated');
  });

  it('server INVITE 486: not retransmitted; the ACK ends the transaction at once (I = 0)', () => {
    const { clock, transport, layer } = setup();
    const txs = serve(layer, (tx) => answer(tx, 486));
    const invite = peerRequest('INVITE', { protocol: 'TCP' });
    transport.deliverRequest(invite, PEER_TCP, 'conn-1');
    clock.advance(20_000);
    expect(transport.responses(486)).toHaveLength(1);
    expect(transport.sent[0]!.connectionId).toBe('conn-1');
    transport.deliverRequest(peerRequest('ACK', { protocol: 'TCP', branch: invite.topVia!.branch }), PEER_TCP, 'conn-1');
    expect(txs[0]!.state).toBe('Terminated');
  });

  it('server non-INVITE: the final response ends the transaction at once (J = 0)', () => {
    const { transport, layer } = setup();
    const txs = serve(layer, (tx) => answer(tx, 200));
    transport.deliverRequest(peerRequest('OPTIONS', { protocol: 'TCP' }), PEER_TCP);
    expect(txs[0]!.state).toBe('Terminated');
    expect(layer.stats().active['server-non-invite']).toBe(0);
  });
});

// --------------------------------------------------------------------------------------------------

describe('server INVITE transaction over UDP', () => {
  it('sends 100 Trying when the TU has not answered within 200 ms (no To tag, Via copied)', () => {
    const { clock, transport, layer } = setup();
    serve(layer);
    transport.deliverRequest(peerRequest('INVITE'));
    clock.advance(199);
    expect(transport.sent).toHaveLength(0);
    clock.advance(1);
    const trying = transport.responses(100);
    expect(trying).toHaveLength(1);
    expect(trying[0]!.to.tag).toBeUndefined();
    expect(trying[0]!.topVia!.received).toBe(PEER.address);
    expect(transport.sent[0]!.destination).toEqual(PEER);
  });

  it('no 100 Trying when the TU answers within 200 ms', () => {
    const { clock, transport, layer } = setup();
    const txs = serve(layer);
    transport.deliverRequest(peerRequest('INVITE'));
    clock.advance(150);
    answer(txs[0]!, 180);
    clock.advance(10_000);
    expect(transport.sent.map((s) => (s.message as SipResponse).status)).toEqual([180]);
  });

  it('retransmitted INVITEs are absorbed: one request to the TU, the last provisional response sent again', () => {
    const { clock, transport, layer } = setup();
    const txs = serve(layer);
    const invite = peerRequest('INVITE');
    transport.deliverRequest(invite);
    answer(txs[0]!, 180);
    clock.advance(500);
    transport.deliverRequest(invite);
    clock.advance(1000);
    transport.deliverRequest(invite);
    expect(txs).toHaveLength(1);
    expect(transport.sentAt(isStatus(180))).toEqual([0, 500, 1500]);
    expect(layer.stats().absorbed).toBe(2);
  });

  it('3xx-6xx: retransmitted on Timer G (500, 1000, 2000, 4000, 4000 ...) until Timer H, which reports a timeout', () => {
    const { clock, transport, layer } = setup();
    const txs = serve(layer, (tx) => answer(tx, 486));
    transport.deliverRequest(peerRequest('INVITE'));
    const timeouts: number[] = [];
    txs[0]!.on('timeout', (e) => timeouts.push(e.timer === 'H' ? clock.now : -1));
    clock.advance(40_000);
    expect(transport.sentAt(isStatus(486))).toEqual([0, 500, 1500, 3500, 7500, 11500, 15500, 19500, 23500, 27500, 31500]);
    expect(timeouts).toEqual([32_000]);
    expect(txs[0]!.state).toBe('Terminated');
    expect(layer.stats().timeouts.H).toBe(1);
  });

  it('the ACK of the 3xx-6xx stops retransmissions, is absorbed (not passed up), and Timer I = T4 ends the transaction', () => {
    const { clock, transport, layer } = setup();
    const txs = serve(layer, (tx) => answer(tx, 486));
    const acks: unknown[] = [];
    layer.on('ack', (i) => acks.push(i));
    const invite = peerRequest('INVITE');
    transport.deliverRequest(invite);
    clock.advance(600);
    const ack = peerRequest('ACK', { branch: invite.topVia!.branch, toTag: 'uastag' });
    transport.deliverRequest(ack);
    expect(txs[0]!.state).toBe('Confirmed');
    transport.deliverRequest(ack);
    transport.deliverRequest(invite);
    clock.advance(4_000);
    expect(transport.sentAt(isStatus(486))).toEqual([0, 500]);
    expect(acks).toHaveLength(0);
    expect(txs[0]!.state).toBe('Confirmed');
    clock.advance(1_000);
    expect(txs[0]!.state).toBe('Terminated');
  });

  it('2xx: Accepted (RFC 6026) absorbs INVITE retransmissions, sends the TU\'s 2xx retransmissions, passes ACKs up; Timer L ends it', () => {
    const { clock, transport, layer } = setup();
    const txs = serve(layer);
    const acks: string[] = [];
    layer.on('ack', (i) => acks.push(i.message.topVia!.branch!));
    const invite = peerRequest('INVITE');
    transport.deliverRequest(invite);
    const ok = createResponse(txs[0]!.request, 200, undefined, { toTag: 'uastag' });
    txs[0]!.respond(ok);
    expect(txs[0]!.state).toBe('Accepted');
    clock.advance(500);
    transport.deliverRequest(invite); // the INVITE again: not a new request, nothing sent
    expect(txs).toHaveLength(1);
    expect(transport.sent).toHaveLength(1);
    txs[0]!.respond(ok); // the dialog layer retransmits its 2xx (RFC 3261 13.3.1.4)
    expect(transport.sentAt(isStatus(200))).toEqual([0, 500]);
    // The ACK for a 2xx is a transaction of its own: new branch, no match, straight to the TU.
    transport.deliverRequest(peerRequest('ACK', { toTag: 'uastag', branch: 'z9hG4bKack2xx' }));
    // An ACK that does carry the INVITE's branch matches the Accepted transaction: passed up too.
    transport.deliverRequest(peerRequest('ACK', { toTag: 'uastag', branch: invite.topVia!.branch }));
    expect(acks).toEqual(['z9hG4bKack2xx', invite.topVia!.branch]);
    expect(layer.stats().acks).toBe(2);
    txs[0]!.respond(createResponse(txs[0]!.request, 486, undefined, { toTag: 'uastag' })); // discarded
    expect(transport.responses(486)).toHaveLength(0);
    clock.advance(31_500);
    expect(txs[0]!.state).toBe('Terminated');
    // After Timer L the same INVITE would be a new request: why Accepted exists.
    transport.deliverRequest(invite);
    expect(txs).toHaveLength(2);
  });

  it('a server transaction is keyed by branch, sent-by and method: another sent-by is another transaction', () => {
    const { transport, layer } = setup();
    const txs = serve(layer);
    transport.deliverRequest(peerRequest('INVITE', { branch: 'z9hG4bKsame' }));
    transport.deliverRequest(peerRequest('INVITE', { branch: 'z9hG4bKsame', sentBy: ['198.51.100.99', 5060] }));
    transport.deliverRequest(peerRequest('OPTIONS', { branch: 'z9hG4bKsame' }));
    expect(txs).toHaveLength(3);
  });
});

describe('server non-INVITE transaction over UDP', () => {
  it('absorbs retransmissions in Trying, answers them with the last response after, until Timer J = 64*T1', () => {
    const { clock, transport, layer } = setup();
    const txs = serve(layer);
    const options = peerRequest('OPTIONS');
    transport.deliverRequest(options);
    clock.advance(500);
    transport.deliverRequest(options);
    expect(transport.sent).toHaveLength(0);
    answer(txs[0]!, 200);
    clock.advance(1000);
    transport.deliverRequest(options);
    expect(transport.sentAt(isStatus(200))).toEqual([500, 1500]);
    expect(txs).toHaveLength(1);
    clock.advance(31_000);
    expect(txs[0]!.state).toBe('Terminated');
    transport.deliverRequest(options);
    expect(txs).toHaveLength(2);
  });

  it('a second final response from the TU is discarded (RFC 3261 17.2.2)', () => {
    const { transport, layer } = setup();
    const txs = serve(layer, (tx) => {
      answer(tx, 200);
      answer(tx, 500);
    });
    const options = peerRequest('OPTIONS');
    transport.deliverRequest(options);
    transport.deliverRequest(options);
    expect(transport.sent.map((s) => (s.message as SipResponse).status)).toEqual([200, 200]);
    expect(txs[0]!.finalResponse?.status).toBe(200);
  });

  it('a provisional response is sent again to a retransmission in Proceeding', () => {
    const { transport, layer } = setup();
    serve(layer, (tx) => answer(tx, 100));
    const options = peerRequest('OPTIONS');
    transport.deliverRequest(options);
    transport.deliverRequest(options);
    expect(transport.responses(100)).toHaveLength(2);
  });
});

// --------------------------------------------------------------------------------------------------

describe('CANCEL on the server side (RFC 3261 9.2)', () => {
  it('answers the CANCEL 200 (the To tag of the INVITE\'s responses) and emits "cancel"; the TU answers the INVITE 487, whose ACK is absorbed', () => {
    const { transport, layer } = setup();
    const cancels: string[] = [];
    const txs = serve(layer, (tx) => {
      answer(tx, 180, 'uas1');
      tx.on('cancel', (c) => {
        cancels.push(c.message.method);
        answer(tx, 487, 'uas1');
      });
    });
    const invite = peerRequest('INVITE');
    transport.deliverRequest(invite);
    const cancel = peerRequest('CANCEL', { branch: invite.topVia!.branch });
    transport.deliverRequest(cancel);
    expect(cancels).toEqual(['CANCEL']);
    const ok = transport.sent.map((s) => s.message as SipResponse).find((r) => r.cseq.method === 'CANCEL')!;
    expect(ok.status).toBe(200);
    expect(ok.to.tag).toBe('uas1');
    const terminated = transport.responses(487);
    expect(terminated).toHaveLength(1);
    expect(terminated[0]!.cseq.method).toBe('INVITE');
    expect(txs).toHaveLength(1); // the CANCEL never reaches the TU as a request
    // A retransmitted CANCEL gets the 200 again and no second event.
    transport.deliverRequest(cancel);
    expect(cancels).toHaveLength(1);
    expect(transport.sent.filter((s) => (s.message as SipResponse).cseq.method === 'CANCEL')).toHaveLength(2);
    transport.deliverRequest(peerRequest('ACK', { branch: invite.topVia!.branch, toTag: 'uas1' }));
    expect(txs[0]!.state).toBe('Confirmed');
    expect(layer.stats().cancels).toEqual({ matched: 1, unmatched: 0 });
  });

  it('without a "cancel" listener, the layer answers the INVITE 487 itself', () => {
    const { transport, layer } = setup();
    serve(layer);
    const invite = peerRequest('INVITE');
    transport.deliverRequest(invite);
    transport.deliverRequest(peerRequest('CANCEL', { branch: invite.topVia!.branch }));
    expect(transport.responses(487)).toHaveLength(1);
    expect(transport.responses(200)).toHaveLength(1);
  });

  it('a CANCEL matching no transaction gets 481', () => {
    const { transport, layer } = setup();
    serve(layer);
    transport.deliverRequest(peerRequest('CANCEL', { branch: 'z9hG4bKunknown' }));
    const r = transport.responses();
    expect(r.map((x) => x.status)).toEqual([481]);
    expect(layer.stats().cancels.unmatched).toBe(1);
  });

  it('a CANCEL after the final response: 200, no effect on the INVITE', () => {
    const { transport, layer } = setup();
    const events: unknown[] = [];
    serve(layer, (tx) => {
      tx.on('cancel', (c) => events.push(c));
      answer(tx, 200);
    });
    const invite = peerRequest('INVITE');
    transport.deliverRequest(invite);
    transport.deliverRequest(peerRequest('CANCEL', { branch: invite.topVia!.branch }));
    expect(events).toHaveLength(0);
    expect(transport.sent.map((s) => `${(s.message as SipResponse).status} ${(s.message as SipResponse).cseq.method}`)).toEqual(['200 INVITE', '200 CANCEL']);
  });
});

describe('RFC 2543 peers (no magic cookie in the branch, RFC 3261 17.2.3)', () => {
  it('a retransmitted INVITE is absorbed, the ACK of a non-2xx matched, a CANCEL matched', () => {
    const { transport, layer } = setup();
    const cancels: unknown[] = [];
    const txs = serve(layer, (tx) => {
      answer(tx, 180, 'uas9');
      tx.on('cancel', (c) => {
        cancels.push(c);
        answer(tx, 487, 'uas9');
      });
    });
    const invite = peerRequest('INVITE', { branch: '' });
    expect(invite.topVia!.branch).toBeUndefined();
    transport.deliverRequest(invite);
    transport.deliverRequest(invite);
    expect(txs).toHaveLength(1);
    expect(transport.responses(180)).toHaveLength(2);
    transport.deliverRequest(peerRequest('CANCEL', { branch: '' }));
    expect(cancels).toHaveLength(1);
    expect(transport.responses(487)).toHaveLength(1);
    transport.deliverRequest(peerRequest('ACK', { branch: '', toTag: 'uas9' }));
    expect(txs[0]!.state).toBe('Confirmed');
    // An old-style INVITE with another CSeq is a new request.
    transport.deliverRequest(peerRequest('INVITE', { branch: '', cseq: 2 }));
    expect(txs).toHaveLength(2);
  });

  it('an old-style branch without the cookie (branch=1) matches by the request fields too', () => {
    const { transport, layer } = setup();
    const txs = serve(layer, (tx) => answer(tx, 200));
    const options = peerRequest('OPTIONS', { branch: '1' });
    transport.deliverRequest(options);
    transport.deliverRequest(options);
    expect(txs).toHaveLength(1);
    expect(transport.responses(200)).toHaveLength(2);
  });
});

// --------------------------------------------------------------------------------------------------

describe('transport errors', () => {
  it('client: a send that fails is a transport error (503 to the TU), reported after listeners are attached', async () => {
    for (const throwSync of [false, true]) {
      const { transport, layer } = setup();
      transport.failWhen = () => true;
      transport.throwSync = throwSync;
      const tx = layer.sendRequest(tuRequest('INVITE'), DEST);
      const errors: SipTransactionError[] = [];
      tx.on('transport-error', (e) => errors.push(e));
      await flush();
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ code: 'SIP_TX_TRANSPORT', status: 503 });
      expect((errors[0]!.cause as { code?: string }).code).toBe('SIP_TRANSPORT_SEND');
      expect((await tx.finalResponse).status).toBe(503);
      expect(tx.state).toBe('Terminated');
      expect(layer.stats().transportErrors).toBe(1);
    }
  });

  it('client: a retransmission that fails ends the transaction too', async () => {
    const { clock, transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('OPTIONS'), DEST);
    transport.failWhen = () => true;
    clock.advance(500);
    await flush();
    expect(tx.state).toBe('Terminated');
    expect(tx.error?.code).toBe('SIP_TX_TRANSPORT');
  });

  it('server non-INVITE: a response that cannot be sent ends the transaction', async () => {
    const { transport, layer } = setup();
    const errors: SipTransactionError[] = [];
    const txs = serve(layer, (tx) => {
      tx.on('transport-error', (e) => errors.push(e));
      answer(tx, 200);
    });
    transport.failWhen = () => true;
    transport.deliverRequest(peerRequest('OPTIONS'));
    await flush();
    expect(errors.map((e) => e.code)).toEqual(['SIP_TX_TRANSPORT']);
    expect(txs[0]!.state).toBe('Terminated');
  });

  it('server INVITE: the TU is informed and the state does not change (RFC 6026 figure 7)', async () => {
    const { transport, layer } = setup();
    const errors: SipTransactionError[] = [];
    const txs = serve(layer, (tx) => {
      tx.on('transport-error', (e) => errors.push(e));
    });
    transport.deliverRequest(peerRequest('INVITE'));
    transport.failWhen = () => true;
    answer(txs[0]!, 180);
    await flush();
    expect(errors).toHaveLength(1);
    expect(txs[0]!.state).toBe('Proceeding');
    transport.failWhen = undefined;
    answer(txs[0]!, 200);
    expect(txs[0]!.state).toBe('Accepted');
  });
});

// --------------------------------------------------------------------------------------------------

describe('the layer', () => {
  it('responses matching no client transaction go to the TU as stray', () => {
    const { transport, layer } = setup();
    const stray: number[] = [];
    layer.on('stray', (i) => stray.push(i.message.status));
    const req = peerRequest('INVITE');
    transport.deliverResponse(reply(req, 200, { toTag: 'x' }));
    expect(stray).toEqual([200]);
  });

  it('a request nobody listens for is answered 503', () => {
    const { transport } = setup();
    transport.deliverRequest(peerRequest('OPTIONS'));
    expect(transport.responses().map((r) => r.status)).toEqual([503]);
  });

  it('a "request" listener that throws before answering: 500, logged, other listeners still run', () => {
    const { transport, layer, warnings } = setup();
    let second = 0;
    layer.on('request', () => {
      throw new Error('boom');
    });
    layer.on('request', () => second++);
    transport.deliverRequest(peerRequest('MESSAGE'));
    expect(second).toBe(1);
    expect(transport.responses().map((r) => r.status)).toEqual([500]);
    expect(warnings.some(([o]) => (o as { code?: string }).code === 'SIP_TX_LISTENER')).toBe(true);
  });

  it('a throwing transaction listener does not break the transaction', async () => {
    const { transport, layer } = setup();
    const tx = layer.sendRequest(tuRequest('OPTIONS'), DEST);
    tx.on('final', () => {
      throw new Error('boom');
    });
    transport.deliverResponse(reply(transport.requests('OPTIONS')[0]!, 200, { toTag: 'x' }));
    expect((await tx.finalResponse).status).toBe(200);
    expect(tx.state).toBe('Completed');
  });

  it('sendRequest: keeps an unused RFC 3261 branch, replaces a used or old-style one, refuses ACK', () => {
    const { layer } = setup();
    const a = tuRequest('OPTIONS');
    a.prepend('Via', 'SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKmine');
    expect(layer.sendRequest(a, DEST).branch).toBe('z9hG4bKmine');
    const b = tuRequest('OPTIONS');
    b.prepend('Via', 'SIP/2.0/UDP 192.0.2.1:5060;branch=z9hG4bKmine');
    expect(layer.sendRequest(b, DEST).branch).not.toBe('z9hG4bKmine');
    const c = tuRequest('OPTIONS');
    c.prepend('Via', 'SIP/2.0/UDP 192.0.2.1:5060;branch=old');
    expect(layer.sendRequest(c, DEST).branch.startsWith('z9hG4bK')).toBe(true);
    expect(() => layer.sendRequest(tuRequest('ACK'), DEST)).toThrow(TypeError);
  });

  it('sendAck sends an ACK for a 2xx statelessly with its own branch', async () => {
    const { transport, layer } = setup();
    const ack = tuRequest('ACK');
    await layer.sendAck(ack, DEST);
    const sent = transport.requests('ACK');
    expect(sent).toHaveLength(1);
    expect(sent[0]!.topVia!.isRfc3261Branch).toBe(true);
    expect(layer.stats().created['client-non-invite']).toBe(0);
    await expect(layer.sendAck(tuRequest('BYE'), DEST)).rejects.toThrow(TypeError);
  });

  it('stats count transactions by kind', () => {
    const { transport, layer } = setup();
    serve(layer);
    layer.sendRequest(tuRequest('INVITE'), DEST);
    layer.sendRequest(tuRequest('OPTIONS'), DEST);
    transport.deliverRequest(peerRequest('INVITE'));
    transport.deliverRequest(peerRequest('BYE', { toTag: 't' }));
    const s = layer.stats();
    expect(s.active).toEqual({ 'client-invite': 1, 'client-non-invite': 1, 'server-invite': 1, 'server-non-invite': 1 });
    expect(s.created).toEqual(s.active);
  });

  it('close() ends every transaction, settles client ones with 503, ignores later traffic; idempotent', async () => {
    const { clock, transport, layer } = setup();
    const txs = serve(layer);
    const client = layer.sendRequest(tuRequest('INVITE'), DEST);
    transport.deliverRequest(peerRequest('INVITE'));
    const ended: string[] = [];
    client.on('terminated', () => ended.push('client'));
    txs[0]!.on('terminated', () => ended.push('server'));
    layer.close();
    layer.close();
    expect(layer.closed).toBe(true);
    expect(ended.sort()).toEqual(['client', 'server']);
    expect((await client.finalResponse).status).toBe(503);
    expect(client.error?.code).toBe('SIP_TX_CLOSED');
    const before = transport.sent.length;
    clock.advance(60_000);
    transport.deliverRequest(peerRequest('OPTIONS'));
    expect(transport.sent.length).toBe(before);
    expect(() => layer.sendRequest(tuRequest('OPTIONS'), DEST)).toThrow(SipTransactionError);
    expect(layer.stats().active).toEqual({ 'client-invite': 0, 'client-non-invite': 0, 'server-invite': 0, 'server-non-invite': 0 });
    expect(clock.pending).toBe(0);
  });

  it('takes the daemon\'s pino logger', () => {
    const layer = new TransactionLayer({ transport: new FakeTransport(), logger: createLogger('silent') });
    expect(layer.closed).toBe(false);
    layer.close();
  });

  it('shortened timers: T1 = 10 ms makes the whole INVITE schedule 64 times faster', () => {
    const { clock, transport, layer } = setup({ t1: 10, t2: 80, t4: 100 });
    layer.sendRequest(tuRequest('INVITE'), DEST);
    clock.advance(1000);
    expect(transport.sentAt(isMethod('INVITE'))).toEqual([0, 10, 30, 70, 150, 310, 630]);
    expect(layer.stats().timeouts.B).toBe(1);
  });
});
