/**
 * RFC 4028 session timers at the call level (src/sip/ua/call.ts, uas.ts, outbound-call.ts,
 * ua/user-agent.ts) over real loopback sockets. The far end is made of our own SIP layers
 * (SipTransportLayer on 127.0.0.1:0 + TransactionLayer + DialogManager), as in
 * user-agent.test.ts; every assertion is on what crosses the wire.
 *
 * The user agent gets `sessionClock: VirtualClock`: only the calls' session timers run on it,
 * so hours of RFC 4028 time pass in a few advance() calls while SIP transactions (retransmission,
 * 2xx/ACK) keep real time. A fresh user agent, clock and peer per test: a call left over from
 * another test can never fire on this test's clock.
 *
 *   1  peer refreshes (refresher=uac): re-INVITE every 900 s keeps the call; silence -> BYE at 1768 s
 *   2  we refresh (refresher=uas), peer allows UPDATE: UPDATE without body every 45 s
 *   3  we refresh, peer's Allow has no UPDATE: re-INVITE with our SDP, ACKed, o= version kept
 *   4  Session-Expires below our Min-SE: 422 + Min-SE, no call
 *   5  Supported: timer without Session-Expires: we insert 1800;refresher=uac (RFC 4028 9)
 *   6  outbound: INVITE asks for a timer, the 2xx makes us the refresher: UPDATE / re-INVITE at N/2
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { PortAllocator, type RtpPortPair } from '../../src/media/port-allocator.ts';
import type { HangupInfo, SipCall } from '../../src/sip/ua/call.ts';
import type { Dialog } from '../../src/sip/dialog/index.ts';
import { DialogManager } from '../../src/sip/dialog/index.ts';
import type { InboundDirectory, InboundRoute, InboundTrunk } from '../../src/sip/ua/inbound-routing.ts';
import { createRequest, createResponse, type SipRequest, type SipResponse } from '../../src/sip/message/index.ts';
import type { OutboundTrunk } from '../../src/sip/ua/outbound-call.ts';
import { TransactionLayer } from '../../src/sip/transaction/index.ts';
import { SipTransportLayer } from '../../src/sip/transport/index.ts';
import type { UasLogger } from '../../src/sip/ua/uas.ts';
import { SipUserAgent } from '../../src/sip/ua/index.ts';
import { VirtualClock } from './transaction-fakes.ts';

const NUMBER = '+15550003000';
const CALLER = '+15559990000';
const ALLOW_WITH_UPDATE = 'INVITE, ACK, CANCEL, BYE, OPTIONS, UPDATE';
const ALLOW_WITHOUT_UPDATE = 'INVITE, ACK, CANCEL, BYE, OPTIONS';

const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function until(cond: () => boolean, what: string, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await delay(2);
  }
}

/** Real time for a request that would have left on a virtual-clock tick to cross loopback. */
const SETTLE_MS = 40;

/** A VirtualClock that counts arming: a session timer re-arms (two setTimeouts) on every refresh. */
class CountingClock extends VirtualClock {
  armed = 0;

  override setTimeout(cb: () => void, ms: number): unknown {
    this.armed++;
    return super.setTimeout(cb, ms);
  }
}

/** 127.0.0.1 is an ACL trunk whose every number routes to an active agent: no database. */
const TRUNK: InboundTrunk = { id: 'trunk-loopback', orgId: 'org-1', name: 'loopback pbx', authType: 'acl' };
const directory: InboundDirectory = {
  aclTrunksFor: (address) => (address === '127.0.0.1' ? [TRUNK] : []),
  digestAccount: () => undefined,
  routeAcl: (_trunks, user): InboundRoute => ({ orgId: TRUNK.orgId, agentId: 'agent-1', via: 'alternate_number', number: user, trunkId: TRUNK.id, agentActive: true }),
  routeDigest: () => undefined,
  digestRouteMayExist: () => false,
};

