/**
 * RFC 4028 session timers: the negotiation helpers (table), the SessionTimer on virtual time, and
 * a carrier and callbridge as two real Dialogs over in-memory transports piped to each other.
 */
import { describe, expect, it } from 'vitest';
import { DialogManager, type Dialog } from '../../src/sip/dialog/index.ts';
import { createRequest, createResponse, createVia, parseMessage, SipRequest, type SipResponse } from '../../src/sip/message/index.ts';
import {
  expiryDelayMs,
  negotiateSessionTimerUas,
  peerAllowsUpdate,
  refreshDelayMs,
  refreshRetryDelayMs,
  refreshSessionByUpdate,
  resolveSessionTimerConfig,
  sessionRefreshHeaders,
  SessionTimer,
  sessionTimerFromUacResponse,
  sessionTimerRetryAfter422,
  sessionTimerUacHeaders,
  type NegotiatedSessionTimer,
  type SessionTimerConfig,
} from '../../src/sip/dialog/session-timer.ts';
import { TransactionLayer, type ServerTransaction } from '../../src/sip/transaction/index.ts';
import type { Endpoint, Inbound, TransportProtocol } from '../../src/sip/transport/types.ts';
import { FakeTransport, flush, LOCAL, VirtualClock, wire } from './transaction-fakes.ts';

// --- negotiation -----------------------------------------------------------------------------

/** An INVITE as received, with extra header lines written raw (compact forms included). */
function invite(...lines: string[]): SipRequest {
  const text = [
    'INVITE sip:+15557654321@192.0.2.1 SIP/2.0',
    'Via: SIP/2.0/UDP 198.51.100.7:5062;branch=z9hG4bKst1',
    'Max-Forwards: 70',
    'From: <sip:+15551230000@198.51.100.7>;tag=c1',
    'To: <sip:+15557654321@192.0.2.1>',
    'Call-ID: st-1@198.51.100.7',
    'CSeq: 1 INVITE',
    'Contact: <sip:carrier@198.51.100.7:5062>',
    ...lines,
    'Content-Length: 0',
    '',
    '',
  ].join('\r\n');
  return parseMessage(text) as SipRequest;
}

