/**
 * The daemon's SIP user agent (src/sip/ua/: user-agent.ts, uas.ts, call.ts) over real loopback
 * sockets, with our own SIP layers as the calling PBX (SipTransportLayer on 127.0.0.1:0 +
 * TransactionLayer + DialogManager, INVITEs from createRequest) and an RtpSession for the PBX's
 * media. The PBX's source, 127.0.0.1, is an ACL trunk, so no digest here (inbound-routing.test.ts
 * and the interop suites cover it).
 *
 * What SIPp does not cover: draining, REGISTER and SUBSCRIBE, out-of-dialog BYE, delayed offer details (a codec
 * change in the ACK's answer, an ACK without answer), 415, 488 without a common codec, no
 * handler, a throwing handler, hangup by us and by the peer, DTMF both ways in, hold and codec
 * change by re-INVITE, media timeout, close() with a call up, /readyz.
 *
 * Two daemons: `d` with the default media timeout for most tests, `d2` with
 * rtp.media_timeout_secs 1 for the media timeout and, at its end, drain and close().
 */
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { PortAllocator } from '../../src/media/port-allocator.ts';
import { RtpSession } from '../../src/media/rtp-session.ts';
import type { HangupInfo, SipCall } from '../../src/sip/ua/call.ts';
import { DialogManager, type Dialog } from '../../src/sip/dialog/index.ts';
import { createRequest, type SipRequest, type SipResponse } from '../../src/sip/message/index.ts';
import { TransactionLayer, type ClientTransaction } from '../../src/sip/transaction/index.ts';
import { SipTransportLayer } from '../../src/sip/transport/index.ts';
import { delay, until } from '../helpers/until.ts';

const NUMBER = '+15550002000';
const CALLER = '+15559990000';

/** The SDP offer of the interop scenarios (PCMU, PCMA, telephone-event), or another m-line. */
function offer(port: number, o: { version?: number; formats?: string; rtpmaps?: string[]; direction?: string } = {}): string {
  const rtpmaps = o.rtpmaps ?? ['a=rtpmap:0 PCMU/8000', 'a=rtpmap:8 PCMA/8000', 'a=rtpmap:101 telephone-event/8000', 'a=fmtp:101 0-15'];
  return [
    'v=0',
    `o=- 2001 ${o.version ?? 1} IN IP4 127.0.0.1`,
    's=-',
    'c=IN IP4 127.0.0.1',
    't=0 0',
    `m=audio ${port} RTP/AVP ${o.formats ?? '0 8 101'}`,
    ...rtpmaps,
    'a=ptime:20',
    `a=${o.direction ?? 'sendrecv'}`,
    '',
  ].join('\r\n');
}

/** The audio address and port of an SDP answer. */
function answerRemote(sdp: string): { address: string; port: number } {
  const address = /^c=IN IP[46] (\S+)/m.exec(sdp)?.[1];
  const port = /^m=audio (\d+) /m.exec(sdp)?.[1];
  if (address === undefined || port === undefined) throw new Error(`no audio in the answer:\n${sdp}`);
  return { address, port: Number(port) };
}

/** A PBX made of our own SIP layers on loopback, calling `sipPort`. */
class Pbx {
  readonly transport = new SipTransportLayer({ listen: [{ protocol: 'udp', address: '127.0.0.1', port: 0 }] });
  readonly layer = new TransactionLayer({ transport: this.transport });
  readonly dialogs = new DialogManager({ layer: this.layer });
  readonly ports = new PortAllocator({ min: 42000, max: 42999, address: '127.0.0.1' });
  /** Every request callbridge sent us (retransmissions included). */
  readonly received: SipRequest[] = [];
  readonly #rtps: RtpSession[] = [];

  constructor(readonly sipPort: number) {}

  async start(): Promise<this> {
    this.transport.on('request', (inbound) => this.received.push(inbound.message));
    await this.transport.start();
    return this;
  }

