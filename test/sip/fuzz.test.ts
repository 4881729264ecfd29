/**
 * Issue 4, "done when": "A fuzz test feeds at least 100,000 mutated and random messages over UDP
 * and TCP: no crash, the process stays responsive, memory stays bounded."
 *
 * One SipTransportLayer listens on UDP and TCP (127.0.0.1, OS-chosen ports). A seeded generator
 * mutates the SIP fixtures (every file of test/fixtures/sip: valid INVITE, REGISTER, OPTIONS,
 * responses and the RFC 4475 torture messages) and mixes in random bytes. About two thirds go
 * out as UDP datagrams, paced in small batches so the socket buffer does not simply drop them;
 * the rest are written over several TCP connections in randomly split chunks, reconnecting
 * whenever the layer closes one (framing errors). What counts is what the layer processed, read
 * from its stats: datagrams received + framed TCP messages + TCP framing errors >= 100,000.
 *
 * Then: the layer is still open, a valid OPTIONS over UDP and over a new TCP connection is
 * delivered and answered within 1 s each, the event loop never stalled (max delay measured),
 * and the heap after a forced GC grew by less than HEAP_BOUND_MB. The GC is forced through
 * v8.setFlagsFromString('--expose-gc') plus a fresh context's `gc`, so no runner flag is needed.
 *
 * More on demand: SIP_FUZZ_MESSAGES=1000000 npx vitest run test/sip/fuzz.test.ts
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { once } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { connect as netConnect, type Socket } from 'node:net';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createResponse, parseMessage, SipRequest, SipStreamFramer } from '../../src/sip/message.ts';
import { SipTransportLayer, type Inbound } from '../../src/sip/transport.ts';
import { prng } from '../helpers/prng.ts';

const TOTAL = Number(process.env.SIP_FUZZ_MESSAGES ?? 100_000);
const UDP_SHARE = 0.65;
const TCP_CONNECTIONS = 4;
const HEAP_BOUND_MB = 48;
const SEED = Number(process.env.SIP_FUZZ_SEED ?? 0x5eed4);

// --- generator ------------------------------------------------------------------------------------

// The shared seeded PRNG (test/helpers/prng.ts), so a failure can be replayed with SIP_FUZZ_SEED.

const FIXTURES = join(import.meta.dirname, '../fixtures/sip');

/** The fixture loader of message.test.ts: LF -> CRLF, <hex>..</hex> -> raw octets. */
function fixture(file: string): Buffer {
  const text = readFileSync(join(FIXTURES, file), 'utf8').replace(/\n/g, '\r\n');
  const parts: Buffer[] = [];
  let pos = 0;
  for (const m of text.matchAll(/<hex>([0-9A-Fa-f]*)<\/hex>/g)) {
    parts.push(Buffer.from(text.slice(pos, m.index), 'utf8'), Buffer.from(m[1]!, 'hex'));
    pos = m.index + m[0].length;
  }
  parts.push(Buffer.from(text.slice(pos), 'utf8'));
  return Buffer.concat(parts);
}

/**
 * The corpus, with each message's first Via pointed at `host:port;rport`: stateless answers to
 * mutated requests then come back to the fuzzing socket instead of 127.0.0.1:5060, where some
 * other program on this machine might listen.
 */
function corpus(port: number): Buffer[] {
  return readdirSync(FIXTURES)
    .filter((f) => f.endsWith('.txt'))
    .sort()
    .map((f) => {
      const text = fixture(f).toString('latin1');
      const re = /(\r\n(?:Via|v)[ \t]*:[ \t]*)SIP[ \t]*\/[ \t]*2\.0[ \t]*\/[ \t]*[A-Za-z]+[ \t]+[^;,\r\n]*/i;
      return Buffer.from(text.replace(re, `$1SIP/2.0/UDP 127.0.0.1:${port};rport`), 'latin1');
    });
}