describe('negotiateSessionTimerUas (RFC 4028 9)', () => {
  const ST = 'Supported: timer';
  it.each<[string, string[], SessionTimerConfig, [string, string][], NegotiatedSessionTimer | undefined]>([
    ['refresher=uac kept, Require: timer', [ST, 'Session-Expires: 1800;refresher=uac', 'Min-SE: 90'], {}, [['Session-Expires', '1800;refresher=uac'], ['Require', 'timer']], { interval: 1800, refresher: 'remote' }],
    ['compact x and k', ['k: timer', 'x: 1800;refresher=uac'], {}, [['Session-Expires', '1800;refresher=uac'], ['Require', 'timer']], { interval: 1800, refresher: 'remote' }],
    ['refresher=uas: we refresh', [ST, 'Session-Expires: 1800;refresher=uas'], {}, [['Session-Expires', '1800;refresher=uas'], ['Require', 'timer']], { interval: 1800, refresher: 'local' }],
    ['no refresher, UAC supports: uac', [ST, 'Session-Expires: 1800'], {}, [['Session-Expires', '1800;refresher=uac'], ['Require', 'timer']], { interval: 1800, refresher: 'remote' }],
    ['Require: timer counts as support', ['Require: timer', 'Session-Expires: 1200'], {}, [['Session-Expires', '1200;refresher=uac'], ['Require', 'timer']], { interval: 1200, refresher: 'remote' }],
    ['UAC without timer: we refresh, no Require', ['Session-Expires: 1800;refresher=uac'], {}, [['Session-Expires', '1800;refresher=uas']], { interval: 1800, refresher: 'local' }],
    ['option tag and refresher case-insensitive, 90 s accepted', ['Supported: 100rel, Timer', 'Session-Expires: 90;refresher=UAS'], {}, [['Session-Expires', '90;refresher=uas'], ['Require', 'timer']], { interval: 90, refresher: 'local' }],
    ['interval not reduced', [ST, 'Session-Expires: 7200;refresher=uac'], {}, [['Session-Expires', '7200;refresher=uac'], ['Require', 'timer']], { interval: 7200, refresher: 'remote' }],
    ['absent, UAC supports: inserted', [ST], {}, [['Session-Expires', '1800;refresher=uac'], ['Require', 'timer']], { interval: 1800, refresher: 'remote' }],
    ['absent: inserted at least at their Min-SE', [ST, 'Min-SE: 3600'], {}, [['Session-Expires', '3600;refresher=uac'], ['Require', 'timer']], { interval: 3600, refresher: 'remote' }],
    ['absent: our configured interval', [ST], { interval: 600 }, [['Session-Expires', '600;refresher=uac'], ['Require', 'timer']], { interval: 600, refresher: 'remote' }],
    ['absent and insertWhenAbsent off', [ST], { insertWhenAbsent: false }, [], undefined],
    ['absent, no support: no timer', [], {}, [], undefined],
  ])('%s', (_name, lines, config, headers, timer) => {
    const d = negotiateSessionTimerUas(invite(...lines), config);
    expect(d).toEqual({ action: 'accept', headers, timer });
  });

  it('rejects an interval below our Min-SE with 422 and Min-SE (RFC 4028 6, 9)', () => {
    expect(negotiateSessionTimerUas(invite('Supported: timer', 'Session-Expires: 60'))).toEqual({
      action: 'reject',
      status: 422,
      reason: 'Session Interval Too Small',
      headers: [['Min-SE', '90']],
    });
    const d = negotiateSessionTimerUas(invite('Supported: timer', 'x: 200;refresher=uac'), { minSE: 300 });
    expect(d).toMatchObject({ action: 'reject', status: 422, headers: [['Min-SE', '300']] });
    // The 422 as the call layer sends it carries the header.
    if (d.action !== 'reject') throw new Error('expected reject');
    const res = wire(createResponse(invite(), d.status, d.reason, { toTag: 't', headers: d.headers }));
    expect(res.reason).toBe('Session Interval Too Small');
    expect(res.minSE).toBe(300);
  });

  it('answers 400 to a malformed Session-Expires or Min-SE', () => {
    expect(negotiateSessionTimerUas(invite('Session-Expires: soon'))).toMatchObject({ action: 'reject', status: 400 });
    expect(negotiateSessionTimerUas(invite('Session-Expires: 1800', 'Min-SE: x'))).toMatchObject({ action: 'reject', status: 400 });
  });

  it('on a refresh keeps the current refresher when the request names none', () => {
    const req = invite('Supported: timer', 'Session-Expires: 1800');
    expect(negotiateSessionTimerUas(req, {}, { interval: 1800, refresher: 'local' })).toMatchObject({
      headers: [['Session-Expires', '1800;refresher=uas'], ['Require', 'timer']],
      timer: { interval: 1800, refresher: 'local' },
    });
    expect(negotiateSessionTimerUas(req, {}, { interval: 1800, refresher: 'remote' })).toMatchObject({ timer: { refresher: 'remote' } });
    // A refresh without Session-Expires from a UAC without timer: we keep refreshing ourselves.
    expect(negotiateSessionTimerUas(invite(), {}, { interval: 1200, refresher: 'local' })).toEqual({
      action: 'accept',
      headers: [['Session-Expires', '1200;refresher=uas']],
      timer: { interval: 1200, refresher: 'local' },
    });
  });
});