  get port(): number {
    return this.transport.endpoints[0]!.port;
  }

  get target() {
    return { protocol: 'udp' as const, address: '127.0.0.1', port: this.sipPort };
  }

  /** Sends an out-of-dialog request and collects its responses. */
  send(method: string, o: { user?: string; body?: string; contentType?: string; headers?: [string, string][] } = {}): { tx: ClientTransaction; responses: SipResponse[]; final: Promise<SipResponse> } {
    const user = o.user ?? NUMBER;
    const uri = method === 'REGISTER' ? `sip:127.0.0.1:${this.sipPort}` : `sip:${user}@127.0.0.1:${this.sipPort}`;
    const req = createRequest({
      method,
      uri,
      from: `<sip:${CALLER}@127.0.0.1:${this.port}>`,
      to: method === 'REGISTER' ? `<sip:${CALLER}@127.0.0.1:${this.sipPort}>` : `<sip:${user}@127.0.0.1:${this.sipPort}>`,
      contact: `<sip:pbx@127.0.0.1:${this.port}>`,
      ...(o.headers ? { headers: o.headers } : {}),
      ...(o.body !== undefined ? { body: o.body, contentType: o.contentType ?? 'application/sdp' } : {}),
    });
    const tx = this.layer.sendRequest(req, this.target);
    const responses: SipResponse[] = [];
    tx.on('response', (res) => responses.push(res));
    return { tx, responses, final: tx.finalResponse };
  }

  /** An RTP session on the PBX side (PCMU at 8 kHz, telephone-event 101), closed by close(). */
  async rtpSession(): Promise<RtpSession> {
    const rtp = new RtpSession({ ports: await this.ports.allocate(), clockRate: 8000, dtmfPayloadType: 101, mediaTimeoutMs: 0, rtcpIntervalMs: 0 });
    this.#rtps.push(rtp);
    return rtp;
  }

  /**
   * INVITE with our offer, 180, 200, ACK: the confirmed dialog, the 200 and our RTP session
   * (aimed at callbridge's answer). `rtpEveryMs`: keep sending PCMU silence (for the media timeout).
   */
  async call(o: { rtpEveryMs?: number } = {}): Promise<{ dialog: Dialog; ok: SipResponse; provisional: number[]; rtp: RtpSession; stopRtp: () => void }> {
    const rtp = await this.rtpSession();
    const inv = this.send('INVITE', { body: offer(rtp.local.rtpPort) });
    const ok = await inv.final;
    expect(ok.status, `${ok.status} ${ok.reason}`).toBe(200);
    const dialog = this.dialogs.fromResponse(inv.tx.request, ok);
    dialog.ack(ok);
    rtp.setRemote(answerRemote(ok.body.toString('utf8')));
    let timer: NodeJS.Timeout | undefined;
    if (o.rtpEveryMs !== undefined) {
      const silence = Buffer.alloc(160, 0xff);
      timer = setInterval(() => rtp.send(silence, { payloadType: 0, timestampIncrement: 160 }), o.rtpEveryMs);
    }
    const stopRtp = () => clearInterval(timer);
    rtp.once('close', stopRtp);
    return { dialog, ok, provisional: inv.responses.filter((r) => r.status < 200).map((r) => r.status), rtp, stopRtp };
  }

  /** A re-INVITE in the dialog with this SDP; ACKs a 2xx. */
  async reinvite(dialog: Dialog, sdp: string): Promise<SipResponse> {
    const res = await dialog.request('INVITE', { body: sdp, contentType: 'application/sdp' }).finalResponse;
    if (res.status >= 200 && res.status < 300) dialog.ack(res);
    return res;
  }

  async close(): Promise<void> {
    for (const r of this.#rtps) r.close();
    this.dialogs.close();
    this.layer.close();
    await this.transport.close();
  }
}

/** A daemon whose 127.0.0.1 is an ACL trunk with NUMBER as alternate_number, and who takes the calls. */
async function daemonWithTrunk(overrides: Record<string, unknown> = {}): Promise<TestDaemon> {
  const d = await startTestDaemon(overrides);
  const agent = (await d.api('POST', '/v1/agents', { name: 'Front desk' })).body;
  const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'loopback pbx', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
  const r = await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER });
  expect(r.status, r.text).toBe(201);
  return d;
}

