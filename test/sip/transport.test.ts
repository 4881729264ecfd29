/**
 * The SIP transport layer against real sockets on loopback (127.0.0.1 and ::1), ports chosen by
 * the OS. Peers are plain dgram / net / tls sockets writing SIP text, so what is checked is what
 * goes over the wire: RFC 3261 18.2.1 / RFC 3581 Via stamping, the 18.2.2 response route (NAT),
 * stateless 400/505/513 answers, stream framing, keep-alives, connection reuse, TLS.
 */
import { execFileSync } from 'node:child_process';
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect as netConnect, createServer as createNetServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { afterEach, describe, expect, it } from 'vitest';
import { SipTransportError } from '../../src/sip/message/errors.ts';
import { createRequest, createResponse, parseMessage, SipRequest, SipResponse, SipStreamFramer } from '../../src/sip/message/index.ts';
import { opensslAvailable } from '../helpers/peer-availability.ts';
import { placeholderVia, SipTransportLayer, type ConnectionInfo, type Inbound, type SipTransportLayerOptions, type SipTransportListen } from '../../src/sip/transport/index.ts';

// --- helpers -------------------------------------------------------------------------------------

const layers: SipTransportLayer[] = [];
const cleanups: (() => unknown)[] = [];

afterEach(async () => {
  await Promise.all(layers.splice(0).map((l) => l.close()));
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function startLayer(listen: SipTransportListen[], extra: Partial<SipTransportLayerOptions> = {}): Promise<SipTransportLayer> {
  const layer = new SipTransportLayer({ listen, ...extra });
  layers.push(layer);
  await layer.start();
  return layer;
}

function portOf(layer: SipTransportLayer, protocol: 'udp' | 'tcp' | 'tls', address?: string): number {
  const e = layer.endpoints.find((x) => x.protocol === protocol && (address === undefined || x.address === address));
  if (!e) throw new Error(`no ${protocol} endpoint`);
  return e.port;
}

function nextEvent<T>(layer: SipTransportLayer, event: 'request' | 'response' | 'connectionClosed' | 'connection' | 'error', ms = 2000): Promise<T> {
  return once(layer, event, { signal: AbortSignal.timeout(ms) }).then((args) => args[0] as T);
}

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Waits until `cond` holds (polling), or fails after `ms`. */
async function until(cond: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await delay(5);
  }
}

interface UdpPeer {
  socket: UdpSocket;
  port: number;
  send(data: string | Buffer, port: number, address?: string): Promise<void>;
  /** The next datagram received (fails after ms). */
  next(ms?: number): Promise<Buffer>;
  /** True when nothing arrives within ms. */
  silent(ms: number): Promise<boolean>;
}

async function udpPeer(address = '127.0.0.1'): Promise<UdpPeer> {
  const socket = createSocket(address.includes(':') ? 'udp6' : 'udp4');
  const queue: Buffer[] = [];
  const waiters: ((b: Buffer) => void)[] = [];
  socket.on('message', (m) => {
    const w = waiters.shift();
    if (w) w(m);
    else queue.push(m);
  });
  await new Promise<void>((r) => socket.bind(0, address, () => r()));
  cleanups.push(() => new Promise<void>((r) => socket.close(() => r())));
  return {
    socket,
    port: socket.address().port,
    send: (data, port, to = address) => new Promise<void>((res, rej) => socket.send(data, port, to, (err) => (err ? rej(err) : res()))),
    next: (ms = 2000) => {
      const q = queue.shift();
      if (q) return Promise.resolve(q);
      return new Promise((res, rej) => {
        const t = setTimeout(() => {
          waiters.splice(waiters.indexOf(w), 1);
          rej(new Error('no datagram'));
        }, ms);
        const w = (b: Buffer): void => {
          clearTimeout(t);
          res(b);
        };
        waiters.push(w);
      });
    },
    silent: async (ms) => {
      await delay(ms);
      return queue.length === 0;
    },
  };
}

interface StreamPeer {
  socket: Socket;
  /** Complete SIP messages received (framed). */
  next(ms?: number): Promise<Buffer>;
  pongs: () => number;
  closed: Promise<void>;
  write(data: string | Buffer): void;
}

function streamPeer(socket: Socket): StreamPeer {
  const queue: Buffer[] = [];
  const waiters: ((b: Buffer) => void)[] = [];
  let pongs = 0;
  const framer = new SipStreamFramer();
  socket.on('data', (chunk: Buffer) => {
    // A lone CRLF is a pong (RFC 5626 4.4.1). The framer would wait for a next byte that could
    // make it a ping, so count it here.
    if (chunk.length === 2 && chunk[0] === 0x0d && chunk[1] === 0x0a) {
      pongs++;
      return;
    }
    for (const m of framer.push(chunk)) {
      const w = waiters.shift();
      if (w) w(m);
      else queue.push(m);
    }
  });
  socket.on('error', () => {});
  const closed = new Promise<void>((r) => socket.once('close', () => r()));
  cleanups.push(() => socket.destroy());
  return {
    socket,
    pongs: () => pongs,
    closed,
    write: (d) => socket.write(d),
    next: (ms = 2000) => {
      const q = queue.shift();
      if (q) return Promise.resolve(q);
      return new Promise((res, rej) => {
        const t = setTimeout(() => rej(new Error('no message')), ms);
        waiters.push((b) => {
          clearTimeout(t);
          res(b);
        });
      });
    },
  };
}

async function tcpPeer(port: number, host = '127.0.0.1', localAddress?: string): Promise<StreamPeer> {
  const socket = netConnect({ port, host, ...(localAddress !== undefined ? { localAddress } : {}) });
  await once(socket, 'connect');
  return streamPeer(socket);
}

/** A TCP server that records the connections it accepts, each as a StreamPeer. */
async function tcpServer(host = '127.0.0.1'): Promise<{ server: Server; port: number; peers: StreamPeer[]; nextPeer(): Promise<StreamPeer> }> {
  const peers: StreamPeer[] = [];
  const waiters: ((p: StreamPeer) => void)[] = [];
  const server = createNetServer((s) => {
    const p = streamPeer(s);
    peers.push(p);
    waiters.shift()?.(p);
  });
  await new Promise<void>((r) => server.listen(0, host, () => r()));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  const port = (server.address() as { port: number }).port;
  return {
    server,
    port,
    peers,
    nextPeer: () => (peers.length > waiters.length ? Promise.resolve(peers[peers.length - 1]!) : new Promise((r) => waiters.push(r))),
  };
}

function request(o: { method?: string; via: string; callId?: string; cseq?: string; maxForwards?: string; body?: string; contentLength?: string | null; uri?: string }): string {
  const method = o.method ?? 'OPTIONS';
  const body = o.body ?? '';
  const lines = [
    `${method} ${o.uri ?? 'sip:agent@127.0.0.1'} SIP/2.0`,
    `Via: ${o.via}`,
    `Max-Forwards: ${o.maxForwards ?? '70'}`,
    'From: "Alice" <sip:alice@example.com>;tag=a73kszlfl',
    'To: <sip:agent@example.com>',
    `Call-ID: ${o.callId ?? 'call-1@example.com'}`,
    `CSeq: ${o.cseq ?? `1 ${method}`}`,
  ];
  if (o.contentLength !== null) lines.push(`Content-Length: ${o.contentLength ?? Buffer.byteLength(body)}`);
  return lines.join('\r\n') + '\r\n\r\n' + body;
}

function asResponse(buf: Buffer): SipResponse {
  const m = parseMessage(buf);
  if (m.isRequest) throw new Error('expected a response');
  return m;
}

function asRequest(buf: Buffer): SipRequest {
  const m = parseMessage(buf);
  if (!m.isRequest) throw new Error('expected a request');
  return m;
}

async function ipv6Available(): Promise<boolean> {
  const s = createSocket('udp6');
  try {
    await new Promise<void>((res, rej) => {
      s.once('error', rej);
      s.bind(0, '::1', () => res());
    });
    return true;
  } catch {
    return false;
  } finally {
    s.close();
  }
}

const HAS_IPV6 = await ipv6Available();

const openssl = opensslAvailable();

/** A self-signed certificate for localhost / 127.0.0.1 / ::1, made by openssl for this run. */
function selfSigned(): { cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-tls-'));
  try {
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-days', '1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1'],
      { stdio: 'ignore' },
    );
    return { cert: readFileSync(join(dir, 'cert.pem'), 'utf8'), key: readFileSync(join(dir, 'key.pem'), 'utf8') };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const UDP4: SipTransportListen = { protocol: 'udp', address: '127.0.0.1', port: 0 };
const TCP4: SipTransportListen = { protocol: 'tcp', address: '127.0.0.1', port: 0 };

// --- UDP -----------------------------------------------------------------------------------------

describe('UDP', () => {
  it('delivers a request with source, local and connectionId; rport and received are filled; the response reaches the real source port (NAT)', async () => {
    const layer = await startLayer([UDP4]);
    const port = portOf(layer, 'udp');
    const client = await udpPeer();
    // What a UA behind NAT sends: its private sent-by (here another local port, where nobody
    // should ever get the response) and an empty rport (RFC 3581 3).
    const decoy = await udpPeer();
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    await client.send(request({ via: `SIP/2.0/UDP 127.0.0.1:${decoy.port};branch=z9hG4bKnat1;rport` }), port);
    const inbound = await got;

    expect(inbound.source).toEqual({ protocol: 'udp', address: '127.0.0.1', port: client.port });
    expect(inbound.local).toEqual({ protocol: 'udp', address: '127.0.0.1', port });
    expect(inbound.connectionId).toBeTypeOf('string');
    const via = inbound.message.topVia!;
    expect(via.rport).toBe(client.port);
    expect(via.received).toBe('127.0.0.1'); // RFC 3581 4: added even when equal to sent-by
    expect(inbound.message.method).toBe('OPTIONS');

    await layer.send(createResponse(inbound.message, 200, undefined, { toTag: 'uas1' }), inbound.source, inbound.connectionId);
    const res = asResponse(await client.next());
    expect(res.status).toBe(200);
    expect(res.topVia!.rport).toBe(client.port);
    expect(res.topVia!.received).toBe('127.0.0.1');
    expect(res.topVia!.branch).toBe('z9hG4bKnat1');
    expect(await decoy.silent(100)).toBe(true);
    expect(layer.stats.messagesIn.udp).toBe(1);
    expect(layer.stats.messagesOut.udp).toBe(1);
  });

  it('without rport, a response goes to the source port; to received and the sent-by port only for a trusted proxy (RFC 3261 18.2.2)', async () => {
    for (const trusted of [false, true]) {
      const layer = await startLayer([UDP4], trusted ? { trustedProxies: ['10.0.0.0/8', '127.0.0.0/24'] } : {});
      const client = await udpPeer();
      const listener = await udpPeer();
      const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
      // A host name in sent-by: never equal to the source address, so `received` is added.
      await client.send(request({ via: `SIP/2.0/UDP pbx.example.invalid:${listener.port};branch=z9hG4bKnorport` }), portOf(layer, 'udp'));
      const inbound = await got;
      expect(inbound.message.topVia!.received).toBe('127.0.0.1');
      expect(inbound.message.topVia!.rport).toBeUndefined();

      await layer.send(createResponse(inbound.message, 200), inbound.source, inbound.connectionId);
      const [answered, silent] = trusted ? [listener, client] : [client, listener];
      expect(asResponse(await answered.next()).status).toBe(200);
      expect(await silent.silent(100)).toBe(true);
    }
  });

  it('maddr, a received or rport the client wrote, a Via naming TCP: honoured for a trusted proxy only', async () => {
    const decoy = await udpPeer('127.0.0.5');
    const forged = `SIP/2.0/UDP 127.0.0.1:${decoy.port};branch=z9hG4bKmaddr;rport=1;received=192.0.2.66;maddr=127.0.0.5`;
    for (const trusted of [false, true]) {
      const layer = await startLayer([UDP4], trusted ? { trustedProxies: ['127.0.0.1'] } : { trustedProxies: ['127.0.0.2/32', '::1'] });
      const client = await udpPeer();
      const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
      await client.send(request({ via: forged }), portOf(layer, 'udp'));
      const inbound = await got;
      // What the sender wrote in received= and rport= is replaced by what we saw.
      expect([inbound.message.topVia!.received, inbound.message.topVia!.rport]).toEqual(['127.0.0.1', client.port]);
      await layer.send(createResponse(inbound.message, 200), inbound.source, inbound.connectionId);
      const [answered, silent] = trusted ? [decoy, client] : [client, decoy];
      expect(asResponse(await answered.next()).status).toBe(200);
      expect(await silent.silent(100)).toBe(true);
    }
    // A request over UDP whose Via says TCP: answered over UDP at its source, no connection opened.
    const layer = await startLayer([UDP4, TCP4]);
    const client = await udpPeer();
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    await client.send(request({ via: `SIP/2.0/TCP 127.0.0.1:${portOf(layer, 'tcp')};branch=z9hG4bKtcpvia` }), portOf(layer, 'udp'));
    const inbound = await got;
    await layer.send(createResponse(inbound.message, 200), inbound.source, inbound.connectionId);
    expect(asResponse(await client.next()).status).toBe(200);
    expect(layer.stats.connectionsOpened).toBe(0);
    expect(() => new SipTransportLayer({ listen: [UDP4], trustedProxies: ['10.0.0.0/33'] })).toThrow(/not an IP address or CIDR/);
    expect(() => new SipTransportLayer({ listen: [UDP4], trustedProxies: ['proxy.example.com'] })).toThrow(SipTransportError);
  });

  it('adds no received when the sent-by is the source address and rport was not asked for', async () => {
    const layer = await startLayer([UDP4]);
    const client = await udpPeer();
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    await client.send(request({ via: `SIP/2.0/UDP 127.0.0.1:${client.port};branch=z9hG4bKplain` }), portOf(layer, 'udp'));
    const via = (await got).message.topVia!;
    expect(via.received).toBeUndefined();
    expect(via.rport).toBeUndefined();
  });

  it('answers a malformed request with a stateless 400: reason phrase, Via / From / To / Call-ID / CSeq copied, sent to the rport source', async () => {
    const layer = await startLayer([UDP4]);
    const client = await udpPeer();
    const decoy = await udpPeer();
    let events = 0;
    layer.on('request', () => events++);
    const via = `SIP/2.0/UDP 127.0.0.1:${decoy.port};branch=z9hG4bKbad1;rport`;
    await client.send(request({ method: 'INVITE', via, maxForwards: 'lots', callId: 'bad-mf@example.com', cseq: '7 INVITE' }), portOf(layer, 'udp'));
    const raw = await client.next();
    const text = raw.toString();
    expect(text.startsWith('SIP/2.0 400 Bad Request: malformed Max-Forwards\r\n')).toBe(true);
    const res = asResponse(raw);
    expect(res.status).toBe(400);
    expect(res.reason).toBe('Bad Request: malformed Max-Forwards');
    expect(res.get('via')).toBe(via);
    expect(res.callId).toBe('bad-mf@example.com');
    expect(res.cseq.toString()).toBe('7 INVITE');
    expect(res.from.tag).toBe('a73kszlfl');
    expect(res.to.tag).toBeTypeOf('string'); // RFC 3261 8.2.6.2
    expect(await decoy.silent(50)).toBe(true);
    expect(events).toBe(0);
    const st = layer.stats;
    expect(st.parseErrors).toBe(1);
    expect(st.statelessResponses).toBe(1);
    expect(st.messagesIn.udp).toBe(0);
  });

  it('answers another SIP version with 505 and a CSeq that breaks the grammar with 400, raw header values copied', async () => {
    const layer = await startLayer([UDP4]);
    const client = await udpPeer();
    const port = portOf(layer, 'udp');
    await client.send(request({ via: 'SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKv3;rport' }).replace('SIP/2.0\r\n', 'SIP/3.0\r\n'), port);
    expect((await client.next()).toString()).toMatch(/^SIP\/2\.0 505 Version Not Supported\r\n/);
    await client.send(request({ via: 'SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKcs;rport', cseq: 'fourteen OPTIONS' }), port);
    const text = (await client.next()).toString();
    expect(text).toMatch(/^SIP\/2\.0 400 Bad Request: malformed CSeq\r\n/);
    expect(text).toContain('\r\nCSeq: fourteen OPTIONS\r\n');
    expect(text).toContain('\r\nCall-ID: call-1@example.com\r\n');
  });

  it('never answers a malformed ACK, a malformed response or noise; counts them; CRLF datagrams are keep-alives', async () => {
    const layer = await startLayer([UDP4]);
    const client = await udpPeer();
    const port = portOf(layer, 'udp');
    await client.send(request({ method: 'ACK', via: 'SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKack;rport', maxForwards: 'x' }), port);
    await client.send('SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z9hG4bKr\r\nCall-ID: x\r\n\r\n', port);
    await client.send(Buffer.from([0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xa4, 0x42, 0xff]), port); // a STUN-ish binding request
    await client.send('hello', port);
    await client.send('\r\n\r\n', port);
    await until(() => layer.stats.received.udp === 5);
    expect(await client.silent(100)).toBe(true);
    const st = layer.stats;
    expect(st.droppedAcks).toBe(1);
    expect(st.droppedResponses).toBe(1);
    expect(st.droppedNoise).toBe(2);
    expect(st.keepAlives).toBe(1);
    expect(st.parseErrors).toBe(4);
    expect(st.statelessResponses).toBe(0);
  });

  it('answers a datagram larger than maxMessageBytes with 513 Message Too Large', async () => {
    const layer = await startLayer([UDP4], { maxMessageBytes: 2000 });
    const client = await udpPeer();
    await client.send(request({ method: 'INVITE', via: 'SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKbig;rport', body: 'x'.repeat(3000) }), portOf(layer, 'udp'));
    const res = asResponse(await client.next());
    expect(res.status).toBe(513);
    expect(res.reason).toBe('Message Too Large');
    expect(layer.stats.oversized).toBe(1);
    // An oversized response is dropped, never answered.
    await client.send(`SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:${client.port};branch=z9hG4bKr\r\n\r\n${'x'.repeat(3000)}`, portOf(layer, 'udp'));
    await until(() => layer.stats.droppedResponses === 1);
    expect(await client.silent(50)).toBe(true);
    expect(layer.stats.oversized).toBe(2);
  });

  it('sends a request: the placeholder Via gets our sent-by, Content-Length is right; the response comes back as a response event', async () => {
    const layer = await startLayer([UDP4]);
    const port = portOf(layer, 'udp');
    const peer = await udpPeer();
    const req = createRequest({
      method: 'MESSAGE',
      uri: `sip:peer@127.0.0.1:${peer.port}`,
      from: '<sip:agent@callbridge.invalid>',
      to: `<sip:peer@127.0.0.1:${peer.port}>`,
      via: placeholderVia('z9hG4bKout1'),
      body: 'hello',
      contentType: 'text/plain',
    });
    await layer.send(req, { protocol: 'udp', address: '127.0.0.1', port: peer.port });
    const raw = await peer.next();
    expect(raw.toString()).toContain('\r\nContent-Length: 5\r\n\r\nhello');
    const got = asRequest(raw);
    const via = got.topVia!;
    expect(via.transport).toBe('UDP');
    expect(via.host).toBe('127.0.0.1');
    expect(via.port).toBe(port);
    expect(via.branch).toBe('z9hG4bKout1');
    expect(via.rport).toBeNull();

    const resp = nextEvent<Inbound<SipResponse>>(layer, 'response');
    await peer.send(createResponse(got, 200, undefined, { toTag: 'p1' }).toBuffer(), via.port!);
    const inbound = await resp;
    expect(inbound.message.status).toBe(200);
    expect(inbound.message.topVia!.branch).toBe('z9hG4bKout1');
    expect(inbound.source).toEqual({ protocol: 'udp', address: '127.0.0.1', port: peer.port });
  });

  it('sends a UDP request to a host name (a carrier Contact): resolved with A/AAAA, unresolvable names reject with SIP_TRANSPORT_RESOLVE', async () => {
    const layer = await startLayer([UDP4]);
    const peer = await udpPeer();
    const req = createRequest({ method: 'OPTIONS', uri: `sip:localhost:${peer.port}`, from: '<sip:agent@callbridge.invalid>', to: `<sip:localhost:${peer.port}>`, via: placeholderVia() });
    await layer.send(req, { protocol: 'udp', address: 'localhost', port: peer.port });
    expect(asRequest(await peer.next()).method).toBe('OPTIONS');
    await expect(layer.send(req.clone(), { protocol: 'udp', address: 'no-such-host.invalid', port: 5060 })).rejects.toMatchObject({ code: 'SIP_TRANSPORT_RESOLVE' });
  });

  it('writes a UDP request above 1300 bytes with compact header names (RFC 3261 18.1.1, 7.3.3)', async () => {
    const layer = await startLayer([UDP4]);
    const peer = await udpPeer();
    const req = createRequest({ method: 'INVITE', uri: 'sip:peer@127.0.0.1', from: '<sip:a@b>', to: '<sip:peer@127.0.0.1>', via: placeholderVia(), body: 'v=0\r\n'.repeat(260), contentType: 'application/sdp' });
    await layer.send(req, { protocol: 'udp', address: '127.0.0.1', port: peer.port });
    const raw = (await peer.next()).toString();
    expect(raw).toContain('\r\nv: SIP/2.0/UDP 127.0.0.1:');
    expect(raw).toContain('\r\nl: 1300\r\n');
  });

  it.skipIf(!HAS_IPV6)('works on IPv6 (::1): received and rport filled, response delivered', async () => {
    const layer = await startLayer([{ protocol: 'udp', address: '::1', port: 0 }]);
    const client = await udpPeer('::1');
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    await client.send(request({ via: 'SIP/2.0/UDP [::1]:9;branch=z9hG4bKv6;rport', uri: 'sip:agent@[::1]' }), portOf(layer, 'udp'));
    const inbound = await got;
    expect(inbound.source).toEqual({ protocol: 'udp', address: '::1', port: client.port });
    expect(inbound.local.address).toBe('::1');
    expect(inbound.message.topVia!.rport).toBe(client.port);
    expect(inbound.message.topVia!.received).toBe('::1');
    expect(inbound.message.topVia!.toString()).toContain(`;rport=${client.port};received=::1`);
    await layer.send(createResponse(inbound.message, 200), inbound.source, inbound.connectionId);
    expect(asResponse(await client.next()).status).toBe(200);
    expect(layer.localEndpoint('udp', 6)).toEqual({ protocol: 'udp', address: '::1', port: portOf(layer, 'udp') });
  });
});

// --- TCP -----------------------------------------------------------------------------------------

describe('bare LF', () => {
  it('a response with a bare LF in its header section is dropped (UDP and TCP); a request over TCP is answered 400, then closed', async () => {
    const layer = await startLayer([UDP4, TCP4]);
    let events = 0;
    layer.on('response', () => events++);
    layer.on('request', () => events++);
    const client = await udpPeer();
    const resp = 'SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK1\r\nSubject: x\nVia: SIP/2.0/UDP 127.0.0.9:9\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: lf\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n';
    await client.send(resp, portOf(layer, 'udp'));
    await until(() => layer.stats.droppedResponses === 1);
    const c = await tcpPeer(portOf(layer, 'tcp'));
    c.write(resp);
    await c.closed;
    expect(layer.stats.droppedResponses).toBe(2);
    const r = await tcpPeer(portOf(layer, 'tcp'));
    r.write(request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKlf\nVia: SIP/2.0/TCP 127.0.0.9:9' }));
    const answer = asResponse(await r.next());
    expect([answer.status, answer.reason, answer.via.length]).toEqual([400, 'Bad Request: bare LF in header section', 1]);
    await r.closed;
    expect(layer.stats.framingErrors).toBe(2);
    expect(events).toBe(0);
  });
});

describe('TCP', () => {
  it('delivers pipelined messages from one write, and a message split into single bytes', async () => {
    const layer = await startLayer([TCP4]);
    const got: Inbound<SipRequest>[] = [];
    layer.on('request', (i) => got.push(i));
    const c = await tcpPeer(portOf(layer, 'tcp'));
    const a = request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKp1', callId: 'p1', body: 'one' });
    const b = request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKp2', callId: 'p2', body: 'two!' });
    c.write(a + b);
    await until(() => got.length === 2);
    const split = request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKp3', callId: 'p3', body: 'three' });
    for (const byte of Buffer.from(split)) {
      c.write(Buffer.from([byte]));
      await new Promise((r) => setImmediate(r));
    }
    await until(() => got.length === 3);
    expect(got.map((i) => [i.message.callId, i.message.body.toString()])).toEqual([
      ['p1', 'one'],
      ['p2', 'two!'],
      ['p3', 'three'],
    ]);
    expect(new Set(got.map((i) => i.connectionId)).size).toBe(1);
    expect(got[0]!.source.protocol).toBe('tcp');
    expect(got[0]!.local).toEqual({ protocol: 'tcp', address: '127.0.0.1', port: portOf(layer, 'tcp') });
    expect(got[0]!.message.topVia!.received).toBeUndefined(); // sent-by host is the source, no rport asked
  });

  it('answers a CRLFCRLF keep-alive ping with a CRLF pong (RFC 5626 4.4.1)', async () => {
    const layer = await startLayer([TCP4]);
    const c = await tcpPeer(portOf(layer, 'tcp'));
    c.write('\r\n\r\n');
    await until(() => c.pongs() === 1);
    expect(layer.stats.keepAlives).toBe(1);
  });

  it('answers a message that does not parse with 400 and keeps the connection', async () => {
    const layer = await startLayer([TCP4]);
    const c = await tcpPeer(portOf(layer, 'tcp'));
    c.write(request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKnocl', contentLength: null }));
    const res = asResponse(await c.next());
    expect(res.status).toBe(400);
    expect(res.reason).toBe('Bad Request: missing Content-Length');
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    c.write(request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKok' }));
    expect((await got).message.topVia!.branch).toBe('z9hG4bKok');
  });

  it('answers a framing error with 400, then closes the connection', async () => {
    const layer = await startLayer([TCP4]);
    const c = await tcpPeer(portOf(layer, 'tcp'));
    const closed = nextEvent<ConnectionInfo>(layer, 'connectionClosed');
    const reason = once(layer, 'connectionClosed').then((a) => a[1]);
    c.write(request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKframe', contentLength: 'many' }));
    const res = asResponse(await c.next());
    expect(res.status).toBe(400);
    expect(res.reason).toBe('Bad Request: malformed Content-Length');
    await c.closed;
    expect((await closed).protocol).toBe('tcp');
    expect(await reason).toBe('framing');
    expect(layer.stats.framingErrors).toBe(1);
    expect(layer.stats.connectionsOpen).toBe(0);
  });

  it('closes a connection whose header section passes the cap, without an answer', async () => {
    const layer = await startLayer([TCP4], { maxMessageBytes: 4096 });
    const c = await tcpPeer(portOf(layer, 'tcp'));
    c.write('OPTIONS sip:a@b SIP/2.0\r\nX-Long: ' + 'y'.repeat(5000));
    await c.closed;
    expect(layer.stats.oversized).toBe(1);
    expect(layer.stats.framingErrors).toBe(1);
  });

  it('sends the response over the connection the request came on', async () => {
    const layer = await startLayer([TCP4]);
    const c = await tcpPeer(portOf(layer, 'tcp'));
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    c.write(request({ via: 'SIP/2.0/TCP 10.9.9.9:5060;branch=z9hG4bKsame;rport' }));
    const inbound = await got;
    const via = inbound.message.topVia!;
    expect(via.received).toBe('127.0.0.1');
    expect(via.rport).toBe(c.socket.localPort);
    await layer.send(createResponse(inbound.message, 200), inbound.source, inbound.connectionId);
    expect(asResponse(await c.next()).status).toBe(200);
    expect(layer.stats.messagesOut.tcp).toBe(1);
  });

  it('when the connection is gone, opens one to received and the sent-by port for the response (RFC 3261 18.2.2)', async () => {
    const layer = await startLayer([TCP4]);
    const peerServer = await tcpServer();
    const c = await tcpPeer(portOf(layer, 'tcp'));
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    c.write(request({ via: `SIP/2.0/TCP peer.example.invalid:${peerServer.port};branch=z9hG4bKgone;rport` }));
    const inbound = await got;
    const closed = nextEvent(layer, 'connectionClosed');
    c.socket.destroy();
    await closed;
    await layer.send(createResponse(inbound.message, 486), inbound.source, inbound.connectionId);
    const p = await peerServer.nextPeer();
    expect(asResponse(await p.next()).status).toBe(486);
  });

  it('sends requests over one connection it opens and reuses (RFC 3261 18.1.1); responses on it come back', async () => {
    const layer = await startLayer([TCP4]);
    const peerServer = await tcpServer();
    const dest = { protocol: 'tcp' as const, address: '127.0.0.1', port: peerServer.port };
    const mk = (n: number): SipRequest =>
      createRequest({ method: 'OPTIONS', uri: `sip:peer@127.0.0.1:${peerServer.port};transport=tcp`, from: '<sip:agent@cb.invalid>', to: '<sip:peer@cb.invalid>', callId: `out-${n}`, via: placeholderVia(`z9hG4bKtcp${n}`) });
    const opened = nextEvent<ConnectionInfo>(layer, 'connection');
    await Promise.all([layer.send(mk(1), dest), layer.send(mk(2), dest)]);
    const info = await opened;
    expect(info.outbound).toBe(true);
    await layer.send(mk(3), dest);
    const p = await peerServer.nextPeer();
    const reqs = [asRequest(await p.next()), asRequest(await p.next()), asRequest(await p.next())];
    expect(peerServer.peers.length).toBe(1);
    expect(reqs.map((r) => r.callId).sort()).toEqual(['out-1', 'out-2', 'out-3']);
    const via = reqs[0]!.topVia!;
    expect(via.transport).toBe('TCP');
    expect(via.host).toBe('127.0.0.1');
    expect(via.port).toBe(portOf(layer, 'tcp')); // the listening port, not the connection's
    const resp = nextEvent<Inbound<SipResponse>>(layer, 'response');
    p.write(createResponse(reqs[0]!, 200).toBuffer());
    const inbound = await resp;
    expect(inbound.connectionId).toBe(info.id);
    expect(inbound.source.port).toBe(peerServer.port);
    expect(layer.stats.connectionsOpen).toBe(1);
  });

  it('rejects with SIP_TRANSPORT_CONNECT when nobody listens', async () => {
    const layer = await startLayer([TCP4]);
    const gone = await tcpServer();
    await new Promise<void>((r) => gone.server.close(() => r()));
    const req = createRequest({ method: 'OPTIONS', uri: 'sip:x@127.0.0.1', from: '<sip:a@b>', to: '<sip:x@127.0.0.1>', via: placeholderVia() });
    const err = await layer.send(req, { protocol: 'tcp', address: '127.0.0.1', port: gone.port }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SipTransportError);
    expect((err as SipTransportError).code).toBe('SIP_TRANSPORT_CONNECT');
    expect(layer.stats.connectFailures).toBe(1);
  });

  it('closes a connection idle for idleTimeoutMs', async () => {
    const layer = await startLayer([TCP4], { idleTimeoutMs: 150 });
    const reason = once(layer, 'connectionClosed', { signal: AbortSignal.timeout(3000) }).then((a) => a[1]);
    const c = await tcpPeer(portOf(layer, 'tcp'));
    await c.closed;
    expect(await reason).toBe('idle');
    expect(layer.stats.connectionsIdleClosed).toBe(1);
  });

  it('holdConnection keeps a connection open past idleTimeoutMs (a registered flow), and 0 gives it its idle timeout back', async () => {
    const layer = await startLayer([TCP4], { idleTimeoutMs: 150 });
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    const c = await tcpPeer(portOf(layer, 'tcp'));
    c.write(request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKhold' }));
    const id = (await got).connectionId!;
    expect(layer.holdConnection(id, 800)).toBe(true);
    await delay(450);
    expect(layer.stats.connectionsIdleClosed).toBe(0);
    expect(layer.connections().map((x) => x.id)).toEqual([id]);
    expect(layer.holdConnection(id, 0)).toBe(true);
    await c.closed;
    expect(layer.stats.connectionsIdleClosed).toBe(1);
    expect(layer.holdConnection(id, 800)).toBe(false);
  });

  it('evicts the least recently active connection at maxConnections', async () => {
    let t = 1000;
    const layer = await startLayer([TCP4], { maxConnections: 2, now: () => t });
    const port = portOf(layer, 'tcp');
    const c1 = await tcpPeer(port);
    await until(() => layer.stats.connectionsOpen === 1);
    t += 10;
    const c2 = await tcpPeer(port);
    await until(() => layer.stats.connectionsOpen === 2);
    t += 10;
    c1.write('\r\n\r\n'); // c1 is now the most recently active
    await until(() => c1.pongs() === 1);
    t += 10;
    const c3 = await tcpPeer(port);
    await c2.closed;
    await until(() => layer.stats.connectionsOpen === 2);
    expect(layer.stats.connectionsEvicted).toBe(1);
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    c3.write(request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKc3' }));
    expect((await got).message.topVia!.branch).toBe('z9hG4bKc3');
  });

  it('closes a connection whose message is not complete messageTimeoutMs after its first byte, bytes arriving or not; keep-alives start no deadline', async () => {
    const lines: unknown[][] = [];
    const logger = { debug: () => {}, info: (...a: unknown[]) => lines.push(a), warn: () => {}, error: () => {} };
    const layer = await startLayer([TCP4], { messageTimeoutMs: 200, logger });
    const port = portOf(layer, 'tcp');
    const reasons: string[] = [];
    layer.on('connectionClosed', (_info, reason) => reasons.push(reason));
    // Trickling: a byte every 30 ms (the idle timeout, 120 s, never fires).
    const slow = await tcpPeer(port);
    const text = request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKslow' });
    const t0 = Date.now();
    for (let i = 0; i < text.length - 1 && Date.now() - t0 < 1500; i++) {
      slow.write(text[i]!);
      await delay(30);
      if (layer.stats.messageTimeouts > 0) break;
    }
    await slow.closed;
    expect(Date.now() - t0).toBeGreaterThanOrEqual(190);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(reasons).toEqual(['message-timeout']);
    // Silent (half a message, then nothing): the same deadline.
    const silent = await tcpPeer(port);
    silent.write('OPTIONS sip:agent@127.0.0.1 SIP/2.0\r\n');
    await silent.closed;
    expect(layer.stats.messageTimeouts).toBe(2);
    // Logged once per window.
    expect(lines.filter((l) => l[1] === 'SIP connection closed: message not complete in time')).toHaveLength(1);
    // Keep-alives are no messages: half a ping held past the deadline, then pings and messages
    // in pieces each within it, on one connection.
    const ka = await tcpPeer(port);
    ka.write('\r\n');
    await delay(300);
    ka.write('\r\n');
    await until(() => ka.pongs() === 1);
    for (let round = 0; round < 3; round++) {
      const m = request({ via: `SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKka${round}`, callId: `ka-${round}` });
      const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
      ka.write(m.slice(0, 20));
      await delay(120);
      ka.write(m.slice(20));
      expect((await got).message.callId).toBe(`ka-${round}`);
      await delay(120);
    }
    expect(layer.stats.messageTimeouts).toBe(2);
    expect(layer.stats.connectionsOpen).toBe(1);
  });

  it('holds at most maxConnectionsPerSource inbound connections per source address (TLS handshakes included); refused at once, logged once', async () => {
    const lines: unknown[][] = [];
    const logger = { debug: () => {}, info: () => {}, warn: (...a: unknown[]) => lines.push(a), error: () => {} };
    const layer = await startLayer([TCP4], { maxConnectionsPerSource: 2, logger });
    const port = portOf(layer, 'tcp');
    const a = await tcpPeer(port, '127.0.0.1', '127.0.0.2');
    const b = await tcpPeer(port, '127.0.0.1', '127.0.0.2');
    await until(() => layer.stats.connectionsOpen === 2);
    const c = await tcpPeer(port, '127.0.0.1', '127.0.0.2');
    const d = await tcpPeer(port, '127.0.0.1', '127.0.0.2');
    await c.closed;
    await d.closed;
    expect(layer.stats.connectionsRefused).toBe(2);
    expect(layer.stats.connectionsOpened).toBe(2);
    expect(lines).toHaveLength(1);
    expect(lines[0]![0]).toMatchObject({ source: '127.0.0.2', limit: 2 });
    const other = await tcpPeer(port, '127.0.0.1', '127.0.0.3');
    await until(() => layer.stats.connectionsOpen === 3);
    a.socket.destroy();
    await until(() => layer.stats.connectionsOpen === 2);
    const e = await tcpPeer(port, '127.0.0.1', '127.0.0.2');
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    e.write(request({ via: 'SIP/2.0/TCP 127.0.0.2:9;branch=z9hG4bKagain' }));
    expect((await got).source.address).toBe('127.0.0.2');
    expect(layer.stats.connectionsRefused).toBe(2);
    b.socket.destroy();
    other.socket.destroy();
  });

  it('at maxConnections, evicts connections that never completed a message before established ones, however old', async () => {
    let t = 1000;
    const layer = await startLayer([TCP4], { maxConnections: 3, now: () => t });
    const port = portOf(layer, 'tcp');
    const pbx = await tcpPeer(port, '127.0.0.1', '127.0.0.10');
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    pbx.write(request({ via: 'SIP/2.0/TCP 127.0.0.10:5060;branch=z9hG4bKpbx1' }));
    await got;
    const closed: string[] = [];
    layer.on('connectionClosed', (info, reason) => closed.push(`${info.remote.address}:${reason}`));
    // Half-open connections, each more recently active than the PBX.
    const half: StreamPeer[] = [];
    for (let i = 0; i < 6; i++) {
      t += 1000;
      const h = await tcpPeer(port, '127.0.0.1', `127.0.0.${20 + i}`);
      h.write('OPTIONS sip:x SIP/2.0\r\nVia: SIP/2.0/TCP ');
      half.push(h);
      await until(() => layer.connections().some((c) => c.remote.address === `127.0.0.${20 + i}`));
    }
    expect(layer.stats.connectionsEvicted).toBe(4);
    expect(closed).toEqual(['127.0.0.20:evicted', '127.0.0.21:evicted', '127.0.0.22:evicted', '127.0.0.23:evicted']);
    expect(layer.connections().map((c) => c.remote.address).sort()).toEqual(['127.0.0.10', '127.0.0.24', '127.0.0.25']);
    // Only established ones left: then the least recently active of them.
    for (const h of half.slice(4)) h.write(`127.0.0.1:9;branch=z9hG4bK${Math.random().toString(36).slice(2)}\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:x@y>\r\nCall-ID: c\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n`);
    await until(() => layer.stats.messagesIn.tcp === 3);
    t += 1000;
    await tcpPeer(port, '127.0.0.1', '127.0.0.30');
    await pbx.closed;
    expect(closed.at(-1)).toBe('127.0.0.10:evicted');
  });

  it.skipIf(!HAS_IPV6)('listens on ::1 too', async () => {
    const layer = await startLayer([{ protocol: 'tcp', address: '::1', port: 0 }]);
    const c = await tcpPeer(portOf(layer, 'tcp'), '::1');
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    c.write(request({ via: 'SIP/2.0/TCP [::1]:9;branch=z9hG4bKt6;rport' }));
    const inbound = await got;
    expect(inbound.source.address).toBe('::1');
    expect(inbound.message.topVia!.received).toBe('::1');
  });
});

// --- TLS -----------------------------------------------------------------------------------------

describe.skipIf(openssl.skip)('TLS (self-signed certificate made with openssl; skipped without openssl outside CI)', () => {
  const pem = openssl.ok ? selfSigned() : { cert: '', key: '' };

  it('accepts requests over TLS and answers on the same connection', async () => {
    const layer = await startLayer([{ protocol: 'tls', address: '127.0.0.1', port: 0, tls: pem }]);
    const socket = tlsConnect({ host: '127.0.0.1', port: portOf(layer, 'tls'), ca: pem.cert });
    await once(socket, 'secureConnect');
    const c = streamPeer(socket);
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    c.write(request({ via: 'SIP/2.0/TLS client.invalid:5061;branch=z9hG4bKtls1;rport' }));
    const inbound = await got;
    expect(inbound.source.protocol).toBe('tls');
    expect(inbound.local.protocol).toBe('tls');
    expect(layer.isReliable('tls')).toBe(true);
    await layer.send(createResponse(inbound.message, 200), inbound.source, inbound.connectionId);
    expect(asResponse(await c.next()).status).toBe(200);
    c.write('\r\n\r\n');
    await until(() => c.pongs() === 1);
  });

  it('counts handshakes in progress under maxConnectionsPerSource; a refused socket gets no handshake and is no handshake failure', async () => {
    const layer = await startLayer([{ protocol: 'tls', address: '127.0.0.1', port: 0, tls: pem }], { maxConnectionsPerSource: 1 });
    const port = portOf(layer, 'tls');
    // Connected, handshake never started: it holds the source's one slot.
    const stalled = netConnect({ port, host: '127.0.0.1', localAddress: '127.0.0.7' });
    stalled.on('error', () => {});
    await once(stalled, 'connect');
    await delay(20);
    const refused = tlsConnect({ socket: netConnect({ port, host: '127.0.0.1', localAddress: '127.0.0.7' }), host: '127.0.0.1', ca: pem.cert });
    const outcome = await new Promise<string>((r) => {
      refused.once('secureConnect', () => r('handshake'));
      refused.once('error', () => r('refused'));
      refused.once('close', () => r('refused'));
    });
    expect(outcome).toBe('refused');
    expect(layer.stats.connectionsRefused).toBe(1);
    // Another source still gets in.
    const ok = tlsConnect({ socket: netConnect({ port, host: '127.0.0.1', localAddress: '127.0.0.8' }), host: '127.0.0.1', ca: pem.cert });
    await once(ok, 'secureConnect');
    await until(() => layer.stats.connectionsOpen === 1);
    ok.destroy();
    stalled.destroy();
    expect(layer.stats.tlsHandshakeFailures).toBe(0);
  });

  it('opens outgoing TLS connections, checking the certificate; an untrusted one fails with SIP_TRANSPORT_CONNECT', async () => {
    const server = await startLayer([{ protocol: 'tls', address: '127.0.0.1', port: 0, tls: pem }]);
    const dest = { protocol: 'tls' as const, address: '127.0.0.1', port: portOf(server, 'tls') };
    const client = await startLayer([UDP4], { outboundTls: { ca: pem.cert } });
    const got = nextEvent<Inbound<SipRequest>>(server, 'request');
    const req = createRequest({ method: 'OPTIONS', uri: `sips:agent@127.0.0.1:${dest.port}`, from: '<sip:a@b>', to: '<sips:agent@127.0.0.1>', via: placeholderVia('z9hG4bKtlsout') });
    await client.send(req, dest);
    const inbound = await got;
    const via = inbound.message.topVia!;
    expect(via.transport).toBe('TLS');
    expect(via.host).toBe('127.0.0.1');
    // No TLS listener on the client: its sent-by is the connection's own local port.
    expect(via.port).toBe(inbound.source.port);
    const resp = nextEvent<Inbound<SipResponse>>(client, 'response');
    await server.send(createResponse(inbound.message, 200), inbound.source, inbound.connectionId);
    expect((await resp).message.status).toBe(200);

    // A client that connects and never starts its handshake does not hold close() up.
    const idle = netConnect({ port: dest.port, host: '127.0.0.1' });
    idle.on('error', () => {});
    await once(idle, 'connect');
    const t0 = Date.now();
    const other = await startLayer([{ protocol: 'tls', address: '127.0.0.1', port: 0, tls: pem }]);
    const stalled = netConnect({ port: portOf(other, 'tls'), host: '127.0.0.1' });
    stalled.on('error', () => {});
    await once(stalled, 'connect');
    await delay(20);
    await other.close();
    expect(Date.now() - t0).toBeLessThan(1000);
    idle.destroy();
    stalled.destroy();

    const untrusting = await startLayer([UDP4]);
    const err = await untrusting.send(req.clone(), dest).catch((e: unknown) => e);
    expect((err as SipTransportError).code).toBe('SIP_TRANSPORT_CONNECT');
    await until(() => server.stats.tlsHandshakeFailures === 1);
  });
});

// --- lifecycle, robustness ----------------------------------------------------------------------------

describe('RFC 5626 keep-alives on TCP and TLS (we are the server)', () => {
  /** Every byte the peer receives, to see exactly what was answered. */
  function bytesOf(socket: Socket): () => string {
    const chunks: Buffer[] = [];
    socket.on('data', (c: Buffer) => chunks.push(c));
    return () => Buffer.concat(chunks).toString('latin1');
  }

  /** Pings every `everyMs` for `forMs`, each answered before the next; returns how many. */
  async function pingFor(c: StreamPeer, everyMs: number, forMs: number): Promise<number> {
    let n = 0;
    for (const end = Date.now() + forMs; Date.now() < end; n++) {
      const before = c.pongs();
      c.write('\r\n\r\n');
      await until(() => c.pongs() === before + 1);
      await delay(everyMs);
    }
    return n;
  }

  const keptOpenByPings = async (layer: SipTransportLayer, c: StreamPeer) => {
    // Pings for three idle timeouts: the connection is still there and nothing was closed as idle.
    // (The idle timeout is 500 ms so that a stall of the test's own event loop under load, which
    // delays our next ping, does not pass for a missing ping.)
    const n = await pingFor(c, 50, 1600);
    expect(n).toBeGreaterThan(5);
    expect(layer.stats.keepAlives).toBe(n);
    expect(layer.stats.connectionsIdleClosed).toBe(0);
    expect(layer.connections()).toHaveLength(1);
    // The pings stop: the idle timeout closes it.
    await c.closed;
    expect(layer.stats.connectionsIdleClosed).toBe(1);
  };

  it('TCP: a ping is answered with exactly one CRLF, and pings keep a connection open past idleTimeoutMs until they stop', async () => {
    const layer = await startLayer([TCP4], { idleTimeoutMs: 500 });
    const c = await tcpPeer(portOf(layer, 'tcp'));
    const received = bytesOf(c.socket);
    await keptOpenByPings(layer, c);
    expect(received()).toBe('\r\n'.repeat(layer.stats.keepAlives));
  });

  it.skipIf(openssl.skip)('TLS: pings are answered and keep the connection open the same way', async () => {
    const pem = selfSigned();
    const layer = await startLayer([{ protocol: 'tls', address: '127.0.0.1', port: 0, tls: pem }], { idleTimeoutMs: 500 });
    const socket = tlsConnect({ host: '127.0.0.1', port: portOf(layer, 'tls'), ca: pem.cert });
    await once(socket, 'secureConnect');
    await keptOpenByPings(layer, streamPeer(socket));
  });

  it('a held connection (a registered flow) stays open while pings come after its hold, and closes as idle once they stop', async () => {
    const layer = await startLayer([TCP4], { idleTimeoutMs: 150 });
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    const c = await tcpPeer(portOf(layer, 'tcp'));
    c.write(request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKflow' }));
    const id = (await got).connectionId!;
    expect(layer.holdConnection(id, 500)).toBe(true);
    // Pinging for three times the hold: open all along.
    const n = await pingFor(c, 50, 1600);
    expect(layer.stats.keepAlives).toBe(n);
    expect(layer.connections().map((x) => x.id)).toEqual([id]);
    expect(layer.stats.connectionsIdleClosed).toBe(0);
    await c.closed;
    expect(layer.stats.connectionsIdleClosed).toBe(1);
  });

  it('several pings in one chunk get one pong (pongs written back to back would read as our ping), every ping counted', async () => {
    const layer = await startLayer([TCP4]);
    const c = await tcpPeer(portOf(layer, 'tcp'));
    const received = bytesOf(c.socket);
    c.write('\r\n\r\n'.repeat(3));
    await until(() => layer.stats.keepAlives === 3);
    await until(() => received().length === 2);
    // A message after the pings on the same connection is still read.
    const got = nextEvent<Inbound<SipRequest>>(layer, 'request');
    c.write(request({ via: 'SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKafterpings' }));
    expect((await got).message.topVia!.branch).toBe('z9hG4bKafterpings');
    expect(received()).toBe('\r\n');
  });

  it('a ping split across chunks is answered once it is whole; half a ping gets nothing', async () => {
    const layer = await startLayer([TCP4]);
    const c = await tcpPeer(portOf(layer, 'tcp'));
    const received = bytesOf(c.socket);
    c.write('\r\n\r');
    await delay(100);
    expect(received()).toBe('');
    expect(layer.stats.keepAlives).toBe(0);
    c.write('\n');
    await until(() => received() === '\r\n');
    expect(layer.stats.keepAlives).toBe(1);
  });
});

describe('lifecycle', () => {
  it('close() is idempotent, sets closed, emits close once; send afterwards rejects with SIP_TRANSPORT_CLOSED', async () => {
    const layer = await startLayer([UDP4, TCP4]);
    let closes = 0;
    layer.on('close', () => closes++);
    const c = await tcpPeer(portOf(layer, 'tcp'));
    await until(() => layer.stats.connectionsOpen === 1);
    expect(layer.closed).toBe(false);
    await Promise.all([layer.close(), layer.close()]);
    await layer.close();
    expect(layer.closed).toBe(true);
    expect(closes).toBe(1);
    await c.closed;
    const req = createRequest({ method: 'OPTIONS', uri: 'sip:x@127.0.0.1', from: '<sip:a@b>', to: '<sip:x@127.0.0.1>' });
    const err = await layer.send(req, { protocol: 'udp', address: '127.0.0.1', port: 9 }).catch((e: unknown) => e);
    expect((err as SipTransportError).code).toBe('SIP_TRANSPORT_CLOSED');
    await expect(layer.start()).rejects.toMatchObject({ code: 'SIP_TRANSPORT_CLOSED' });
  });

  it('catches listeners that throw or reject, reports them as error events, and keeps going', async () => {
    const layer = await startLayer([UDP4]);
    const errors: SipTransportError[] = [];
    layer.on('error', (e) => errors.push(e));
    let n = 0;
    layer.on('request', () => {
      n++;
      if (n === 1) throw new Error('boom');
    });
    layer.on('request', async () => {
      if (n === 2) throw new Error('async boom');
    });
    const client = await udpPeer();
    const port = portOf(layer, 'udp');
    await client.send(request({ via: 'SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKl1' }), port);
    await until(() => n === 1);
    await client.send(request({ via: 'SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKl2' }), port);
    await until(() => errors.length === 2);
    expect(errors.map((e) => e.code)).toEqual(['SIP_TRANSPORT_LISTENER', 'SIP_TRANSPORT_LISTENER']);
    expect(errors[0]!.message).toContain('boom');
    expect(layer.stats.listenerErrors).toBe(2);
    expect(n).toBe(2);
  });

  it('logs malformed input at most once per interval, with the count suppressed', async () => {
    const logs: { level: string; obj: Record<string, unknown>; msg: string | undefined }[] = [];
    const log = (level: string) => (obj: object, msg?: string) => logs.push({ level, obj: obj as Record<string, unknown>, msg });
    let t = 0;
    const layer = await startLayer([UDP4], { logger: { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') }, logIntervalMs: 1000, now: () => t });
    const client = await udpPeer();
    const bad = request({ via: 'SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bKlog;rport', maxForwards: 'x' });
    for (let i = 0; i < 5; i++) await client.send(bad, portOf(layer, 'udp'));
    await until(() => layer.stats.statelessResponses === 5);
    t = 1500;
    await client.send(bad, portOf(layer, 'udp'));
    await until(() => layer.stats.statelessResponses === 6);
    const answered = logs.filter((l) => l.msg === 'malformed SIP request answered statelessly');
    expect(answered.length).toBe(2);
    expect(answered[1]!.obj.suppressed).toBe(4);
  });

  it('refuses bad options and busy ports with stable codes', async () => {
    const taken = await startLayer([UDP4]);
    await expect(startLayer([{ protocol: 'udp', address: '127.0.0.1', port: portOf(taken, 'udp') }])).rejects.toMatchObject({ code: 'SIP_TRANSPORT_BIND' });
    await expect(startLayer([{ protocol: 'tls', address: '127.0.0.1', port: 0 }])).rejects.toMatchObject({ code: 'SIP_TRANSPORT_CONFIG' });
    await expect(startLayer([{ protocol: 'udp', address: 'localhost', port: 0 }])).rejects.toMatchObject({ code: 'SIP_TRANSPORT_CONFIG' });
    // A failed start leaves nothing bound: the TCP port of a half-started layer is free again.
    const probe = await tcpServer();
    const port = probe.port;
    await new Promise<void>((r) => probe.server.close(() => r()));
    await expect(startLayer([{ protocol: 'tcp', address: '127.0.0.1', port }, { protocol: 'udp', address: '127.0.0.1', port: portOf(taken, 'udp') }])).rejects.toBeInstanceOf(SipTransportError);
    const again = await startLayer([{ protocol: 'tcp', address: '127.0.0.1', port }]);
    expect(portOf(again, 'tcp')).toBe(port);
  });

  it('reports its local endpoints and reliability', async () => {
    const layer = await startLayer([UDP4, TCP4, { protocol: 'tcp', address: '127.0.0.1', port: 0, advertise: 'sip.example.com', advertisePort: 5070 }]);
    expect(layer.isReliable('udp')).toBe(false);
    expect(layer.isReliable('tcp')).toBe(true);
    expect(layer.localEndpoint('udp')).toEqual({ protocol: 'udp', address: '127.0.0.1', port: portOf(layer, 'udp') });
    expect(layer.localEndpoint('tcp').port).toBe(layer.endpoints[1]!.port);
    expect(() => layer.localEndpoint('tls')).toThrow(SipTransportError);
    expect(layer.endpoints.length).toBe(3);
  });

  it('advertises the configured host in Via sent-by', async () => {
    const layer = await startLayer([{ protocol: 'udp', address: '127.0.0.1', port: 0, advertise: 'sip.example.com', advertisePort: 5080 }]);
    const peer = await udpPeer();
    const req = createRequest({ method: 'OPTIONS', uri: 'sip:x@127.0.0.1', from: '<sip:a@b>', to: '<sip:x@127.0.0.1>', via: placeholderVia() });
    await layer.send(req, { protocol: 'udp', address: '127.0.0.1', port: peer.port });
    expect(asRequest(await peer.next()).topVia!.sentBy).toBe('sip.example.com:5080');
  });
});