/** What callbridge logs, kept for failure messages. */
function memoryLogger(lines: string[]): UasLogger {
  const log =
    (level: string) =>
    (obj: object, msg?: string): void => {
      lines.push(`${level} ${msg ?? ''} ${JSON.stringify(obj, (_k, v: unknown) => (v instanceof Error ? v.message : v))}`);
    };
  return { debug: () => {}, info: log('info'), warn: log('warn'), error: log('error') };
}

/** An SDP of the peer: PCMU, PCMA, telephone-event by default. */
function sdp(port: number, o: { version?: number; formats?: string; rtpmaps?: string[] } = {}): string {
  const rtpmaps = o.rtpmaps ?? ['a=rtpmap:0 PCMU/8000', 'a=rtpmap:8 PCMA/8000', 'a=rtpmap:101 telephone-event/8000', 'a=fmtp:101 0-15'];
  return ['v=0', `o=- 3001 ${o.version ?? 1} IN IP4 127.0.0.1`, 's=-', 'c=IN IP4 127.0.0.1', 't=0 0', `m=audio ${port} RTP/AVP ${o.formats ?? '0 8 101'}`, ...rtpmaps, 'a=ptime:20', 'a=sendrecv', ''].join('\r\n');
}

/** A PCMU-only answer (what a carrier sends back to our multi-codec offer). */
function pcmuAnswer(port: number): string {
  return sdp(port, { formats: '0 101', rtpmaps: ['a=rtpmap:0 PCMU/8000', 'a=rtpmap:101 telephone-event/8000', 'a=fmtp:101 0-15'] });
}

const originOf = (body: string): string | undefined => /^o=.*$/m.exec(body)?.[0]?.trim();
const mLineOf = (body: string): string | undefined => /^m=.*$/m.exec(body)?.[0]?.trim();

/** The far end: a PBX or carrier made of our own SIP layers on loopback. */
class Peer {
  readonly transport = new SipTransportLayer({ listen: [{ protocol: 'udp', address: '127.0.0.1', port: 0 }] });
  readonly layer = new TransactionLayer({ transport: this.transport });
  readonly dialogs = new DialogManager({ layer: this.layer });
  /** Every request callbridge sent us (ACKs and retransmissions included). */
  readonly received: SipRequest[] = [];
  rtp!: RtpPortPair;

  async start(): Promise<this> {
    this.transport.on('request', (inbound) => this.received.push(inbound.message));
    await this.transport.start();
    // A real RTP/RTCP pair, so callbridge's media goes somewhere.
    this.rtp = await new PortAllocator({ min: 43000, max: 43999, address: '127.0.0.1' }).allocate();
    return this;
  }

  get port(): number {
    return this.transport.endpoints[0]!.port;
  }

  get contact(): string {
    return `<sip:pbx@127.0.0.1:${this.port}>`;
  }

  /** Requests of one method from callbridge, retransmissions folded (by CSeq). */
  requests(method: string): SipRequest[] {
    const seen = new Set<number>();
    return this.received.filter((r) => {
      if (r.method !== method || seen.has(r.cseq.seq)) return false;
      seen.add(r.cseq.seq);
      return true;
    });
  }

  /** INVITE to callbridge on `sipPort` with our offer and these headers; the final response. */
  async invite(sipPort: number, headers: [string, string][]): Promise<{ request: SipRequest; final: SipResponse }> {
    const req = createRequest({
      method: 'INVITE',
      uri: `sip:${NUMBER}@127.0.0.1:${sipPort}`,
      from: `<sip:${CALLER}@127.0.0.1:${this.port}>`,
      to: `<sip:${NUMBER}@127.0.0.1:${sipPort}>`,
      contact: this.contact,
      headers,
      body: sdp(this.rtp.rtpPort),
      contentType: 'application/sdp',
    });
    const tx = this.layer.sendRequest(req, { protocol: 'udp', address: '127.0.0.1', port: sipPort });
    return { request: tx.request, final: await tx.finalResponse };
  }

  /** INVITE, 200, ACK: the confirmed dialog and the 200. */
  async call(sipPort: number, headers: [string, string][]): Promise<{ dialog: Dialog; ok: SipResponse }> {
    const { request, final } = await this.invite(sipPort, headers);
    expect(final.status, `${final.status} ${final.reason}`).toBe(200);
    const dialog = this.dialogs.fromResponse(request, final);
    dialog.ack(final);
    return { dialog, ok: final };
  }