/** Records the calls callbridge delivers; `handle` decides what happens to each (default: answer). */
class Calls {
  readonly all: SipCall[] = [];
  handle: (call: SipCall) => void = (call) => void call.answer();

  attach(d: TestDaemon): void {
    d.daemon.sip!.ua.onInboundCall((call) => {
      this.all.push(call);
      this.handle(call);
    });
  }

  async next(from: number): Promise<SipCall> {
    await until(() => this.all.length > from, 'a call to be delivered');
    return this.all[from]!;
  }
}

function hangupOf(call: SipCall): Promise<HangupInfo> {
  return call.endInfo !== undefined ? Promise.resolve(call.endInfo) : (once(call, 'hangup') as Promise<[HangupInfo]>).then(([i]) => i);
}

describe('SipUserAgent over loopback (our SIP layers as the PBX)', () => {
  let d: TestDaemon;
  let pbx: Pbx;
  const calls = new Calls();

  beforeAll(async () => {
    d = await daemonWithTrunk();
    calls.attach(d);
    pbx = await new Pbx(d.daemon.sip!.port).start();
  });

  afterAll(async () => {
    await pbx?.close();
    await d?.close();
  });

  it('/readyz is 200 with SIP listening', async () => {
    expect(d.daemon.sip!.ua.listening).toBe(true);
    const r = await d.api('GET', '/readyz', undefined, { key: null });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ status: 'ready', detail: expect.stringContaining('recognizes no words') }); // no STT configured here
  });

  it('REGISTER is challenged (the daemon is the registrar of digest trunks: registrar.test.ts); SUBSCRIBE: 405 with an Allow that names REGISTER', async () => {
    const reg = await pbx.send('REGISTER').final;
    expect(reg.status).toBe(401);
    const res = await pbx.send('SUBSCRIBE').final;
    expect(res.status).toBe(405);
    const allow = res.getAll('Allow').join(',');
    for (const m of ['INVITE', 'ACK', 'BYE', 'CANCEL', 'OPTIONS', 'REGISTER']) expect(allow).toContain(m);
    expect(res.to.tag).toBeDefined();
  });

  it('BYE outside any dialog: 481', async () => {
    const res = await pbx.send('BYE').final;
    expect(res.status).toBe(481);
  });

  it('INVITE without SDP (delayed offer): our G.711 offer in the 200, the answer in the ACK aims the RTP', async () => {
    const before = calls.all.length;
    const rtp = await pbx.rtpSession();
    const inv = pbx.send('INVITE');
    const ok = await inv.final;
    expect(ok.status).toBe(200);
    const ourOffer = ok.body.toString('utf8');
    expect(ourOffer).toMatch(/^m=audio \d+ RTP\/AVP 0 8 101\r$/m); // 8 kHz only: no opus
    const call = await calls.next(before);
    const mediaEvents: string[] = [];
    call.on('media', (m) => mediaEvents.push(`${m.codec.name} ${m.remote.address}:${m.remote.port}`));
    const dialog = pbx.dialogs.fromResponse(inv.tx.request, ok);
    // Answer PCMA (the second codec offered) from the PBX's RTP port.
    const answer = offer(rtp.local.rtpPort, { formats: '8 101', rtpmaps: ['a=rtpmap:8 PCMA/8000', 'a=rtpmap:101 telephone-event/8000', 'a=fmtp:101 0-15'] });
    dialog.ack(ok, { body: answer, contentType: 'application/sdp' });
    await until(() => mediaEvents.length > 0, 'the answer from the ACK');
    expect(mediaEvents).toEqual([`PCMA 127.0.0.1:${rtp.local.rtpPort}`]);
    expect(call.media.codec.name).toBe('PCMA');
    // callbridge's RTP now reaches the PBX.
    rtp.setRemote(answerRemote(ourOffer));
    let got = 0;
    rtp.on('rtp', () => got++);
    for (let i = 0; i < 5; i++) call.rtp.send(Buffer.alloc(160, 0xd5), { payloadType: 8, timestampIncrement: 160 });
    await until(() => got === 5, 'RTP from callbridge');
    call.hangup();
    expect((await hangupOf(call)).reason).toBe('local');
  });

  it('INVITE without SDP whose ACK brings no answer: BYE (RFC 3261 13.3.1.4)', async () => {
    const before = calls.all.length;
    const inv = pbx.send('INVITE');
    const ok = await inv.final;
    const call = await calls.next(before);
    pbx.dialogs.fromResponse(inv.tx.request, ok).ack(ok);
    expect((await hangupOf(call)).reason).toBe('local');
    await until(() => pbx.received.some((r) => r.method === 'BYE' && r.callId === ok.callId), 'the BYE');
  });

  it('INVITE with a body that is not SDP: 415 with Accept', async () => {
    const before = calls.all.length;
    const res = await pbx.send('INVITE', { body: '<xml/>', contentType: 'application/xml' }).final;
    expect(res.status).toBe(415);
    expect(res.get('Accept')).toBe('application/sdp');
    expect(calls.all.length).toBe(before);
  });

  it('INVITE offering only G.729 (PT 18): 488 with Warning 305', async () => {
    const before = calls.all.length;
    const res = await pbx.send('INVITE', { body: offer(42998, { formats: '18', rtpmaps: ['a=rtpmap:18 G729/8000'] }) }).final;
    expect(res.status).toBe(488);
    expect(res.get('Warning')).toMatch(/^305 \S+ "/);
    expect(calls.all.length).toBe(before);
    expect(d.daemon.sip!.ports.inUse).toBe(0); // the RTP ports it took were given back
  });

  it('an INVITE for a number nobody routes: 404 and no provisional response (no 100 before routing)', async () => {
    const rtp = await pbx.rtpSession();
    const inv = pbx.send('INVITE', { user: '+15550009999', body: offer(rtp.local.rtpPort) });
    const res = await inv.final;
    expect(res.status).toBe(404);
    expect(inv.responses.map((r) => r.status)).toEqual([404]);
  });

  it('no call handler: 180, then 480', async () => {
    d.daemon.sip!.ua.onInboundCall(undefined);
    try {
      const rtp = await pbx.rtpSession();
      const inv = pbx.send('INVITE', { body: offer(rtp.local.rtpPort) });
      const res = await inv.final;
      expect(inv.responses.map((r) => r.status)).toContain(180);
      expect(res.status).toBe(480);
    } finally {
      calls.attach(d);
    }
  });

  it('the handler throws: 180, then 500, and the call ends rejected', async () => {
    const before = calls.all.length;
    calls.handle = () => {
      throw new Error('handler bug');
    };
    try {
      const rtp = await pbx.rtpSession();
      const inv = pbx.send('INVITE', { body: offer(rtp.local.rtpPort) });
      const res = await inv.final;
      expect(inv.responses.map((r) => r.status)).toContain(180);
      expect(res.status).toBe(500);
      const call = await calls.next(before);
      expect(await hangupOf(call)).toMatchObject({ reason: 'rejected', status: 500 });
    } finally {
      calls.handle = (call) => void call.answer();
    }
  });

  it('a routed call: 100 at once, 180, then 200 with PCMU, the call knows its route; hung up by us: BYE reaches the PBX, reason local', async () => {
    const before = calls.all.length;
    const { dialog, ok, provisional } = await pbx.call();
    // The 100 is sent once the INVITE is authenticated, routed and admitted, before the RTP
    // ports are fetched from a media thread (not 200 ms later by the transaction's timer).
    expect(provisional).toEqual([100, 180]);
    expect(ok.body.toString()).toMatch(/^m=audio \d+ RTP\/AVP 0 /m);
    const call = await calls.next(before);
    expect(call).toMatchObject({ direction: 'inbound', from: CALLER, to: NUMBER });
    expect(call.route).toMatchObject({ via: 'alternate_number', number: NUMBER });
    expect(call.media.codec.name).toBe('PCMU');
    await until(() => dialog.state === 'confirmed', 'the dialog to be confirmed');
    const terminated = once(dialog, 'terminated');
    call.hangup();
    expect(await hangupOf(call)).toEqual({ reason: 'local', by: 'local' });
    expect(await terminated).toEqual(['bye-received']);
    expect(pbx.received.filter((r) => r.method === 'BYE' && r.callId === dialog.callId)).not.toHaveLength(0);
  });

  it('the PBX hangs up: reason remote_bye, BYE answered 200', async () => {
    const before = calls.all.length;
    const { dialog } = await pbx.call();
    const call = await calls.next(before);
    const bye = await dialog.bye()!.finalResponse;
    expect(bye.status).toBe(200);
    expect(await hangupOf(call)).toEqual({ reason: 'remote_bye', by: 'remote' });
    await until(() => !d.daemon.sip!.ua.calls.includes(call), 'the call to be untracked');
  });

  it('RFC 4733 DTMF from the PBX’s RtpSession: the call’s dtmf event (rfc4733)', async () => {
    const before = calls.all.length;
    const { dialog, rtp } = await pbx.call();
    const call = await calls.next(before);
    expect(call.media.dtmfPayloadType).toBe(101);
    const digits: [string, string][] = [];
    call.on('dtmf', (digit, via) => digits.push([digit, via]));
    await rtp.sendDtmf('5', 100, 101);
    await rtp.sendDtmf('#', 100, 101);
    await until(() => digits.length >= 2, 'two DTMF events');
    expect(digits).toEqual([
      ['5', 'rfc4733'],
      ['#', 'rfc4733'],
    ]);
    dialog.bye();
  });

  it('SIP INFO application/dtmf-relay "Signal=5": 200 and the dtmf event (info)', async () => {
    const before = calls.all.length;
    const { dialog } = await pbx.call();
    const call = await calls.next(before);
    const digits: [string, string][] = [];
    call.on('dtmf', (digit, via) => digits.push([digit, via]));
    const res = await dialog.request('INFO', { body: 'Signal=5\r\nDuration=160\r\n', contentType: 'application/dtmf-relay' }).finalResponse;
    expect(res.status).toBe(200);
    expect(digits).toEqual([['5', 'info']]);
    dialog.bye();
  });

  it('re-INVITE a=inactive: answered a=inactive, hold event; a=sendrecv resumes', async () => {
    const before = calls.all.length;
    const { dialog, rtp } = await pbx.call();
    const call = await calls.next(before);
    const holds: boolean[] = [];
    call.on('hold', (h) => holds.push(h));
    const held = await pbx.reinvite(dialog, offer(rtp.local.rtpPort, { version: 2, direction: 'inactive' }));
    expect(held.status).toBe(200);
    expect(held.body.toString()).toMatch(/^a=inactive\r?$/m);
    expect(holds).toEqual([true]);
    expect(call.media.hold).toBe(true);
    const resumed = await pbx.reinvite(dialog, offer(rtp.local.rtpPort, { version: 3 }));
    expect(resumed.status).toBe(200);
    expect(resumed.body.toString()).not.toMatch(/^a=(inactive|sendonly|recvonly)/m);
    expect(holds).toEqual([true, false]);
    expect(call.state).toBe('answered');
    dialog.bye();
  });

  it('re-INVITE changing PCMU to PCMA: 200 with PCMA, media event with codec PCMA', async () => {
    const before = calls.all.length;
    const { dialog, rtp } = await pbx.call();
    const call = await calls.next(before);
    expect(call.media.codec.name).toBe('PCMU');
    const media: string[] = [];
    call.on('media', (m) => media.push(m.codec.name));
    const res = await pbx.reinvite(dialog, offer(rtp.local.rtpPort, { version: 2, formats: '8 101', rtpmaps: ['a=rtpmap:8 PCMA/8000', 'a=rtpmap:101 telephone-event/8000', 'a=fmtp:101 0-15'] }));
    expect(res.status).toBe(200);
    expect(res.body.toString()).toMatch(/^m=audio \d+ RTP\/AVP 8[ \r]/m);
    expect(media).toEqual(['PCMA']);
    expect(call.media.codec.name).toBe('PCMA');
    dialog.bye();
  });
});