describe('UAC helpers (RFC 4028 7)', () => {
  const req = createRequest({
    method: 'INVITE',
    uri: 'sip:bob@203.0.113.5',
    from: '<sip:cb@192.0.2.1>',
    to: '<sip:bob@203.0.113.5>',
    contact: '<sip:cb@192.0.2.1>',
    via: createVia('UDP', '192.0.2.1', 5060),
  });
  const res = (status: number, ...headers: [string, string][]): SipResponse => wire(createResponse(req, status, undefined, { toTag: 'b', headers }));

  it('puts Supported, Session-Expires and Min-SE on the INVITE', () => {
    expect(sessionTimerUacHeaders()).toEqual([
      ['Supported', 'timer'],
      ['Session-Expires', '1800'],
      ['Min-SE', '90'],
    ]);
    expect(sessionTimerUacHeaders({ interval: 900, minSE: 120 }, { refresher: 'uac' })).toEqual([
      ['Supported', 'timer'],
      ['Session-Expires', '900;refresher=uac'],
      ['Min-SE', '120'],
    ]);
  });

  it('reads the 2xx: refresher=uac is us, uas the peer, none no timer', () => {
    expect(sessionTimerFromUacResponse(res(200, ['Session-Expires', '1800;refresher=uac']))).toEqual({ interval: 1800, refresher: 'local' });
    expect(sessionTimerFromUacResponse(res(200, ['x', '900;refresher=uas']))).toEqual({ interval: 900, refresher: 'remote' });
    expect(sessionTimerFromUacResponse(res(200, ['Session-Expires', '1200']))).toEqual({ interval: 1200, refresher: 'local' });
    expect(sessionTimerFromUacResponse(res(200))).toBeUndefined();
    expect(sessionTimerFromUacResponse(res(200), { interval: 600 }, { refreshWhenAbsent: true })).toEqual({ interval: 600, refresher: 'local' });
  });

  it('retries a 422 with the Min-SE it carries, and not when that cannot help', () => {
    expect(sessionTimerRetryAfter422(res(422, ['Min-SE', '1800']), { interval: 600, minSE: 90 })).toEqual({
      interval: 1800,
      minSE: 1800,
      headers: [
        ['Supported', 'timer'],
        ['Session-Expires', '1800'],
        ['Min-SE', '1800'],
      ],
    });
    expect(sessionTimerRetryAfter422(res(422), { interval: 600, minSE: 90 })).toBeUndefined();
    expect(sessionTimerRetryAfter422(res(422, ['Min-SE', '300']), { interval: 600, minSE: 90 })).toBeUndefined();
  });

  it('writes refresh headers from our side as the UAC of the refresh; reads Allow; checks the config', () => {
    expect(sessionRefreshHeaders({ interval: 1800, refresher: 'local' })).toContainEqual(['Session-Expires', '1800;refresher=uac']);
    expect(sessionRefreshHeaders({ interval: 1800, refresher: 'remote' }, 120)).toEqual([
      ['Supported', 'timer'],
      ['Session-Expires', '1800;refresher=uas'],
      ['Min-SE', '120'],
    ]);
    expect(peerAllowsUpdate(invite('Allow: INVITE, ACK, BYE, CANCEL, UPDATE'))).toBe(true);
    expect(peerAllowsUpdate(invite('Allow: INVITE, ACK, BYE, CANCEL'))).toBe(false);
    expect(peerAllowsUpdate(invite())).toBe(false);
    expect(() => resolveSessionTimerConfig({ minSE: 60 })).toThrow(RangeError);
    expect(() => resolveSessionTimerConfig({ interval: 600, minSE: 900 })).toThrow(RangeError);
    expect(resolveSessionTimerConfig({ minSE: 3600 })).toEqual({ interval: 3600, minSE: 3600, insertWhenAbsent: true });
  });
});

// --- SessionTimer on virtual time --------------------------------------------------------------