  /**
   * Answers in-dialog session refreshes from callbridge: an UPDATE 200 without body, a re-INVITE
   * 200 with `answerSdp`; both echo the request's Session-Expires (its refresher names the role
   * in that transaction: refresher=uac keeps callbridge the refresher) and Require: timer.
   */
  answerRefreshes(dialog: Dialog, answerSdp: string): { acks: number } {
    const state = { acks: 0 };
    const timerHeaders = (req: SipRequest): [string, string][] => [
      ['Session-Expires', req.get('Session-Expires') ?? ''],
      ['Require', 'timer'],
    ];
    dialog.on('update', (tx, inbound) => {
      const req = inbound.message;
      tx.respond(createResponse(req, 200, undefined, { headers: [['Contact', this.contact], ...timerHeaders(req)] }));
    });
    dialog.on('reinvite', (tx, inbound) => {
      dialog.answer({ body: answerSdp, contentType: 'application/sdp', headers: timerHeaders(inbound.message) }, tx);
    });
    dialog.on('ack', () => state.acks++);
    return state;
  }

  async close(): Promise<void> {
    this.rtp?.close();
    this.dialogs.close();
    this.layer.close();
    await this.transport.close();
  }
}

interface Fixture {
  clock: CountingClock;
  ua: SipUserAgent;
  peer: Peer;
  sipPort: number;
  /** Inbound calls delivered (each answered at once). */
  calls: SipCall[];
  /** Hangups seen, with the virtual time they happened at. */
  hangups: Map<SipCall, { info: HangupInfo; at: number }>;
  log: string[];
}

let fx: Fixture;

function watchHangup(call: SipCall): void {
  call.on('hangup', (info) => fx.hangups.set(call, { info, at: fx.clock.now }));
}

beforeEach(async () => {
  const clock = new CountingClock();
  const log: string[] = [];
  const ua = new SipUserAgent({
    listen: [{ protocol: 'udp', address: '127.0.0.1', port: 0 }],
    directory,
    ports: new PortAllocator({ min: 40000, max: 40999, address: '127.0.0.1' }),
    mediaAddress: '127.0.0.1',
    mediaTimeoutMs: 0,
    logger: memoryLogger(log),
    sessionTimer: { interval: 1800, minSE: 90 },
    sessionClock: clock,
  });
  await ua.start();
  const peer = await new Peer().start();
  fx = { clock, ua, peer, sipPort: ua.endpoints[0]!.port, calls: [], hangups: new Map(), log };
  ua.onInboundCall((call) => {
    fx.calls.push(call);
    watchHangup(call);
    call.answer();
  });
});

afterEach(async () => {
  await fx.ua.close();
  await fx.peer.close();
});

/** The one inbound call of the test, once delivered. */
async function inboundCall(): Promise<SipCall> {
  await until(() => fx.calls.length === 1, 'the call to be delivered');
  return fx.calls[0]!;
}

/** Moves RFC 4028 time on, then gives real I/O a moment. */
async function advance(ms: number): Promise<void> {
  fx.clock.advance(ms);
  await delay(SETTLE_MS);
}

const logs = () => fx.log.join('\n');