const HEADER_NAMES = ['Via', 'v', 'From', 'f', 'To', 't', 'Call-ID', 'i', 'CSeq', 'Content-Length', 'l', 'Contact', 'm', 'Max-Forwards', 'Route', 'Content-Type', 'c', 'Expires', 'X-Fuzz'];
const NASTY = ['\r', '\n', '\0', '\r\n', '\r\n\r\n', ':', ';', ',', '"', '<', '>', '\\', ' ', '\t', '%', '@', '[', ']', '\u00ff', '999999999999', '-1', ''];

class Mutator {
  readonly #rand: () => number;
  readonly #base: Buffer[];
  constructor(seed: number, base: Buffer[]) {
    this.#rand = prng(seed);
    this.#base = base;
  }

  int(n: number): number {
    return Math.floor(this.#rand() * n);
  }

  chance(p: number): boolean {
    return this.#rand() < p;
  }

  bytes(n: number): Buffer {
    const b = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) b[i] = this.int(256);
    return b;
  }

  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)]!;
  }

  /** One message: random bytes (15%), a fixture as is (5%), or a fixture with 1-3 mutations. */
  next(): Buffer {
    const r = this.#rand();
    if (r < 0.15) return this.bytes(this.int(this.chance(0.9) ? 600 : 4000));
    let m = this.pick(this.#base);
    if (r < 0.2) return m;
    const n = this.chance(0.6) ? 1 : 2 + this.int(2);
    for (let i = 0; i < n; i++) m = this.mutate(m);
    return m;
  }

  mutate(m: Buffer): Buffer {
    const len = m.length;
    const at = this.int(len + 1);
    switch (this.int(11)) {
      case 0: {
        // flip bits
        const c = Buffer.from(m);
        for (let k = 1 + this.int(8); k > 0 && len > 0; k--) {
          const i = this.int(len);
          c[i] = c[i]! ^ (1 << this.int(8));
        }
        return c;
      }
      case 1:
        return Buffer.concat([m.subarray(0, at), this.bytes(1 + this.int(32)), m.subarray(at)]);
      case 2:
        return Buffer.concat([m.subarray(0, at), m.subarray(Math.min(len, at + 1 + this.int(64)))]);
      case 3: {
        // duplicate a range (repeated headers, repeated lines)
        const end = Math.min(len, at + 1 + this.int(200));
        return Buffer.concat([m.subarray(0, end), m.subarray(at, end), m.subarray(end)]);
      }
      case 4:
        return m.subarray(0, at); // truncated
      case 5:
        return Buffer.concat([m.subarray(0, at), Buffer.from(this.pick(NASTY), 'latin1'), m.subarray(at)]);
      case 6:
      case 7: {
        // replace one header value with something odd
        const text = m.toString('latin1');
        const lines = text.split('\r\n');
        const i = 1 + this.int(Math.max(1, lines.length - 1));
        const line = lines[i];
        if (line === undefined || line.length === 0) return m;
        const colon = line.indexOf(':');
        const name = colon > 0 && this.chance(0.7) ? line.slice(0, colon) : this.pick(HEADER_NAMES);
        const value = this.chance(0.5) ? this.pick(NASTY).repeat(1 + this.int(4)) : this.bytes(this.int(40)).toString('latin1');
        lines[i] = `${name}: ${value}`;
        return Buffer.from(lines.join('\r\n'), 'latin1');
      }
      case 8: {
        // a Content-Length that lies
        const text = m.toString('latin1');
        const v = this.pick(['0', '1', '5', '100', '4096', '70000', '2147483648', 'x', '-3', ' 12 ', '1, 2']);
        const re = /\r\n(Content-Length|l)[ \t]*:[^\r\n]*/i;
        return Buffer.from(re.test(text) ? text.replace(re, `\r\nContent-Length: ${v}`) : text.replace('\r\n', `\r\nContent-Length: ${v}\r\n`), 'latin1');
      }
      case 9: {
        // swap two lines
        const lines = m.toString('latin1').split('\r\n');
        const a = this.int(lines.length);
        const b = this.int(lines.length);
        [lines[a], lines[b]] = [lines[b]!, lines[a]!];
        return Buffer.from(lines.join('\r\n'), 'latin1');
      }
      default:
        // a folded continuation line or a very long header
        return this.chance(0.5)
          ? Buffer.concat([m.subarray(0, at), Buffer.from('\r\n \t'), m.subarray(at)])
          : Buffer.concat([m.subarray(0, at), Buffer.from(`\r\nX-Long: ${'a'.repeat(this.int(40_000))}`), m.subarray(at)]);
    }
  }
}

