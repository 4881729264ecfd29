/**
 * Interop: callbridge's outbound UAC (src/sip/ua/uac.ts sendInvite) against SIPp playing the carrier
 * (test/interop/scenarios/uas-challenge-407.xml): 407 with a per-call nonce, our retry with
 * Proxy-Authorization (its uri must be exactly the Request-URI, else SIPp answers 403 and fails),
 * 100/180/200 with SDP, our ACK, RTP echoed by SIPp (-rtp_echo), our BYE. SIPp's exit code 0
 * with one successful call means it saw exactly that flow and nothing else.
 *
 * Skipped, with the reason, when SIPp (Debian sip-tester, RTPSTREAM build) is missing.
 */
import { createSocket, type Socket } from 'node:dgram';
import { afterEach, describe, expect, it } from 'vitest';
import { DialogManager } from '../../src/sip/dialog/index.ts';
import { createOffer, parseAnswer } from '../../src/sip/sdp/index.ts';
import { TransactionLayer } from '../../src/sip/transaction/index.ts';
import { SipTransportLayer } from '../../src/sip/transport/index.ts';
import { sendInvite } from '../../src/sip/ua/uac.ts';
import { sippAvailable, startSipp, verifyDigest, type SippProcess } from './sipp.ts';

const sipp = sippAvailable();
const NUMBER = '+15550001000';
const CALLER = '+15559990000';
const USER = 'trunk-user';
const PASSWORD = 'trunk-secret';

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function ourStack() {
  const transport = new SipTransportLayer({
    listen: [
      { protocol: 'udp', address: '127.0.0.1', port: 0 },
      { protocol: 'tcp', address: '127.0.0.1', port: 0 },
    ],
  });
  await transport.start();
  const layer = new TransactionLayer({ transport });
  const dialogs = new DialogManager({ layer });
  cleanups.push(async () => {
    dialogs.close();
    layer.close();
    await transport.close();
  });
  return { transport, layer, dialogs };
}

/** Our media socket: counts the RTP that comes back. */
async function rtpSocket(): Promise<{ sock: Socket; port: number; echoes: () => number }> {
  const sock = createSocket('udp4');
  let echoes = 0;
  sock.on('message', (msg) => {
    if (msg.length >= 12 && msg[0]! >> 6 === 2) echoes++;
  });
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
  cleanups.push(() => new Promise<void>((r) => sock.close(() => r())));
  return { sock, port: sock.address().port, echoes: () => echoes };
}

/** `count` PCMU packets (silence) every 20 ms. */
async function sendRtp(sock: Socket, port: number, count: number): Promise<void> {
  const ssrc = 0x1234abcd;
  for (let i = 0; i < count; i++) {
    const pkt = Buffer.alloc(12 + 160, 0xff);
    pkt[0] = 0x80;
    pkt[1] = i === 0 ? 0x80 : 0x00;
    pkt.writeUInt16BE(i, 2);
    pkt.writeUInt32BE(i * 160, 4);
    pkt.writeUInt32BE(ssrc, 8);
    await new Promise<void>((r) => sock.send(pkt, port, '127.0.0.1', () => r()));
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function until(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond() && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
  return cond();
}

const title = sipp.ok ? `sendInvite vs SIPp uas-challenge-407 (${sipp.version})` : `sendInvite vs SIPp: skipped, ${sipp.reason}`;

describe.skipIf(sipp.skip)(title, () => {
  for (const protocol of ['udp', 'tcp'] as const) {
    it(`${protocol.toUpperCase()}: 407, Proxy-Authorization with uri = Request-URI, 180, 200+SDP, ACK, RTP echoed, BYE; SIPp exits 0 with 1 successful call`, async () => {
      const { layer, dialogs, transport } = await ourStack();
      const media = await rtpSocket();
      let carrier: SippProcess | undefined = await startSipp({ scenario: 'uas-challenge-407', rtpEcho: true, transport: protocol, timeoutMs: 15_000 });
      cleanups.push(() => carrier?.kill());
      await carrier.ready;

      const local = transport.localEndpoint(protocol);
      const offer = createOffer({ localAddress: '127.0.0.1', localPort: media.port, sessionId: '4242', sessionVersion: 1, codecs: ['PCMU'] });
      const requestUri = `sip:${NUMBER}@127.0.0.1:${carrier.localPort}${protocol === 'tcp' ? ';transport=tcp' : ''}`;
      const provisionals: number[] = [];
      const outcome = await sendInvite({
        layer,
        dialogs,
        destination: { protocol, address: '127.0.0.1', port: carrier.localPort },
        requestUri,
        from: { user: CALLER, host: '127.0.0.1' },
        to: { user: NUMBER, host: '127.0.0.1' },
        contact: `<sip:callbridge@127.0.0.1:${local.port}${protocol === 'tcp' ? ';transport=tcp' : ''}>`,
        sdp: offer.sdp,
        credentials: { username: USER, password: PASSWORD },
        ringTimeoutMs: 10_000,
        onProvisional: (status) => provisionals.push(status),
      });
      if (!outcome.ok) {
        carrier.kill();
        const r = await carrier.result;
        expect.fail(`${outcome.reason} ${outcome.status} ${outcome.detail}\n${r.describe()}`);
      }
      expect(outcome.attempts).toBe(2);
      expect(provisionals).toEqual([180]);

      // The answer: PCMU on SIPp's media port, which echoes what we send.
      const answer = parseAnswer(outcome.sdp!, offer);
      expect(answer.codec.name).toBe('PCMU');
      expect(answer.remote.address).toBe('127.0.0.1');
      await sendRtp(media.sock, answer.remote.port, 10);
      expect(await until(() => media.echoes() >= 10, 2000), `echoes: ${media.echoes()}`).toBe(true);

      const bye = outcome.dialog.bye()!;
      expect((await bye.finalResponse).status).toBe(200);

      const r = await carrier.result;
      carrier = undefined;
      expect(r.code, r.describe()).toBe(0);
      expect(r.killed, r.describe()).toBe(false);
      expect(r.successfulCalls, r.describe()).toBe(1);
      expect(r.failedCalls, r.describe()).toBe(0);
      expect(r.statuses('sent', 'INVITE')).toEqual([100, 407, 100, 180, 200]);
      const [first, second] = r.requests('INVITE', 'received');
      expect(first?.header('Proxy-Authorization')).toBeUndefined();
      expect(second?.requestUri).toBe(requestUri);
      const check = verifyDigest(second!, PASSWORD);
      expect(check, JSON.stringify(check)).toMatchObject({ ok: true, username: USER, realm: 'callbridge-interop', uri: requestUri, uriIsRequestUri: true });
      expect(verifyDigest(second!, 'wrong').ok).toBe(false);
      expect(r.logs).toContain(`proxy-authorization username=${USER} uri=${requestUri} ruri=${requestUri} nonce_ok=true`);
      // The ACK of the 407 on the INVITE's branch (17.1.1.3), the ACK of the 200 on a new one.
      const acks = r.requests('ACK', 'received');
      expect(acks).toHaveLength(2);
      expect(acks[0]!.branch()).toBe(first!.branch());
      expect(acks[1]!.branch()).not.toBe(second!.branch());
      expect(r.requests('BYE', 'received')).toHaveLength(1);
    });
  }
});
