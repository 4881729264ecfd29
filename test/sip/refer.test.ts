/**
 * REFER transfer as the transferor (RFC 3515, RFC 3420 sipfrag, RFC 6665 NOTIFY, RFC 4488
 * Refer-Sub): callbridge and a transferee (carrier/PBX) as two real Dialogs over in-memory
 * transports piped to each other on virtual time; the transferee's side is scripted per test.
 */
import { describe, expect, it } from 'vitest';
import { DialogManager, type Dialog } from '../../src/sip/dialog/index.ts';
import { createRequest, createResponse, parseUri, SipRequest, type SipResponse } from '../../src/sip/message/index.ts';
import { parseSipfrag, transferByRefer, type TransferOutcome } from '../../src/sip/dialog/refer.ts';
import { TransactionLayer, type ServerTransaction } from '../../src/sip/transaction/index.ts';
import type { Endpoint, TransportProtocol } from '../../src/sip/transport/types.ts';
import { FakeTransport, flush, LOCAL, VirtualClock, wire } from './transaction-fakes.ts';

const US: Endpoint = LOCAL; // callbridge, 192.0.2.1:5060
const PBX: Endpoint = { protocol: 'udp', address: '198.51.100.7', port: 5062 };
const SDP = 'v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n';
const TARGET = 'sip:+15550001111@203.0.113.9;user=phone';

/** A FakeTransport whose sends reach the peer's transport 1 ms later (virtual), like a wire. */
class Pipe extends FakeTransport {
  peer: Pipe | undefined;
  constructor(
    clock: VirtualClock,
    readonly self: Endpoint,
  ) {
    super(clock);
  }
  override localEndpoint(protocol: TransportProtocol): Endpoint {
    return { ...this.self, protocol };
  }
  override send(message: SipRequest | SipResponse, destination: Endpoint, connectionId?: string): Promise<void> {
    const p = super.send(message, destination, connectionId);
    const peer = this.peer;
    if (peer !== undefined) {
      const copy = wire(message);
      this.clock!.setTimeout(() => (copy instanceof SipRequest ? peer.deliverRequest(copy, this.self) : peer.deliverResponse(copy, this.self)), 1);
    }
    return p;
  }
}

/**
 * A confirmed call between callbridge and the PBX. `usRole` 'uas': the PBX called us (inbound);
 * 'uac': we called the PBX (outbound).
 */
function call(usRole: 'uas' | 'uac' = 'uas') {
  const clock = new VirtualClock();
  const usT = new Pipe(clock, US);
  const pbxT = new Pipe(clock, PBX);
  usT.peer = pbxT;
  pbxT.peer = usT;
  const warnings: string[] = [];
  const logger = { debug: () => {}, warn: (_o: object, m: string) => void warnings.push(m) };
  const usLayer = new TransactionLayer({ transport: usT, clock, logger });
  const pbxLayer = new TransactionLayer({ transport: pbxT, clock, logger });
  const usDialogs = new DialogManager({ layer: usLayer, clock, logger });
  const pbxDialogs = new DialogManager({ layer: pbxLayer, clock, logger });
  const [callerLayer, callerDialogs, calleeDialogs, calleeAt, callerContact, calleeContact] =
    usRole === 'uas'
      ? ([pbxLayer, pbxDialogs, usDialogs, US, '<sip:pbx@198.51.100.7:5062>', '<sip:callbridge@192.0.2.1:5060>'] as const)
      : ([usLayer, usDialogs, pbxDialogs, PBX, '<sip:callbridge@192.0.2.1:5060>', '<sip:pbx@198.51.100.7:5062>'] as const);
  let callee: Dialog | undefined;
  calleeDialogs.once('new-request', (tx, inbound) => {
    callee = calleeDialogs.fromInvite(tx, inbound, { localContact: calleeContact });
    callee.answer({ body: SDP, contentType: 'application/sdp' });
  });
  const tx = callerLayer.sendRequest(
    createRequest({ method: 'INVITE', uri: 'sip:callee@192.0.2.1', from: '<sip:caller@192.0.2.1>', to: '<sip:callee@192.0.2.1>', contact: callerContact, body: SDP, contentType: 'application/sdp' }),
    calleeAt,
  );
  let caller: Dialog | undefined;
  tx.on('final', (res) => {
    caller = callerDialogs.fromResponse(tx.request, res);
    caller.ack(res);
  });
  clock.advance(100);
  if (callee === undefined || caller === undefined) throw new Error('call not set up');
  const [us, pbx] = usRole === 'uas' ? [callee, caller] : [caller, callee];
  return { clock, usT, pbxT, us, pbx, warnings, logger };
}
type Env = ReturnType<typeof call>;