describe('RFC 4028 session timers on inbound calls', () => {
  it('peer refreshes (refresher=uac): re-INVITEs every 900 s keep the call for hours; then BYE exactly 1768 s after the last refresh, reason session_expired', async () => {
    const { dialog, ok } = await fx.peer.call(fx.sipPort, [
      ['Allow', ALLOW_WITH_UPDATE],
      ['Supported', 'timer'],
      ['Session-Expires', '1800;refresher=uac'],
      ['Min-SE', '90'],
    ]);
    expect(ok.get('Session-Expires')).toMatch(/^1800\s*;\s*refresher=uac$/);
    expect(ok.sessionExpires).toEqual({ seconds: 1800, refresher: 'uac' });
    expect(ok.tokens('Require')).toContain('timer');
    const call = await inboundCall();
    expect(call.state).toBe('answered');
    const answerSdp = ok.body.toString('utf8');

    // 8 refreshes, 900 s apart: 2 hours. The first expiry (1768 s) falls between the second and
    // third refresh: a refresh that did not re-arm the timer would end the call there.
    let lastRefreshAt = 0;
    for (let i = 1; i <= 8; i++) {
      await advance(900_000);
      expect(call.endInfo, `ended before refresh ${i}:\n${logs()}`).toBeUndefined();
      const tx = dialog.request('INVITE', {
        body: sdp(fx.peer.rtp.rtpPort),
        contentType: 'application/sdp',
        headers: [
          ['Supported', 'timer'],
          ['Session-Expires', '1800;refresher=uac'],
          ['Min-SE', '90'],
        ],
      });
      const res = await tx.finalResponse;
      expect(res.status, `refresh ${i}: ${res.status} ${res.reason}`).toBe(200);
      dialog.ack(res);
      expect(res.sessionExpires, `refresh ${i}`).toEqual({ seconds: 1800, refresher: 'uac' });
      expect(res.tokens('Require')).toContain('timer');
      // Nothing changed: the same SDP, the same o= version (RFC 3264 8).
      expect(originOf(res.body.toString('utf8'))).toBe(originOf(answerSdp));
      lastRefreshAt = fx.clock.now;
    }
    expect(fx.clock.now).toBe(8 * 900_000);
    expect(fx.peer.requests('BYE')).toHaveLength(0);
    expect(call.state).toBe('answered');

    // The peer stops refreshing. 1760 s later: still up, no BYE.
    await advance(1_760_000);
    expect(call.endInfo, logs()).toBeUndefined();
    expect(fx.peer.requests('BYE')).toHaveLength(0);
    expect(dialog.state).toBe('confirmed');

    // 1770 s: the BYE went out at 1800 - min(32, 600) = 1768 s.
    fx.clock.advance(10_000);
    await until(() => fx.peer.requests('BYE').length === 1, 'the BYE of the expired session');
    expect(fx.hangups.get(call)).toEqual({ info: { reason: 'session_expired', by: 'remote' }, at: lastRefreshAt + 1_768_000 });
    expect(fx.peer.requests('BYE')[0]!.callId).toBe(dialog.callId);
    await until(() => dialog.state === 'terminated', 'the peer dialog to end');
    await until(() => fx.ua.calls.length === 0, 'the call to be untracked');
    expect(fx.ua.counters()).toMatchObject({ ended_session_expired: 1 });
  });

  it('we refresh (refresher=uas), peer allows UPDATE: an UPDATE without body every 45 s, the call stays up', async () => {
    const { dialog, ok } = await fx.peer.call(fx.sipPort, [
      ['Allow', ALLOW_WITH_UPDATE],
      ['Supported', 'timer'],
      ['Session-Expires', '90;refresher=uas'],
      ['Min-SE', '90'],
    ]);
    expect(ok.sessionExpires).toEqual({ seconds: 90, refresher: 'uas' });
    expect(ok.tokens('Require')).toContain('timer');
    const call = await inboundCall();
    fx.peer.answerRefreshes(dialog, pcmuAnswer(fx.peer.rtp.rtpPort));

    // Not before N/2.
    await advance(44_000);
    expect(fx.peer.requests('UPDATE')).toHaveLength(0);
    for (let i = 1; i <= 3; i++) {
      // The peer answers at once, so callbridge may re-arm before we see the UPDATE: count from here.
      const armed = fx.clock.armed;
      fx.clock.advance(i === 1 ? 1_000 : 45_000);
      await until(() => fx.peer.requests('UPDATE').length === i, `UPDATE ${i}`);
      const update = fx.peer.requests('UPDATE')[i - 1]!;
      expect(update.body.length, `UPDATE ${i} has a body`).toBe(0);
      expect(update.sessionExpires, `UPDATE ${i}`).toEqual({ seconds: 90, refresher: 'uac' });
      expect(update.tokens('Supported')).toContain('timer');
      expect(update.callId).toBe(dialog.callId);
      // Wait until callbridge took the 200 and re-armed its timer before moving time on.
      await until(() => fx.clock.armed > armed, `the timer re-armed after UPDATE ${i}`);
      expect(call.state, logs()).toBe('answered');
    }
    // Between refreshes the expiry (60 s) was never reached: 45 s steps, three refreshes.
    expect(fx.peer.requests('INVITE').length).toBe(0);
    expect(fx.peer.requests('BYE')).toHaveLength(0);
    expect(call.state).toBe('answered');
    expect(dialog.state).toBe('confirmed');
  });

  /** A call whose INVITE makes callbridge the refresher (90 s) and whose Allow has no UPDATE. */
  async function callWithoutUpdate(): Promise<{ dialog: Dialog; ok: SipResponse; call: SipCall; refreshes: { acks: number } }> {
    const { dialog, ok } = await fx.peer.call(fx.sipPort, [
      ['Allow', ALLOW_WITHOUT_UPDATE],
      ['Supported', 'timer'],
      ['Session-Expires', '90;refresher=uas'],
      ['Min-SE', '90'],
    ]);
    expect(ok.sessionExpires).toEqual({ seconds: 90, refresher: 'uas' });
    expect(ok.tokens('Require')).toContain('timer');
    const call = await inboundCall();
    const refreshes = fx.peer.answerRefreshes(dialog, pcmuAnswer(fx.peer.rtp.rtpPort));
    return { dialog, ok, call, refreshes };
  }

  it('we refresh, peer Allow without UPDATE: a re-INVITE with our SDP every 45 s, 200 with SDP, ACK; the call stays up', async () => {
    const { dialog, ok, call, refreshes } = await callWithoutUpdate();
    const ourSdp = ok.body.toString('utf8');
    const [, ourSessionId] = originOf(ourSdp)!.split(' ');
    const versions: string[] = [];

    await advance(44_000);
    expect(fx.peer.requests('INVITE')).toHaveLength(0);
    for (let i = 1; i <= 3; i++) {
      const armed = fx.clock.armed;
      fx.clock.advance(i === 1 ? 1_000 : 45_000);
      await until(() => fx.peer.requests('INVITE').length === i, `re-INVITE ${i}\n${logs()}`);
      const reinvite = fx.peer.requests('INVITE')[i - 1]!;
      expect(reinvite.to.tag).toBe(dialog.localTag);
      expect(reinvite.callId).toBe(dialog.callId);
      expect(reinvite.sessionExpires, `re-INVITE ${i}`).toEqual({ seconds: 90, refresher: 'uac' });
      expect(reinvite.tokens('Supported')).toContain('timer');
      expect(reinvite.contentType?.toString()).toMatch(/^application\/sdp/i);
      const body = reinvite.body.toString('utf8');
      expect(body.length, `re-INVITE ${i} has no SDP`).toBeGreaterThan(0);
      // Our SDP: the same o= session, address and RTP port, PCMU (the agreed codec) first.
      const [, sessionId, version] = originOf(body)!.split(' ');
      expect(sessionId).toBe(ourSessionId);
      versions.push(version!);
      expect(/^c=.*$/m.exec(body)?.[0]).toBe(/^c=.*$/m.exec(ourSdp)?.[0]);
      expect(mLineOf(body)).toMatch(new RegExp(`^m=audio ${mLineOf(ourSdp)!.split(' ')[1]} RTP/AVP 0[ \\r]`));
      await until(() => refreshes.acks === i, `the ACK of re-INVITE ${i}`);
      await until(() => fx.clock.armed > armed, `the timer re-armed after re-INVITE ${i}`);
      expect(call.state, logs()).toBe('answered');
    }
    // Nothing changed between refreshes: the version does not move (RFC 3264 8).
    expect(new Set(versions).size, versions.join(',')).toBe(1);
    expect(call.media.codec.name).toBe('PCMU');
    expect(fx.peer.requests('UPDATE')).toHaveLength(0);
    expect(fx.peer.requests('BYE')).toHaveLength(0);
    expect(dialog.state).toBe('confirmed');
  });

  // Regression: the refresh re-INVITE once offered every same-rate codec (PCMU, PCMA,
  // telephone-event) instead of the SDP we last sent, so the o= version moved on a refresh that
  // changed nothing (RFC 3264 8). It now offers only the agreed codec.
  it('the first refresh re-INVITE repeats the o= version of our 200 (nothing changed, RFC 3264 8)', async () => {
    const { ok, refreshes } = await callWithoutUpdate();
    fx.clock.advance(45_000);
    await until(() => fx.peer.requests('INVITE').length === 1, 'the refresh re-INVITE');
    await until(() => refreshes.acks === 1, 'its ACK');
    expect(originOf(fx.peer.requests('INVITE')[0]!.body.toString('utf8'))).toBe(originOf(ok.body.toString('utf8')));
  });

  it('Session-Expires 60 (below our Min-SE 90): 422 with Min-SE 90, no call delivered', async () => {
    const { final } = await fx.peer.invite(fx.sipPort, [
      ['Supported', 'timer'],
      ['Session-Expires', '60'],
    ]);
    expect(final.status).toBe(422);
    expect(final.reason).toBe('Session Interval Too Small');
    expect(final.get('Min-SE')).toBe('90');
    expect(final.minSE).toBe(90);
    await delay(SETTLE_MS);
    expect(fx.calls).toHaveLength(0);
    expect(fx.ua.calls).toHaveLength(0);
    expect(fx.ua.counters()).toMatchObject({ session_interval: 1 });
    expect(fx.ua.counters().routed).toBeUndefined();
  });

  it('Supported: timer without Session-Expires: the 200 inserts Session-Expires 1800;refresher=uac and Require: timer, and that timer runs', async () => {
    const { dialog, ok } = await fx.peer.call(fx.sipPort, [
      ['Allow', ALLOW_WITH_UPDATE],
      ['Supported', 'timer'],
    ]);
    expect(ok.get('Session-Expires')).toMatch(/^1800\s*;\s*refresher=uac$/);
    expect(ok.sessionExpires).toEqual({ seconds: 1800, refresher: 'uac' });
    expect(ok.tokens('Require')).toContain('timer');
    const call = await inboundCall();

    // The peer was made the refresher; callbridge never refreshes, and expires at 1768 s.
    await advance(1_760_000);
    expect(fx.peer.requests('UPDATE')).toHaveLength(0);
    expect(fx.peer.requests('INVITE')).toHaveLength(0);
    expect(call.endInfo).toBeUndefined();
    fx.clock.advance(10_000);
    await until(() => fx.peer.requests('BYE').length === 1, 'the BYE of the expired session');
    expect(fx.hangups.get(call)).toEqual({ info: { reason: 'session_expired', by: 'remote' }, at: 1_768_000 });
    await until(() => dialog.state === 'terminated', 'the peer dialog to end');
  });
});