describe('SessionTimer (RFC 4028 10)', () => {
  function logger() {
    const warnings: string[] = [];
    return { warnings, log: { debug: () => {}, warn: (_o: object, m: string) => void warnings.push(m) } };
  }

  it('uses N/2 for the refresh and N - min(32, N/3) for the expiry', () => {
    expect(refreshDelayMs(1800)).toBe(900_000);
    expect(expiryDelayMs(1800)).toBe(1_768_000);
    expect(expiryDelayMs(90)).toBe(60_000);
    expect(refreshRetryDelayMs(1800)).toBe(225_000);
  });

  it('as refresher calls refresh at N/2 and re-arms from each success', async () => {
    const clock = new VirtualClock();
    const calls: number[] = [];
    let expired = 0;
    const t = new SessionTimer({ interval: 1800, refresher: 'local', clock, refresh: async () => (calls.push(clock.now), true), expired: () => expired++ });
    clock.advance(899_999);
    expect(calls).toEqual([]);
    clock.advance(1);
    await flush();
    clock.advance(900_000);
    await flush();
    clock.advance(900_000);
    expect(calls).toEqual([900_000, 1_800_000, 2_700_000]);
    expect(t.refreshes).toBe(2);
    expect(expired).toBe(0);
    t.close();
    t.close();
    expect(t.closed).toBe(true);
    expect(clock.pending).toBe(0);
  });

  it('as non-refresher expires at N - min(32, N/3) unless refreshed; refreshed() re-arms', () => {
    const clock = new VirtualClock();
    const expiredAt: number[] = [];
    const t = new SessionTimer({ interval: 1800, refresher: 'remote', clock, refresh: () => Promise.resolve(true), expired: () => expiredAt.push(clock.now) });
    clock.advance(1_000_000);
    t.refreshed();
    clock.advance(1_767_999);
    expect(expiredAt).toEqual([]);
    t.refreshed(90, 'remote');
    clock.advance(60_000);
    expect(expiredAt).toEqual([2_827_999]);
    expect(t.expired).toBe(true);
    expect(t.closed).toBe(true);
    t.refreshed();
    clock.advance(10_000_000);
    expect(expiredAt).toHaveLength(1);
    expect(clock.pending).toBe(0);
  });

  it('retries a failed refresh every N/8 and expires at the deadline; callback errors are logged, not thrown', async () => {
    const clock = new VirtualClock();
    const { warnings, log } = logger();
    const calls: number[] = [];
    let expired = 0;
    const t = new SessionTimer({
      interval: 1800,
      refresher: 'local',
      clock,
      logger: log,
      refresh: () => {
        calls.push(clock.now);
        if (calls.length === 1) throw new Error('boom');
        return calls.length === 2 ? Promise.reject(new Error('nope')) : Promise.resolve(false);
      },
      expired: () => {
        expired++;
        throw new Error('bye failed');
      },
    });
    for (let i = 0; i < 20; i++) {
      clock.advance(100_000);
      await flush();
    }
    // 900 s throws; retried N/8 later (1125 s) it rejects, and 1425 s resolves false (each retry
    // counted from when the failure was seen, at the end of a 100 s step); the 1725 s try is cut
    // short by the expiry at 1768 s.
    expect(calls).toEqual([900_000, 1_125_000, 1_425_000, 1_725_000]);
    expect(expired).toBe(1);
    expect(t.expired).toBe(true);
    expect(warnings.filter((w) => w.startsWith('session refresh failed'))).toHaveLength(3);
    expect(warnings).toContain('the session timer expired callback threw');
  });

  it('a refresh that resolves after the session expired does nothing; switching to refresher starts refreshing', async () => {
    const clock = new VirtualClock();
    let release: (ok: boolean) => void = () => {};
    const calls: number[] = [];
    const t = new SessionTimer({
      interval: 90,
      refresher: 'remote',
      clock,
      refresh: () => (calls.push(clock.now), new Promise<boolean>((r) => (release = r))),
      expired: () => {},
    });
    t.refreshed(90, 'local');
    clock.advance(45_000);
    expect(calls).toEqual([45_000]);
    clock.advance(15_000); // 60 s: expired while the refresh hangs
    expect(t.expired).toBe(true);
    release(true);
    await flush();
    expect(t.refreshes).toBe(1);
    expect(clock.pending).toBe(0);
  });
});