/** Advances virtual time in 100 ms steps, letting promises settle in between. */
async function run(clock: VirtualClock, ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 100) {
    clock.advance(Math.min(100, ms - t));
    await flush();
  }
}

/** The PBX sends a NOTIFY of the refer subscription with a sipfrag body. */
function notify(env: Env, frag: string, state = 'active;expires=60', o: { event?: string; contentType?: string } = {}): void {
  env.pbx.request('NOTIFY', {
    headers: [
      ['Event', o.event ?? 'refer'],
      ['Subscription-State', state],
    ],
    body: frag,
    contentType: o.contentType ?? 'message/sipfrag;version=2.0',
  });
}

/** The PBX answers the REFER with `status` and then runs `script` (NOTIFYs at virtual times). */
function pbxTakesRefer(env: Env, status: number, script: (refer: SipRequest) => void = () => {}, headers: [string, string][] = []): { refers: SipRequest[] } {
  const refers: SipRequest[] = [];
  env.pbx.on('refer', (tx: ServerTransaction, inbound) => {
    refers.push(inbound.message);
    tx.respond(createResponse(inbound.message, status, undefined, { headers }));
    script(inbound.message);
  });
  return { refers };
}

const notifyOks = (env: Env) => env.usT.responses().filter((r) => r.cseq.method === 'NOTIFY');
const at = (env: Env, ms: number, f: () => void) => env.clock.setTimeout(f, ms);

function track(p: Promise<TransferOutcome>): { outcome: TransferOutcome | undefined } {
  const s: { outcome: TransferOutcome | undefined } = { outcome: undefined };
  void p.then((o) => (s.outcome = o));
  return s;
}

describe('parseSipfrag (RFC 3420)', () => {
  it.each<[string, { status: number; reason: string } | undefined]>([
    ['SIP/2.0 100 Trying\r\n', { status: 100, reason: 'Trying' }],
    ['SIP/2.0 180 Ringing', { status: 180, reason: 'Ringing' }],
    ['\r\nSIP/2.0 200 OK\r\nContact: <sip:x@y>\r\n\r\n', { status: 200, reason: 'OK' }],
    ['SIP/2.0 486 Busy Here\r\n', { status: 486, reason: 'Busy Here' }],
    ['SIP/2.0 603\r\n', { status: 603, reason: '' }],
    ['sip/2.0 503 Service Unavailable', { status: 503, reason: 'Service Unavailable' }],
    ['', undefined],
    ['INVITE sip:bob@x SIP/2.0\r\n', undefined],
    ['SIP/2.0 99 Nope', undefined],
    ['SIP/2.0 700 Bad', undefined],
    ['HTTP/1.1 200 OK', undefined],
  ])('%j', (body, want) => {
    expect(parseSipfrag(body)).toEqual(want);
    expect(parseSipfrag(Buffer.from(body))).toEqual(want);
  });
});

