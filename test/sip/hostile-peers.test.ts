/**
 * Hostile peers against a real daemon (SIP on 127.0.0.1, UDP and TCP on one OS-chosen port):
 * the hardening probes (TCP slowloris, responses reflected to a third address, a bare LF that
 * split a header), kept as lasting tests.
 *
 * - Slowloris over TCP: a connection that sends no byte is closed at the first-byte deadline
 *   (the same setting); a message trickled one byte at a time is cut at the whole-message
 *   deadline (sip.tcp_message_timeout_ms) although bytes keep arriving; one source address
 *   holds at most sip.tcp_max_connections_per_source connections; at sip.tcp_max_connections
 *   the half-open connections are evicted before a PBX's persistent connection that completed
 *   messages.
 * - Reflection: an OPTIONS over UDP whose Via carries `maddr=` or a forged `received=` is
 *   answered at the packet's source, never at the addresses the Via names (sockets bound on
 *   127.0.0.5 / 127.0.0.6 prove that nothing arrives there).
 * - Header injection by a bare LF: `Subject: hi\nVia: ...` is a 400 that says why, not a second
 *   Via echoed in a 200; over TCP the 400 is followed by a close (the stream's framing is lost).
 *
 * Linux routes all of 127.0.0.0/8 to loopback, so peers bind 127.0.0.x source addresses to look
 * like different hosts. Timers are shortened through the config (400 ms message deadline).
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { once } from 'node:events';
import { connect as netConnect, createServer as createNetServer, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseMessage, SipStreamFramer, type SipResponse } from '../../src/sip/message/index.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

const MESSAGE_TIMEOUT_MS = 400;
const PER_SOURCE = 4;
const MAX_CONNECTIONS = 12;

let td: TestDaemon;
let sipPort: number;
const cleanups: (() => unknown)[] = [];

beforeAll(async () => {
  td = await startTestDaemon({
    sip: {
      tcp_message_timeout_ms: MESSAGE_TIMEOUT_MS,
      tcp_max_connections_per_source: PER_SOURCE,
      tcp_max_connections: MAX_CONNECTIONS,
    },
  });
  sipPort = td.daemon.sip!.port;
});

afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

afterAll(async () => {
  await td?.close();
});

const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function transportStats() {
  return td.daemon.sip!.ua.transport.stats;
}

async function until(cond: () => boolean, what: string, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await delay(5);
  }
}

let seq = 0;

/** An OPTIONS as a PBX sends it; `via` is the whole top Via value, `extra` raw header lines. */
function options(via: string, o: { extra?: string; callId?: string } = {}): string {
  const n = ++seq;
  return (
    `OPTIONS sip:probe@127.0.0.1:${sipPort} SIP/2.0\r\n` +
    `Via: ${via}\r\n` +
    'Max-Forwards: 70\r\n' +
    `From: <sip:probe@127.0.0.1>;tag=probe${n}\r\n` +
    `To: <sip:callbridge@127.0.0.1:${sipPort}>\r\n` +
    `Call-ID: ${o.callId ?? `hostile-${n}@probe`}\r\n` +
    `CSeq: ${n} OPTIONS\r\n` +
    (o.extra ?? '') +
    'Content-Length: 0\r\n\r\n'
  );
}

function branch(): string {
  return `z9hG4bKhostile${++seq}`;
}

// --- peers ---------------------------------------------------------------------------------------

interface UdpPeer {
  socket: UdpSocket;
  address: string;
  port: number;
  received: Buffer[];
  send(data: string): Promise<void>;
  next(ms?: number): Promise<Buffer>;
}

async function udpPeer(address = '127.0.0.1', port = 0): Promise<UdpPeer> {
  const socket = createSocket('udp4');
  const received: Buffer[] = [];
  const waiters: ((b: Buffer) => void)[] = [];
  socket.on('message', (m) => {
    const w = waiters.shift();
    if (w) w(m);
    else received.push(m);
  });
  await new Promise<void>((r, j) => {
    socket.once('error', j);
    socket.bind(port, address, () => r());
  });
  cleanups.push(() => new Promise<void>((r) => socket.close(() => r())));
  return {
    socket,
    address,
    port: socket.address().port,
    received,
    send: (data) => new Promise<void>((res, rej) => socket.send(data, sipPort, '127.0.0.1', (err) => (err ? rej(err) : res()))),
    next: (ms = 2000) => {
      const q = received.shift();
      if (q) return Promise.resolve(q);
      return new Promise((res, rej) => {
        const w = (b: Buffer): void => {
          clearTimeout(t);
          res(b);
        };
        const t = setTimeout(() => {
          waiters.splice(waiters.indexOf(w), 1);
          rej(new Error('no datagram'));
        }, ms);
        waiters.push(w);
      });
    },
  };
}