// --- over two real dialogs -------------------------------------------------------------------

const US: Endpoint = LOCAL; // callbridge, 192.0.2.1:5060
const CARRIER: Endpoint = { protocol: 'udp', address: '198.51.100.7', port: 5062 };
const SDP = 'v=0\r\no=- 1 1 IN IP4 192.0.2.1\r\ns=-\r\nc=IN IP4 192.0.2.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n';

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

/** A carrier INVITEs callbridge with `inviteHeaders`; callbridge negotiates and answers 200. */
function call(inviteHeaders: [string, string][]) {
  const clock = new VirtualClock();
  const usT = new Pipe(clock, US);
  const carrierT = new Pipe(clock, CARRIER);
  usT.peer = carrierT;
  carrierT.peer = usT;
  const warnings: string[] = [];
  const logger = { debug: () => {}, warn: (_o: object, m: string) => void warnings.push(m) };
  const usDialogs = new DialogManager({ layer: new TransactionLayer({ transport: usT, clock, logger }), clock, logger });
  const carrierLayer = new TransactionLayer({ transport: carrierT, clock, logger });
  const carrierDialogs = new DialogManager({ layer: carrierLayer, clock, logger });

  let us: Dialog | undefined;
  let offer: SipRequest | undefined;
  let negotiated: NegotiatedSessionTimer | undefined;
  usDialogs.once('new-request', (tx, inbound) => {
    offer = inbound.message;
    const d = negotiateSessionTimerUas(offer);
    us = usDialogs.fromInvite(tx, inbound, { localContact: '<sip:callbridge@192.0.2.1:5060>' });
    if (d.action === 'reject') throw new Error('unexpected reject');
    negotiated = d.timer;
    us.answer({ headers: [...d.headers, ['Allow', 'INVITE, ACK, BYE, CANCEL, OPTIONS, UPDATE']], body: SDP, contentType: 'application/sdp' });
  });
  const req = createRequest({
    method: 'INVITE',
    uri: 'sip:+15557654321@192.0.2.1',
    from: '<sip:+15551230000@198.51.100.7>',
    to: '<sip:+15557654321@192.0.2.1>',
    contact: '<sip:carrier@198.51.100.7:5062>',
    headers: [['Allow', 'INVITE, ACK, BYE, CANCEL, OPTIONS, UPDATE'], ...inviteHeaders],
    body: SDP,
    contentType: 'application/sdp',
  });
  const tx = carrierLayer.sendRequest(req, US);
  let carrier: Dialog | undefined;
  let ok: SipResponse | undefined;
  tx.on('final', (res) => {
    ok = res;
    carrier = carrierDialogs.fromResponse(tx.request, res);
    carrier.ack(res);
  });
  clock.advance(100);
  if (us === undefined || carrier === undefined || ok === undefined || offer === undefined) throw new Error('call not set up');
  return { clock, usT, carrierT, us, carrier, ok, offer, negotiated, warnings };
}

/** Advances virtual time in 1 s steps, letting promises settle in between. */
async function run(clock: VirtualClock, ms: number): Promise<void> {
  for (let t = 0; t < ms; t += 1000) {
    clock.advance(Math.min(1000, ms - t));
    await flush();
  }
}

const byes = (t: FakeTransport) => t.requests('BYE');

/** The carrier as UAS of our UPDATEs: negotiates like any RFC 4028 UAS and answers. */
function carrierAnswersUpdates(carrier: Dialog, answer?: (tx: ServerTransaction, req: SipRequest) => boolean, onRefresh?: (t: NegotiatedSessionTimer) => void): void {
  carrier.on('update', (tx: ServerTransaction, inbound: Inbound<SipRequest>) => {
    const req = inbound.message;
    if (answer?.(tx, req)) return;
    const d = negotiateSessionTimerUas(req);
    if (d.action === 'reject') {
      tx.respond(createResponse(req, d.status, d.reason, { headers: d.headers }));
      return;
    }
    tx.respond(createResponse(req, 200, undefined, { headers: d.headers }));
    if (d.timer) onRefresh?.(d.timer);
  });
}