describe('transferByRefer', () => {
  it.each(['uas', 'uac'] as const)('success: 202, NOTIFY 100 then 200 -> success, every NOTIFY answered 200 (we are %s)', async (role) => {
    const env = call(role);
    const { refers } = pbxTakesRefer(env, 202, () => {
      at(env, 10, () => notify(env, 'SIP/2.0 100 Trying\r\n'));
      at(env, 2000, () => notify(env, 'SIP/2.0 200 OK\r\n', 'terminated;reason=noresource'));
    });
    const progress: [number, string][] = [];
    const terminatedListeners = env.us.listenerCount('terminated'); // the manager's own
    const p = transferByRefer(env.us, { referTo: TARGET, referredBy: '<sip:agent-7@192.0.2.1>', clock: env.clock, onProgress: (s, r) => progress.push([s, r]) });
    expect(env.us.listenerCount('notify')).toBe(1);
    const s = track(p);
    await run(env.clock, 1000);
    expect(s.outcome).toBeUndefined();
    await run(env.clock, 2000);
    expect(s.outcome).toEqual({ outcome: 'success', status: 200, reason: 'OK' });
    expect(progress).toEqual([
      [100, 'Trying'],
      [200, 'OK'],
    ]);

    // The REFER on the wire (RFC 3515 2.1): Refer-To in angle brackets, the URI's parameters kept.
    const refer = env.usT.requests('REFER')[0]!;
    expect(refer.get('Refer-To')).toBe(`<${TARGET}>`);
    expect(String(refer.referTo!.uri)).toBe(TARGET);
    expect(refer.get('Referred-By')).toBe('<sip:agent-7@192.0.2.1>');
    expect(refer.has('Refer-Sub')).toBe(false);
    expect(refers).toHaveLength(1);
    expect(env.pbxT.responses(202)).toHaveLength(1);
    // Both NOTIFYs answered 200, matched by CSeq.
    const sent = env.pbxT.requests('NOTIFY');
    expect(sent).toHaveLength(2);
    expect(notifyOks(env).map((r) => [r.status, r.cseq.seq])).toEqual(sent.map((n) => [200, n.cseq.seq]));
    expect(env.us.listenerCount('notify')).toBe(0);
    expect(env.us.listenerCount('terminated')).toBe(terminatedListeners);
    expect(env.us.state).toBe('confirmed');
  });

  it('failure: NOTIFY 486 Busy Here -> failed 486', async () => {
    const env = call();
    pbxTakesRefer(env, 202, () => {
      at(env, 10, () => notify(env, 'SIP/2.0 100 Trying\r\n'));
      at(env, 500, () => notify(env, 'SIP/2.0 180 Ringing\r\n'));
      at(env, 1000, () => notify(env, 'SIP/2.0 486 Busy Here\r\n', 'terminated;reason=noresource'));
    });
    const progress: number[] = [];
    const s = track(transferByRefer(env.us, { referTo: parseUri(TARGET), clock: env.clock, onProgress: (st) => progress.push(st) }));
    await run(env.clock, 2000);
    expect(s.outcome).toEqual({ outcome: 'failed', status: 486, reason: 'Busy Here' });
    expect(progress).toEqual([100, 180, 486]);
    expect(notifyOks(env).map((r) => r.status)).toEqual([200, 200, 200]);
    expect(env.usT.requests('REFER')[0]!.has('Referred-By')).toBe(false);
  });

  it.each([405, 603, 403])('rejected: the REFER gets %i', async (status) => {
    const env = call();
    pbxTakesRefer(env, status);
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock }));
    await run(env.clock, 500);
    expect(s.outcome).toMatchObject({ outcome: 'rejected', status });
    expect(env.us.listenerCount('notify')).toBe(0);
  });

  it('rejected: a peer that takes no REFER answers 501 by default; a 481 ends the refer usage only (RFC 5057), not the call', async () => {
    const env = call();
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock }));
    await run(env.clock, 500);
    expect(s.outcome).toEqual({ outcome: 'rejected', status: 501, reason: 'Not Implemented' });
    expect(env.pbxT.responses(501)).toHaveLength(1);

    pbxTakesRefer(env, 481);
    const s2 = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock }));
    await run(env.clock, 500);
    expect(s2.outcome).toEqual({ outcome: 'rejected', status: 481, reason: 'Call/Transaction Does Not Exist' });
    expect(env.us.state).toBe('confirmed');
  });

  it('timeout: 202 and then nothing within timeoutMs; a later NOTIFY gets the dialog default', async () => {
    const env = call();
    pbxTakesRefer(env, 202, () => at(env, 10, () => notify(env, 'SIP/2.0 100 Trying\r\n')));
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock }));
    await run(env.clock, 29_800);
    expect(s.outcome).toBeUndefined();
    await run(env.clock, 300);
    expect(s.outcome).toEqual({ outcome: 'timeout', accepted: true, progress: 100 });
    expect(env.us.listenerCount('notify')).toBe(0);
    notify(env, 'SIP/2.0 200 OK\r\n', 'terminated');
    await run(env.clock, 100);
    expect(notifyOks(env).map((r) => r.status)).toEqual([200, 501]);
  });

  it('timeout with a custom timeoutMs and no answer to the REFER at all', async () => {
    const env = call();
    env.pbx.on('refer', () => {}); // takes it and never answers: the transaction answers nothing either
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock, timeoutMs: 5000 }));
    await run(env.clock, 4900);
    expect(s.outcome).toBeUndefined();
    await run(env.clock, 200);
    expect(s.outcome).toEqual({ outcome: 'timeout', accepted: false });
  });

  it('ended: the transferee hangs up meanwhile', async () => {
    const env = call();
    pbxTakesRefer(env, 202, () => {
      at(env, 10, () => notify(env, 'SIP/2.0 100 Trying\r\n'));
      at(env, 300, () => env.pbx.bye());
    });
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock }));
    await run(env.clock, 1000);
    expect(s.outcome).toEqual({ outcome: 'ended', reason: 'bye-received', accepted: true });
    expect(env.us.listenerCount('notify')).toBe(0);
  });

  it('ended at once when the dialog is already over (nothing sent)', async () => {
    const env = call();
    env.us.close();
    expect(await transferByRefer(env.us, { referTo: TARGET, clock: env.clock })).toEqual({ outcome: 'ended', reason: 'closed', accepted: false });
    expect(env.usT.requests('REFER')).toHaveLength(0);
  });

  it('Refer-Sub: false (RFC 4488): asked and granted -> accepted on the 202', async () => {
    const env = call();
    pbxTakesRefer(env, 202, undefined, [['Refer-Sub', 'false']]);
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock, noSubscription: true }));
    await run(env.clock, 100);
    expect(s.outcome).toEqual({ outcome: 'accepted', status: 202 });
    const refer = env.usT.requests('REFER')[0]!;
    expect(refer.get('Refer-Sub')).toBe('false');
    expect(refer.supported).toContain('norefersub');
    expect(env.us.listenerCount('notify')).toBe(0);
  });

  it('Refer-Sub: false asked but not granted -> waits for the NOTIFYs', async () => {
    const env = call();
    pbxTakesRefer(env, 202, () => at(env, 100, () => notify(env, 'SIP/2.0 200 OK\r\n', 'terminated')));
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock, noSubscription: true }));
    await run(env.clock, 50);
    expect(s.outcome).toBeUndefined();
    await run(env.clock, 200);
    expect(s.outcome).toEqual({ outcome: 'success', status: 200, reason: 'OK' });
  });

  it('accepted: the subscription ends without a final sipfrag', async () => {
    const env = call();
    pbxTakesRefer(env, 202, () => {
      at(env, 10, () => notify(env, 'SIP/2.0 100 Trying\r\n'));
      at(env, 500, () => notify(env, 'SIP/2.0 180 Ringing\r\n', 'terminated;reason=timeout'));
    });
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock }));
    await run(env.clock, 1000);
    expect(s.outcome).toEqual({ outcome: 'accepted', status: 202, progress: 180 });
    expect(notifyOks(env).map((r) => r.status)).toEqual([200, 200]);
  });

  it('answers 200 to a NOTIFY it cannot read and waits for the next one; a throwing onProgress is only logged', async () => {
    const env = call();
    pbxTakesRefer(env, 202, () => {
      at(env, 10, () => notify(env, 'garbage'));
      at(env, 20, () => notify(env, 'SIP/2.0 200 OK\r\n', 'active', { contentType: 'text/plain' }));
      at(env, 500, () => notify(env, 'SIP/2.0 200 OK\r\n', 'terminated'));
    });
    const s = track(
      transferByRefer(env.us, {
        referTo: TARGET,
        clock: env.clock,
        logger: env.logger,
        onProgress: () => {
          throw new Error('boom');
        },
      }),
    );
    await run(env.clock, 300);
    expect(s.outcome).toBeUndefined();
    expect(notifyOks(env).map((r) => r.status)).toEqual([200, 200]);
    await run(env.clock, 500);
    expect(s.outcome).toEqual({ outcome: 'success', status: 200, reason: 'OK' });
    expect(notifyOks(env).map((r) => r.status)).toEqual([200, 200, 200]);
    expect(env.warnings).toContain('a REFER onProgress callback threw');
  });

  it('matches Event: refer;id=<REFER CSeq> and answers other events 489 / no Event 400 when alone', async () => {
    const env = call();
    pbxTakesRefer(env, 202, (refer) => {
      at(env, 10, () => notify(env, 'SIP/2.0 200 OK\r\n', 'active', { event: 'presence' }));
      at(env, 20, () => env.pbx.request('NOTIFY', { body: 'SIP/2.0 200 OK\r\n', contentType: 'message/sipfrag' }));
      at(env, 500, () => notify(env, 'SIP/2.0 200 OK\r\n', 'terminated', { event: `refer;id=${refer.cseq.seq}` }));
    });
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock }));
    await run(env.clock, 300);
    expect(s.outcome).toBeUndefined();
    expect(notifyOks(env).map((r) => r.status)).toEqual([489, 400]);
    await run(env.clock, 500);
    expect(s.outcome).toEqual({ outcome: 'success', status: 200, reason: 'OK' });
    expect(notifyOks(env).map((r) => r.status)).toEqual([489, 400, 200]);
  });

  it('answers 481 to a NOTIFY of another REFER (RFC 6665 4.1.3) and does not take it as ours', async () => {
    const env = call();
    pbxTakesRefer(env, 202, (refer) => at(env, 10, () => notify(env, 'SIP/2.0 200 OK\r\n', 'terminated', { event: `refer;id=${refer.cseq.seq + 7}` })));
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock, timeoutMs: 1000 }));
    await run(env.clock, 1200);
    expect(notifyOks(env).map((r) => r.status)).toEqual([481]);
    expect(s.outcome).toEqual({ outcome: 'timeout', accepted: true });
  });

  it('leaves NOTIFYs of other subscriptions to the other listener', async () => {
    const env = call();
    const others: number[] = [];
    env.us.on('notify', (tx) => {
      if (tx.request.event?.value !== 'refer') {
        others.push(tx.request.cseq.seq);
        tx.respond(createResponse(tx.request, 202, 'Taken'));
      }
    });
    pbxTakesRefer(env, 202, () => {
      at(env, 10, () => notify(env, 'x', 'active', { event: 'dialog' }));
      at(env, 500, () => notify(env, 'SIP/2.0 200 OK\r\n', 'terminated'));
    });
    const s = track(transferByRefer(env.us, { referTo: TARGET, clock: env.clock }));
    await run(env.clock, 1000);
    expect(s.outcome).toMatchObject({ outcome: 'success' });
    expect(others).toHaveLength(1);
    expect(notifyOks(env).map((r) => r.status)).toEqual([202, 200]);
    expect(env.us.listenerCount('notify')).toBe(1);
  });

  it('takes a NOTIFY that overtakes the 202 (RFC 6665 4.1.2.4)', async () => {
    const env = call();
    env.pbx.on('refer', (tx, inbound) => {
      notify(env, 'SIP/2.0 200 OK\r\n', 'terminated');
      at(env, 50, () => tx.respond(createResponse(inbound.message, 202)));
    });
    const s = track(transferByRefer(env.us, { referTo: 'tel:+15550001111', clock: env.clock }));
    await run(env.clock, 200);
    expect(s.outcome).toEqual({ outcome: 'success', status: 200, reason: 'OK' });
    expect(env.usT.requests('REFER')[0]!.get('Refer-To')).toBe('<tel:+15550001111>');
    expect(notifyOks(env).map((r) => r.status)).toEqual([200]);
  });

  it('throws at once for a Refer-To that does not parse', () => {
    const env = call();
    expect(() => transferByRefer(env.us, { referTo: 'not a uri', clock: env.clock })).toThrow(TypeError);
    expect(() => transferByRefer(env.us, { referTo: TARGET, timeoutMs: 0, clock: env.clock })).toThrow(RangeError);
    expect(env.us.listenerCount('notify')).toBe(0);
    expect(env.usT.requests('REFER')).toHaveLength(0);
  });
});