interface TcpPeer {
  socket: Socket;
  /** Resolves when the connection is closed (by either side); the time it closed. */
  closed: Promise<number>;
  isClosed(): boolean;
  next(ms?: number): Promise<Buffer>;
}

async function tcpPeer(localAddress: string): Promise<TcpPeer> {
  const socket = netConnect({ port: sipPort, host: '127.0.0.1', localAddress });
  socket.on('error', () => {});
  const framer = new SipStreamFramer();
  const queue: Buffer[] = [];
  const waiters: ((b: Buffer) => void)[] = [];
  let isClosed = false;
  socket.on('data', (chunk: Buffer) => {
    for (const m of framer.push(chunk)) {
      const w = waiters.shift();
      if (w) w(m);
      else queue.push(m);
    }
  });
  const closed = new Promise<number>((r) =>
    socket.once('close', () => {
      isClosed = true;
      r(Date.now());
    }),
  );
  cleanups.push(() => socket.destroy());
  await once(socket, 'connect');
  return {
    socket,
    closed,
    isClosed: () => isClosed,
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

function asResponse(buf: Buffer): SipResponse {
  const m = parseMessage(buf);
  if (m.isRequest) throw new Error('expected a response');
  return m;
}

/** An OPTIONS over `peer` answered 200 on the same connection. */
async function ping(peer: TcpPeer, address: string): Promise<SipResponse> {
  const { port } = peer.socket.address() as { port: number };
  peer.socket.write(options(`SIP/2.0/TCP ${address}:${port};branch=${branch()};rport`));
  return asResponse(await peer.next());
}

// --- TCP slowloris ----------------------------------------------------------------------------------

describe('TCP: slow and numerous peers', () => {
  it('closes a connection whose message is not complete at the deadline, though a byte arrives every 50 ms', async () => {
    const peer = await tcpPeer('127.0.0.20');
    const text = options(`SIP/2.0/TCP 127.0.0.20:5060;branch=${branch()}`);
    const before = transportStats().messageTimeouts ?? 0;
    const start = Date.now();
    let sent = 0;
    // One byte every 50 ms: always far inside the idle timeout (120 s), never a whole message.
    while (!peer.isClosed() && sent < text.length - 1 && Date.now() - start < 3000) {
      peer.socket.write(text[sent++]!);
      await delay(50);
    }
    const closedAt = await Promise.race([peer.closed, delay(100).then(() => undefined)]);
    expect(closedAt, 'the trickling connection is still open after 3 s').toBeDefined();
    const elapsed = closedAt! - start;
    expect(elapsed).toBeGreaterThanOrEqual(MESSAGE_TIMEOUT_MS - 50);
    expect(elapsed).toBeLessThan(MESSAGE_TIMEOUT_MS + 1000);
    expect(sent).toBeGreaterThan(4); // bytes were still arriving when it was cut
    expect(transportStats().messageTimeouts).toBe(before + 1);

    // A peer that sends its message in pieces, but within the deadline, is served, and the
    // deadline starts again with its next message.
    const ok = await tcpPeer('127.0.0.20');
    const { port } = ok.socket.address() as { port: number };
    for (let round = 0; round < 2; round++) {
      const msg = options(`SIP/2.0/TCP 127.0.0.20:${port};branch=${branch()};rport`);
      const third = Math.floor(msg.length / 3);
      for (const part of [msg.slice(0, third), msg.slice(third, 2 * third), msg.slice(2 * third)]) {
        ok.socket.write(part);
        await delay(MESSAGE_TIMEOUT_MS / 4);
      }
      expect(asResponse(await ok.next()).status).toBe(200);
    }
    expect(ok.isClosed()).toBe(false);
  });

  it('closes a connection that sends no byte at the deadline (not at the 120 s idle timeout); a first byte meets it', async () => {
    const before = transportStats().messageTimeouts;
    const start = Date.now();
    const silent = await tcpPeer('127.0.0.23');
    // A peer whose first bytes are a keep-alive and, later, a message is a live peer.
    const pinging = await tcpPeer('127.0.0.23');
    pinging.socket.write('\r\n\r\n');
    const closedAt = await Promise.race([silent.closed, delay(3000).then(() => undefined)]);
    expect(closedAt, 'the silent connection is still open after 3 s').toBeDefined();
    expect(closedAt! - start).toBeGreaterThanOrEqual(MESSAGE_TIMEOUT_MS - 50);
    expect(transportStats().messageTimeouts).toBe(before + 1);
    await delay(MESSAGE_TIMEOUT_MS);
    expect(pinging.isClosed()).toBe(false);
    expect((await ping(pinging, '127.0.0.23')).status).toBe(200);
  });

  it(`holds at most ${PER_SOURCE} connections per source address; the next is closed at once, other sources are served`, async () => {
    const held: TcpPeer[] = [];
    for (let i = 0; i < PER_SOURCE; i++) held.push(await tcpPeer('127.0.0.21'));
    for (const p of held) expect((await ping(p, '127.0.0.21')).status).toBe(200);
    const before = transportStats().connectionsRefused ?? 0;

    const over = await tcpPeer('127.0.0.21');
    const closedAt = await Promise.race([over.closed, delay(1000).then(() => undefined)]);
    expect(closedAt, 'the connection over the per-source limit was kept').toBeDefined();
    expect(transportStats().connectionsRefused).toBe(before + 1);
    // The held ones are untouched, and another source is served.
    for (const p of held) expect((await ping(p, '127.0.0.21')).status).toBe(200);
    const other = await tcpPeer('127.0.0.22');
    expect((await ping(other, '127.0.0.22')).status).toBe(200);

    // A slot freed is a slot the source may use again.
    held.pop()!.socket.destroy();
    await delay(50);
    const again = await tcpPeer('127.0.0.21');
    expect((await ping(again, '127.0.0.21')).status).toBe(200);
  });

  it(`at ${MAX_CONNECTIONS} connections, half-open ones are evicted before a PBX's persistent connection that completed messages`, async () => {
    await until(() => transportStats().connectionsOpen === 0, "the earlier tests' connections to close");
    const pbx = await tcpPeer('127.0.0.30');
    expect((await ping(pbx, '127.0.0.30')).status).toBe(200);
    const evictedBefore = transportStats().connectionsEvicted;

    // 3 x 10 sources (under the per-source limit) open connections and start a message each:
    // more recently active than the PBX, never complete.
    const attackers: TcpPeer[] = [];
    for (let s = 0; s < 10; s++) {
      for (let k = 0; k < 3; k++) {
        const a = await tcpPeer(`127.0.0.${31 + s}`);
        a.socket.write('OPTIONS sip:probe@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP ');
        attackers.push(a);
      }
    }
    await until(() => transportStats().connectionsEvicted - evictedBefore >= attackers.length - MAX_CONNECTIONS + 1, 'evictions');
    expect(pbx.isClosed()).toBe(false);
    // The PBX's next OPTIONS (30 s later in real life) still finds its connection.
    expect((await ping(pbx, '127.0.0.30')).status).toBe(200);
    expect(td.daemon.sip!.ua.transport.connections().length).toBeLessThanOrEqual(MAX_CONNECTIONS);
    for (const a of attackers) a.socket.destroy();

    // What the tests above did, as an operator sees it.
    const metrics = await (await fetch(`${td.url}/metrics`)).text();
    const count = (reason: string) => Number(new RegExp(`^callbridge_sip_tcp_connections_closed_total\\{reason="${reason}"\\} (\\d+)$`, 'm').exec(metrics)?.[1]);
    expect(count('message_timeout')).toBeGreaterThanOrEqual(1);
    expect(count('refused')).toBeGreaterThanOrEqual(1);
    expect(count('evicted')).toBeGreaterThanOrEqual(attackers.length - MAX_CONNECTIONS + 1);
  });
});

// --- responses reflected to a third address ----------------------------------------------------

describe('UDP: responses go to the packet source, whatever the Via says', () => {
  it('ignores maddr and a forged received; nothing reaches the addresses the Via names', async () => {
    const client = await udpPeer('127.0.0.1');
    // Decoys at the Via's sent-by port on the addresses an attacker names.
    const decoy5 = await udpPeer('127.0.0.5');
    const decoy6 = await udpPeer('127.0.0.6', decoy5.port);
    const tcpDecoy = createNetServer((s) => {
      tcpConnections++;
      s.destroy();
    });
    let tcpConnections = 0;
    await new Promise<void>((r) => tcpDecoy.listen(decoy5.port, '127.0.0.6', () => r()));
    cleanups.push(() => new Promise<void>((r) => tcpDecoy.close(() => r())));
    const P = decoy5.port;

    const probes = [
      `SIP/2.0/UDP 127.0.0.1:${P};branch=${branch()};maddr=127.0.0.5;received=127.0.0.6`,
      `SIP/2.0/UDP 127.0.0.1:${P};branch=${branch()};maddr=127.0.0.5`,
      `SIP/2.0/UDP 127.0.0.1:${P};branch=${branch()};received=127.0.0.6`,
      `SIP/2.0/UDP 127.0.0.1:${P};branch=${branch()};rport;maddr=127.0.0.5`,
      `SIP/2.0/UDP 127.0.0.1:${P};branch=${branch()};received=127.0.0.6;rport=${P}`,
      // A Via naming TCP on a request that came over UDP: no connection to anybody.
      `SIP/2.0/TCP 127.0.0.1:${P};branch=${branch()};received=127.0.0.6`,
    ];
    for (const via of probes) {
      await client.send(options(via));
      const res = asResponse(await client.next());
      expect(res.status, via).toBe(200);
      expect(res.topVia!.branch).toBe(/branch=([^;]+)/.exec(via)![1]);
      // The Via as the UAC sees it in the response: a received it wrote is replaced by the real source.
      if (via.includes('received=')) expect(res.topVia!.received).toBe('127.0.0.1');
    }
    await delay(200);
    expect(decoy5.received.map(String)).toEqual([]);
    expect(decoy6.received.map(String)).toEqual([]);
    expect(tcpConnections).toBe(0);
    expect(client.received).toEqual([]); // exactly one response per probe
  });
});

// --- a bare LF splits a header -------------------------------------------------------------------

describe('a bare LF in the header section', () => {
  it('UDP: `Subject: hi\\nVia: ...` is a 400 saying why, with the one real Via; nothing reaches the injected Via', async () => {
    const client = await udpPeer('127.0.0.1');
    const injected = await udpPeer('127.0.0.9');
    const via = `SIP/2.0/UDP 127.0.0.1:${client.port};branch=${branch()};rport`;
    await client.send(options(via, { extra: `Subject: hi\nVia: SIP/2.0/UDP 127.0.0.9:${injected.port}\r\n` }));
    const raw = await client.next();
    const res = asResponse(raw);
    expect(res.status).toBe(400);
    expect(res.reason).toMatch(/bare LF/);
    expect(res.via).toHaveLength(1);
    expect(res.topVia!.branch).toBe(/branch=([^;]+)/.exec(via)![1]);
    expect(raw.toString('latin1')).not.toContain('127.0.0.9');
    await delay(150);
    expect(client.received).toEqual([]);
    expect(injected.received).toEqual([]);
  });

  it('TCP: the same probe is a 400, then the connection is closed (its framing cannot be trusted)', async () => {
    const peer = await tcpPeer('127.0.0.40');
    const { port } = peer.socket.address() as { port: number };
    peer.socket.write(options(`SIP/2.0/TCP 127.0.0.40:${port};branch=${branch()};rport`, { extra: 'Subject: hi\nVia: SIP/2.0/UDP 127.0.0.9:5999\r\n' }));
    const res = asResponse(await peer.next());
    expect(res.status).toBe(400);
    expect(res.reason).toMatch(/bare LF/);
    expect(res.via).toHaveLength(1);
    await Promise.race([peer.closed, delay(3000).then(() => Promise.reject(new Error('the connection stayed open')))]);
  });
});