describe('SessionTimer over two dialogs', () => {
  it('as refresher (refresher=uas) callbridge UPDATEs every 900 s and the carrier keeps the call for 3 hours', async () => {
    const env = call([
      ['Supported', 'timer'],
      ['Session-Expires', '1800;refresher=uas'],
      ['Min-SE', '90'],
    ]);
    // Our 2xx: Session-Expires with refresher=uas and Require: timer (RFC 4028 9).
    const our2xx = env.usT.responses(200).find((r) => r.cseq.method === 'INVITE');
    expect(our2xx?.get('Session-Expires')).toBe('1800;refresher=uas');
    expect(our2xx?.require).toEqual(['timer']);
    expect(env.negotiated).toEqual({ interval: 1800, refresher: 'local' });

    // The carrier's side: it reads our 2xx (it is not the refresher) and watches for refreshes.
    const carrierView = sessionTimerFromUacResponse(env.ok)!;
    expect(carrierView).toEqual({ interval: 1800, refresher: 'remote' });
    const carrierTimer = new SessionTimer({ ...carrierView, clock: env.clock, dialog: env.carrier, refresh: async () => true, expired: () => void env.carrier.bye() });
    carrierAnswersUpdates(env.carrier, undefined, (t) => carrierTimer.refreshed(t.interval, t.refresher));

    const allowsUpdate = peerAllowsUpdate(env.offer);
    const timer: SessionTimer = new SessionTimer({
      ...env.negotiated!,
      clock: env.clock,
      dialog: env.us,
      refresh: async () => {
        const r = await refreshSessionByUpdate(env.us, { timer: { interval: timer.interval, refresher: 'local' }, peerAllowsUpdate: allowsUpdate });
        if (r.ok) timer.refreshed(r.timer.interval, r.timer.refresher);
        return r.ok;
      },
      expired: () => void env.us.bye(),
    });
    const start = env.clock.now;
    await run(env.clock, 3 * 3600_000);

    const updates = env.usT.sent.filter((s) => s.message instanceof SipRequest && s.message.method === 'UPDATE');
    expect(updates.length).toBe(11);
    expect(updates[0]!.at - start).toBe(900_000);
    for (let i = 1; i < updates.length; i++) {
      const gap = updates[i]!.at - updates[i - 1]!.at;
      expect(gap).toBeGreaterThanOrEqual(900_000);
      expect(gap).toBeLessThanOrEqual(901_000);
    }
    const u = updates[0]!.message as SipRequest;
    expect(u.get('Session-Expires')).toBe('1800;refresher=uac');
    expect(u.supported).toContain('timer');
    expect(u.body.length).toBe(0);
    // Every UPDATE answered 200 with the session timer, Require: timer.
    const oks = env.carrierT.responses(200).filter((r) => r.cseq.method === 'UPDATE');
    expect(oks).toHaveLength(11);
    expect(oks.every((r) => r.get('Session-Expires') === '1800;refresher=uac' && r.require.includes('timer'))).toBe(true);
    expect(timer.refreshes).toBe(11);
    expect(carrierTimer.refreshes).toBe(11);
    expect(byes(env.usT)).toHaveLength(0);
    expect(byes(env.carrierT)).toHaveLength(0);
    expect(env.us.state).toBe('confirmed');
    expect(env.carrier.state).toBe('confirmed');
    timer.close();
    carrierTimer.close();
  });

  it('as refresher whose UPDATEs fail (500): retries every N/8, then BYE at N - min(32, N/3)', async () => {
    const env = call([
      ['Supported', 'timer'],
      ['Session-Expires', '1800;refresher=uas'],
    ]);
    carrierAnswersUpdates(env.carrier, (tx, req) => (tx.respond(createResponse(req, 500)), true));
    const start = env.clock.now;
    let expired = 0;
    const timer = new SessionTimer({
      ...env.negotiated!,
      clock: env.clock,
      dialog: env.us,
      refresh: async () => (await refreshSessionByUpdate(env.us, { timer: env.negotiated!, peerAllowsUpdate: true })).ok,
      expired: () => {
        expired++;
        env.us.bye();
      },
    });
    await run(env.clock, 2000_000);
    const updates = env.usT.sentAt((m) => m instanceof SipRequest && m.method === 'UPDATE').map((t) => t - start);
    expect(updates).toHaveLength(4);
    expect(updates[0]).toBe(900_000);
    const bye = env.usT.sentAt((m) => m instanceof SipRequest && m.method === 'BYE');
    expect(bye).toEqual([start + 1_768_000]);
    expect(expired).toBe(1);
    expect(timer.expired).toBe(true);
    expect(env.us.state).toBe('terminated');
    expect(env.carrier.state).toBe('terminated');
  });

  it('as non-refresher: a carrier re-INVITEing every 900 s keeps the call for 4 hours; when it stops, BYE at last refresh + 1768 s', async () => {
    const env = call([
      ['Supported', 'timer'],
      ['Session-Expires', '1800;refresher=uac'],
      ['Min-SE', '90'],
    ]);
    expect(env.negotiated).toEqual({ interval: 1800, refresher: 'remote' });
    let expired = 0;
    const timer = new SessionTimer({
      ...env.negotiated!,
      clock: env.clock,
      dialog: env.us,
      refresh: async () => true,
      expired: () => {
        expired++;
        env.us.bye();
      },
    });
    // callbridge's answer to a refresh: negotiate, answer with the same SDP, re-arm.
    const refreshedAt: number[] = [];
    env.us.on('reinvite', (tx, inbound) => {
      const d = negotiateSessionTimerUas(inbound.message, {}, { interval: timer.interval, refresher: timer.refresher });
      if (d.action === 'reject') return void tx.respond(createResponse(inbound.message, d.status, d.reason, { headers: d.headers }));
      env.us.answer({ headers: d.headers, body: SDP, contentType: 'application/sdp' }, tx);
      if (d.timer) timer.refreshed(d.timer.interval, d.timer.refresher);
      refreshedAt.push(env.clock.now);
    });
    // The carrier refreshes with re-INVITE (same SDP) every 900 s while `refreshing`.
    let refreshing = true;
    const carrierRefresh = (): void => {
      if (!refreshing || env.carrier.terminated) return;
      const tx = env.carrier.request('INVITE', { headers: sessionRefreshHeaders({ interval: 1800, refresher: 'local' }), body: SDP, contentType: 'application/sdp' });
      tx.on('final', (res) => res.status < 300 && env.carrier.ack(res));
      env.clock.setTimeout(carrierRefresh, 900_000);
    };
    env.clock.setTimeout(carrierRefresh, 900_000);

    await run(env.clock, 4 * 3600_000 + 10_000);
    expect(refreshedAt).toHaveLength(16);
    expect(timer.refreshes).toBe(16);
    expect(byes(env.usT)).toHaveLength(0);
    expect(env.us.state).toBe('confirmed');
    const reOk = env.usT.responses(200).filter((r) => r.cseq.method === 'INVITE' && r.cseq.seq > 1);
    expect(reOk).toHaveLength(16);
    expect(reOk.every((r) => r.get('Session-Expires') === '1800;refresher=uac' && r.require.includes('timer'))).toBe(true);

    refreshing = false;
    await run(env.clock, 1800_000);
    expect(expired).toBe(1);
    expect(env.usT.sentAt((m) => m instanceof SipRequest && m.method === 'BYE')).toEqual([refreshedAt.at(-1)! + 1_768_000]);
    expect(env.us.state).toBe('terminated');
    expect(timer.closed).toBe(true);
  });

  it('takes UPDATE refreshes from the peer, 422s one below Min-SE, and closes with the dialog', async () => {
    const env = call([
      ['Supported', 'timer'],
      ['Session-Expires', '1800;refresher=uac'],
    ]);
    const timer = new SessionTimer({ ...env.negotiated!, clock: env.clock, dialog: env.us, refresh: async () => true, expired: () => void env.us.bye() });
    env.us.on('update', (tx, inbound) => {
      const d = negotiateSessionTimerUas(inbound.message, {}, { interval: timer.interval, refresher: timer.refresher });
      if (d.action === 'reject') return void tx.respond(createResponse(inbound.message, d.status, d.reason, { headers: d.headers }));
      tx.respond(createResponse(inbound.message, 200, undefined, { headers: d.headers }));
      if (d.timer) timer.refreshed(d.timer.interval, d.timer.refresher);
    });
    const bad = env.carrier.request('UPDATE', { headers: [['Supported', 'timer'], ['Session-Expires', '30;refresher=uac']] });
    await run(env.clock, 1000);
    const rejected = await bad.finalResponse;
    expect(rejected.status).toBe(422);
    expect(rejected.minSE).toBe(90);
    expect(timer.refreshes).toBe(0);

    env.carrier.request('UPDATE', { headers: sessionRefreshHeaders({ interval: 600, refresher: 'local' }) });
    await run(env.clock, 1000);
    expect(timer.refreshes).toBe(1);
    expect(timer.interval).toBe(600);
    expect(timer.refresher).toBe('remote');

    env.carrier.bye();
    await run(env.clock, 1000);
    expect(env.us.state).toBe('terminated');
    expect(timer.closed).toBe(true);
    expect(timer.expired).toBe(false);
    expect(byes(env.usT)).toHaveLength(0);
  });

  it('refreshSessionByUpdate: not allowed (nothing sent), 405 rejected, 422 retried once with the higher Min-SE', async () => {
    const env = call([
      ['Supported', 'timer'],
      ['Session-Expires', '1800;refresher=uas'],
    ]);
    const timer = { interval: 1800, refresher: 'local' } as const;
    expect(await refreshSessionByUpdate(env.us, { timer, peerAllowsUpdate: false })).toEqual({ ok: false, reason: 'update-not-allowed' });
    expect(env.usT.requests('UPDATE')).toHaveLength(0);

    let mode: 405 | 422 = 405;
    carrierAnswersUpdates(env.carrier, (tx, req) => {
      if (mode === 405) tx.respond(createResponse(req, 405));
      else if (req.sessionExpires!.seconds < 3600) tx.respond(createResponse(req, 422, undefined, { headers: [['Min-SE', '3600']] }));
      else return false;
      return true;
    });
    let p = refreshSessionByUpdate(env.us, { timer, peerAllowsUpdate: true });
    await run(env.clock, 1000);
    expect(await p).toMatchObject({ ok: false, reason: 'rejected', status: 405 });

    mode = 422;
    p = refreshSessionByUpdate(env.us, { timer, peerAllowsUpdate: true });
    await run(env.clock, 3000); // the retry goes out after the 422 is seen: a second step
    const r = await p;
    expect(r).toMatchObject({ ok: true, timer: { interval: 3600, refresher: 'local' } });
    const sent = env.usT.requests('UPDATE').slice(1);
    expect(sent.map((u) => [u.get('Session-Expires'), u.minSE])).toEqual([
      ['1800;refresher=uac', 90],
      ['3600;refresher=uac', 3600],
    ]);

    env.us.close();
    expect(await refreshSessionByUpdate(env.us, { timer, peerAllowsUpdate: true })).toEqual({ ok: false, reason: 'dialog-terminated' });
  });
});