describe('RFC 4028 session timers on outbound calls', () => {
  /** The peer as a carrier UAS: answers INVITEs 200 with `headers` and a PCMU answer. */
  function carrier(headers: [string, string][]): { invites: SipRequest[]; dialogs: Dialog[] } {
    const seen = { invites: [] as SipRequest[], dialogs: [] as Dialog[] };
    fx.peer.dialogs.on('new-request', (tx, inbound) => {
      const req = inbound.message;
      if (req.method !== 'INVITE') {
        tx.respond(createResponse(req, 405, undefined, { toTag: 'x' }));
        return;
      }
      seen.invites.push(req);
      const d = fx.peer.dialogs.fromInvite(tx, inbound, { localContact: `<sip:carrier@127.0.0.1:${fx.peer.port}>` });
      seen.dialogs.push(d);
      d.answer({ body: pcmuAnswer(fx.peer.rtp.rtpPort), contentType: 'application/sdp', headers });
    });
    return seen;
  }

  function trunk(): OutboundTrunk {
    return { id: 'trunk-out', orgId: 'org-1', name: 'carrier', pbx: 'generic', outbound_host: `127.0.0.1:${fx.peer.port}`, caller_id_transforms: [] };
  }

  async function dial(): Promise<SipCall> {
    const result = await fx.ua.dial({ trunk: trunk(), to: NUMBER, callerId: CALLER, ringTimeoutMs: 5000 });
    expect(result.ok, JSON.stringify(result)).toBe(true);
    const call = (result as { ok: true; call: SipCall }).call;
    watchHangup(call);
    return call;
  }

  it('the INVITE asks for a timer; a 2xx with Session-Expires 120;refresher=uac and UPDATE allowed: an UPDATE at 60 s, twice', async () => {
    const seen = carrier([
      ['Allow', ALLOW_WITH_UPDATE],
      ['Supported', 'timer'],
      ['Require', 'timer'],
      ['Session-Expires', '120;refresher=uac'],
    ]);
    const call = await dial();
    const invite = seen.invites[0]!;
    expect(invite.tokens('Supported')).toContain('timer');
    expect(invite.get('Session-Expires')).toBe('1800');
    expect(invite.sessionExpires).toEqual({ seconds: 1800, refresher: undefined });
    expect(invite.get('Min-SE')).toBe('90');
    const dialog = seen.dialogs[0]!;
    await until(() => !dialog.awaitingAck, 'the ACK of the 200');
    fx.peer.answerRefreshes(dialog, pcmuAnswer(fx.peer.rtp.rtpPort));

    await advance(59_000);
    expect(fx.peer.requests('UPDATE')).toHaveLength(0);
    for (let i = 1; i <= 2; i++) {
      const armed = fx.clock.armed;
      fx.clock.advance(i === 1 ? 1_000 : 60_000);
      await until(() => fx.peer.requests('UPDATE').length === i, `UPDATE ${i}\n${logs()}`);
      const update = fx.peer.requests('UPDATE')[i - 1]!;
      expect(update.body.length).toBe(0);
      expect(update.sessionExpires).toEqual({ seconds: 120, refresher: 'uac' });
      expect(update.callId).toBe(call.callId);
      await until(() => fx.clock.armed > armed, `the timer re-armed after UPDATE ${i}`);
    }
    expect(fx.peer.requests('BYE')).toHaveLength(0);
    expect(call.state).toBe('answered');
    expect(dialog.state).toBe('confirmed');
  });

  it('a 2xx with Session-Expires 120;refresher=uac and no UPDATE in Allow: a re-INVITE with SDP every 60 s, ACKed', async () => {
    const seen = carrier([
      ['Allow', ALLOW_WITHOUT_UPDATE],
      ['Require', 'timer'],
      ['Session-Expires', '120;refresher=uac'],
    ]);
    const call = await dial();
    const dialog = seen.dialogs[0]!;
    await until(() => !dialog.awaitingAck, 'the ACK of the 200');
    const refreshes = fx.peer.answerRefreshes(dialog, pcmuAnswer(fx.peer.rtp.rtpPort));

    await advance(59_000);
    expect(fx.peer.requests('INVITE')).toHaveLength(1);
    for (let i = 1; i <= 2; i++) {
      const armed = fx.clock.armed;
      fx.clock.advance(i === 1 ? 1_000 : 60_000);
      await until(() => fx.peer.requests('INVITE').length === i + 1, `refresh re-INVITE ${i}\n${logs()}`);
      const reinvite = fx.peer.requests('INVITE')[i]!;
      expect(reinvite.to.tag).toBe(dialog.localTag);
      expect(reinvite.sessionExpires).toEqual({ seconds: 120, refresher: 'uac' });
      expect(reinvite.contentType?.toString()).toMatch(/^application\/sdp/i);
      expect(reinvite.body.toString('utf8')).toMatch(/^m=audio \d+ RTP\/AVP /m);
      await until(() => refreshes.acks === i, `the ACK of refresh ${i}`);
      await until(() => fx.clock.armed > armed, `the timer re-armed after refresh ${i}`);
    }
    expect(fx.peer.requests('UPDATE')).toHaveLength(0);
    expect(fx.peer.requests('BYE')).toHaveLength(0);
    expect(call.state).toBe('answered');
  });
});