describe('SipUserAgent: media timeout, drain and close (rtp.media_timeout_secs 1)', () => {
  let d2: TestDaemon;
  let pbx: Pbx;
  const calls = new Calls();

  beforeAll(async () => {
    d2 = await daemonWithTrunk({ rtp: { media_timeout_secs: 1 } });
    calls.attach(d2);
    pbx = await new Pbx(d2.daemon.sip!.port).start();
  });

  afterAll(async () => {
    await pbx?.close();
    await d2?.close();
  });

  it('no RTP from the PBX for 1 s: callbridge sends BYE, reason media_timeout', async () => {
    const before = calls.all.length;
    const started = Date.now();
    const { dialog } = await pbx.call();
    const call = await calls.next(before);
    const [reason] = (await once(dialog, 'terminated')) as [string];
    expect(reason).toBe('bye-received');
    expect(await hangupOf(call)).toMatchObject({ reason: 'media_timeout' });
    expect(Date.now() - started).toBeGreaterThanOrEqual(900);
    expect(pbx.received.some((r) => r.method === 'BYE' && r.callId === dialog.callId)).toBe(true);
  });

  it('while RTP flows the call stays up past the media timeout', async () => {
    const before = calls.all.length;
    const { dialog, stopRtp } = await pbx.call({ rtpEveryMs: 20 });
    const call = await calls.next(before);
    await delay(1500);
    expect(call.state).toBe('answered');
    expect(call.rtp.stats().packetsReceived).toBeGreaterThan(30);
    stopRtp();
    dialog.bye();
    expect(await hangupOf(call)).toMatchObject({ reason: 'remote_bye' });
  });

  it('drain(7): new INVITEs and OPTIONS get 503 with Retry-After 7; a call already up goes on; close(): BYE to it, then /readyz 503', async () => {
    const ua = d2.daemon.sip!.ua;
    const before = calls.all.length;
    const { dialog } = await pbx.call({ rtpEveryMs: 20 });
    const call = await calls.next(before);

    ua.drain(7);
    expect(ua.draining).toBe(true);
    const rtp = await pbx.rtpSession();
    const res = await pbx.send('INVITE', { body: offer(rtp.local.rtpPort) }).final;
    expect(res.status).toBe(503);
    expect(res.get('Retry-After')).toBe('7');
    // A load balancer's OPTIONS health probe sees the same (Kamailio dispatcher takes the node out).
    const probe = await pbx.send('OPTIONS').final;
    expect(probe.status).toBe(503);
    expect(probe.get('Retry-After')).toBe('7');
    expect(calls.all.length).toBe(before + 1);
    expect(call.state).toBe('answered');
    // In-dialog requests still work while draining.
    expect((await dialog.request('INFO', { body: 'Signal=1\r\n', contentType: 'application/dtmf-relay' }).finalResponse).status).toBe(200);

    const terminated = once(dialog, 'terminated');
    await ua.close();
    expect(await terminated).toEqual(['bye-received']);
    expect(await hangupOf(call)).toMatchObject({ reason: 'shutdown', by: 'local' });
    expect(ua.listening).toBe(false);
    const ready = await d2.api('GET', '/readyz', undefined, { key: null });
    expect(ready.status).toBe(503);
  });
});