// --- harness --------------------------------------------------------------------------------------

function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function tick(): Promise<void> {
  return new Promise((r) => setImmediate(r));
}

/** Resolves when a socket can take more writes, or is gone (never rejects: resets are expected here). */
function drained(socket: Socket): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      socket.off('drain', done);
      socket.off('close', done);
      socket.off('error', done);
      resolve();
    };
    socket.on('drain', done);
    socket.on('close', done);
    socket.on('error', done);
  });
}

function forceGc(): () => void {
  setFlagsFromString('--expose-gc');
  return runInNewContext('gc') as () => void;
}

const MB = 1024 * 1024;

describe('SIP transport fuzz (UDP + TCP)', () => {
  let layer: SipTransportLayer;
  let udpPort = 0;
  let tcpPort = 0;
  let client: UdpSocket;
  let clientPort = 0;
  let answersReceived = 0;

  beforeAll(async () => {
    layer = new SipTransportLayer({
      listen: [
        { protocol: 'udp', address: '127.0.0.1', port: 0 },
        { protocol: 'tcp', address: '127.0.0.1', port: 0 },
      ],
      idleTimeoutMs: 5000,
    });
    await layer.start();
    udpPort = layer.endpoints.find((e) => e.protocol === 'udp')!.port;
    tcpPort = layer.endpoints.find((e) => e.protocol === 'tcp')!.port;
    client = createSocket('udp4');
    client.on('message', () => answersReceived++);
    await new Promise<void>((r) => client.bind(0, '127.0.0.1', () => r()));
    clientPort = client.address().port;
  });

  afterAll(async () => {
    await layer?.close();
    await new Promise<void>((r) => client.close(() => r()));
  });

  it(`processes >= ${TOTAL} mutated and random messages without crashing, stays responsive, and keeps memory bounded`, { timeout: 120_000 }, async () => {
    const gc = forceGc();
    const gen = new Mutator(SEED, corpus(clientPort));
    let requests = 0;
    let responses = 0;
    layer.on('request', () => requests++);
    layer.on('response', () => responses++);
    let errors = 0;
    layer.on('error', () => errors++);

    // Warm up (JIT, buffers), then take the baseline.
    for (let i = 0; i < 500; i++) client.send(gen.next(), udpPort, '127.0.0.1');
    await delay(100);
    gc();
    const heapBefore = process.memoryUsage().heapUsed;
    const statsBefore = layer.stats;
    const processed = (): number => {
      const s = layer.stats;
      return s.received.udp - statsBefore.received.udp + s.received.tcp - statsBefore.received.tcp + s.framingErrors - statsBefore.framingErrors;
    };
    const loop = monitorEventLoopDelay({ resolution: 10 });
    loop.enable();
    let heapPeak = 0;
    const t0 = performance.now();

    // TCP workers: reconnect whenever the layer closes the connection (framing errors do).
    const tcpTarget = Math.ceil(TOTAL * (1 - UDP_SHARE));
    let tcpDone = false;
    let tcpWritten = 0;
    let tcpConnections = 0;
    const tcpProcessed = (): number => {
      const s = layer.stats;
      return s.received.tcp - statsBefore.received.tcp + s.framingErrors - statsBefore.framingErrors;
    };
    const worker = async (id: number): Promise<void> => {
      const g = new Mutator(SEED + 1000 + id, corpus(clientPort));
      while (!tcpDone) {
        const socket: Socket = netConnect({ port: tcpPort, host: '127.0.0.1' });
        socket.on('error', () => {});
        socket.on('data', () => {}); // stateless answers
        let open = true;
        socket.once('close', () => (open = false));
        try {
          await once(socket, 'connect');
        } catch {
          continue;
        }
        tcpConnections++;
        while (open && !tcpDone) {
          // A batch of messages, cut into random chunks.
          const batch: Buffer[] = [];
          for (let i = 0; i < 4; i++) batch.push(g.chance(0.03) ? Buffer.from('\r\n\r\n') : g.next());
          tcpWritten += batch.length;
          const all = Buffer.concat(batch);
          let pos = 0;
          while (pos < all.length && open) {
            const n = 1 + g.int(g.chance(0.1) ? 64 : 4096);
            if (!socket.write(all.subarray(pos, pos + n))) await drained(socket);
            pos += n;
          }
          // Let the layer read it (and close us on a framing error) before writing more.
          await tick();
          await tick();
          if (tcpProcessed() >= tcpTarget) tcpDone = true;
        }
        socket.destroy();
      }
    };
    const workers = Array.from({ length: TCP_CONNECTIONS }, (_, i) => worker(i));

    // UDP, paced: a batch, then let the layer drain its socket before the next.
    let udpSent = 0;
    let udpDropped = 0;
    let rounds = 0;
    const udpBase = statsBefore.received.udp;
    while (processed() < TOTAL || !tcpDone) {
      if (layer.stats.received.udp - udpBase < TOTAL * UDP_SHARE || tcpDone) {
        const sends: Promise<void>[] = [];
        for (let i = 0; i < 48; i++) {
          const m = gen.next();
          // A UDP datagram carries at most 65507 octets.
          const d = m.length > 65_000 ? m.subarray(0, 65_000) : m;
          sends.push(new Promise<void>((r) => client.send(d, udpPort, '127.0.0.1', () => r())));
          udpSent++;
        }
        await Promise.all(sends);
        // Until the layer has read them all, or made no progress for 3 ms (some were dropped).
        let seen = -1;
        let since = performance.now();
        for (;;) {
          const got = layer.stats.received.udp - udpBase;
          if (got >= udpSent) break;
          if (got !== seen) {
            seen = got;
            since = performance.now();
          } else if (performance.now() - since > 3) break;
          await tick();
        }
        udpDropped += udpSent - (layer.stats.received.udp - udpBase);
        udpSent = layer.stats.received.udp - udpBase; // what was dropped is gone; count from here
      } else {
        await delay(2);
      }
      if (++rounds % 16 === 0) {
        const h = process.memoryUsage().heapUsed;
        if (h > heapPeak) heapPeak = h;
      }
      if (performance.now() - t0 > 100_000) break; // let the assertions below report it
    }
    tcpDone = true;
    await Promise.all(workers);
    const seconds = (performance.now() - t0) / 1000;
    loop.disable();

    // Still alive and answering: a valid OPTIONS over UDP and over a new TCP connection.
    expect(layer.closed).toBe(false);
    const options = (transport: string, branch: string): string =>
      [
        'OPTIONS sip:agent@127.0.0.1 SIP/2.0',
        `Via: SIP/2.0/${transport} 127.0.0.1:${clientPort};branch=${branch};rport`,
        'Max-Forwards: 70',
        'From: <sip:probe@example.com>;tag=probe',
        'To: <sip:agent@127.0.0.1>',
        `Call-ID: ${branch}@probe`,
        'CSeq: 1 OPTIONS',
        'Content-Length: 0',
        '',
        '',
      ].join('\r\n');
    const answer = async (i: Inbound<SipRequest>): Promise<void> => layer.send(createResponse(i.message, 200, undefined, { toTag: 'fz' }), i.source, i.connectionId);

    const probe = createSocket('udp4');
    await new Promise<void>((r) => probe.bind(0, '127.0.0.1', () => r()));
    const t1 = performance.now();
    const gotUdp = once(layer, 'request', { signal: AbortSignal.timeout(1000) });
    const udpAnswer = once(probe, 'message', { signal: AbortSignal.timeout(1000) });
    probe.send(options('UDP', 'z9hG4bKprobeudp'), udpPort, '127.0.0.1');
    const [udpIn] = (await gotUdp) as [Inbound<SipRequest>];
    expect(udpIn.message.callId).toBe('z9hG4bKprobeudp@probe');
    await answer(udpIn);
    const [udpRes] = (await udpAnswer) as [Buffer];
    expect(parseMessage(udpRes).isRequest).toBe(false);
    const udpMs = performance.now() - t1;
    probe.close();

    const t2 = performance.now();
    const s = netConnect({ port: tcpPort, host: '127.0.0.1' });
    await once(s, 'connect');
    const framer = new SipStreamFramer();
    const tcpAnswer = new Promise<Buffer>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no TCP answer within 1 s')), 1000);
      s.on('data', (c: Buffer) => {
        const [m] = framer.push(c);
        if (m) {
          clearTimeout(timer);
          resolve(m);
        }
      });
    });
    const gotTcp = once(layer, 'request', { signal: AbortSignal.timeout(1000) });
    s.write(options('TCP', 'z9hG4bKprobetcp'));
    const [tcpIn] = (await gotTcp) as [Inbound<SipRequest>];
    await answer(tcpIn);
    expect(parseMessage(await tcpAnswer).isRequest).toBe(false);
    const tcpMs = performance.now() - t2;
    s.destroy();

    // Memory: connections gone, heap back near the baseline after a full GC.
    await delay(50);
    const deadline = Date.now() + 3000;
    while (layer.stats.connectionsOpen > 0 && Date.now() < deadline) await delay(10);
    gc();
    await delay(10);
    gc();
    const heapAfter = process.memoryUsage().heapUsed;
    const st = layer.stats;
    const total = processed();
    const figures = {
      processed: total,
      udpDatagrams: st.received.udp - statsBefore.received.udp,
      udpDroppedByKernel: udpDropped,
      tcpMessages: st.received.tcp - statsBefore.received.tcp,
      tcpFramingErrors: st.framingErrors - statsBefore.framingErrors,
      tcpConnections,
      tcpWritten,
      seconds: Number(seconds.toFixed(1)),
      perSecond: Math.round(total / seconds),
      requestsDelivered: requests,
      responsesDelivered: responses,
      parseErrors: st.parseErrors,
      statelessResponses: st.statelessResponses,
      answersReceivedByFuzzer: answersReceived,
      droppedNoise: st.droppedNoise,
      droppedResponses: st.droppedResponses,
      oversized: st.oversized,
      errorsEvents: errors,
      listenerErrors: st.listenerErrors,
      eventLoopMaxMs: Number((loop.max / 1e6).toFixed(1)),
      eventLoopP99Ms: Number((loop.percentile(99) / 1e6).toFixed(1)),
      probeUdpMs: Number(udpMs.toFixed(1)),
      probeTcpMs: Number(tcpMs.toFixed(1)),
      heapBeforeMB: Number((heapBefore / MB).toFixed(1)),
      heapPeakMB: Number((heapPeak / MB).toFixed(1)),
      heapAfterMB: Number((heapAfter / MB).toFixed(1)),
      connectionsOpenAfter: st.connectionsOpen,
    };
    console.log(`sip transport fuzz: ${JSON.stringify(figures)}`);

    expect(total).toBeGreaterThanOrEqual(TOTAL);
    expect(figures.udpDatagrams).toBeGreaterThan(TOTAL * 0.5);
    expect(figures.tcpMessages + figures.tcpFramingErrors).toBeGreaterThan(TOTAL * 0.25);
    // Both kinds of outcome happened: valid requests delivered, malformed ones answered.
    expect(requests).toBeGreaterThan(1000);
    expect(st.statelessResponses).toBeGreaterThan(1000);
    expect(st.listenerErrors).toBe(0);
    expect(udpMs).toBeLessThan(1000);
    expect(tcpMs).toBeLessThan(1000);
    // No single turn of the event loop took a second (the layer never blocks on input).
    expect(loop.max / 1e6).toBeLessThan(1000);
    expect(st.connectionsOpen).toBe(0);
    expect((heapAfter - heapBefore) / MB).toBeLessThan(HEAP_BOUND_MB);
  });
});
