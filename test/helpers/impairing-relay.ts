/**
 * An impairing UDP relay for RTP on 127.0.0.1: a stand-in for netem (this kernel has no netem
 * qdisc) between two media endpoints, A and B. Each side of the relay is a socket pair (an even
 * RTP port and RTCP on the next one, so an SDP can advertise it):
 *
 *      endpoint A  <---->  [ relay.a ]  ==impair a->b==>  [ relay.b ]  <---->  endpoint B
 *                                       <==impair b->a==
 *
 * A datagram received on `a` goes out of `b` to endpoint B after the a->b impairment, and the
 * reverse. Each endpoint is given (`a`/`b` options, `setEndpoint()`) or learnt from the first
 * packet received on its side (symmetric RTP, RFC 4961); until then packets for it are counted
 * (`noEndpoint`) and dropped. RTCP arriving on the odd ports is counted and not forwarded.
 *
 * Per direction, each packet gets, in this order:
 *   - loss: Bernoulli(loss), or with `burstLength` L > 1 a two-state (Gilbert) chain whose
 *     long-run loss is still `loss` and whose losses come in runs of mean length L;
 *   - delay: `delayMs` + a draw of `jitterMs`: uniform over [0, jitterMs] (default), or normal
 *     with mean jitterMs/2 and standard deviation jitterMs/4, clipped to [0, jitterMs]. Packets
 *     20 ms apart with delays up to 60 ms apart overtake each other: reordering comes from the
 *     delays, as on a real path with several routes, not from a separate decision;
 *   - duplicate: with probability `duplicate` a second copy, with its own delay draw.
 *
 * Decisions are seeded (test/helpers/prng.ts, mulberry32): each direction has its own generator
 * (seed, seed + 1) and consumes exactly five numbers per packet whatever the outcome, so the
 * n-th packet of a direction always gets the same decision for one seed, however the two
 * directions interleave in time. `ImpairmentModel` is that decision maker alone (no sockets),
 * for unit tests and for replaying a failure.
 *
 * WHERE IT RUNS: in the test process, on its event loop. The caller's RTP peer
 * (test/interop/rtp-peer.ts) already runs there, so a stall of the test's event loop shifts the
 * caller's packets (and their arrival stamps) whatever the relay does; a worker thread or child
 * process would keep only the relay's own delays exact, at the cost of a message channel for the
 * endpoints, the counters and close(). A stall here adds delay to packets in flight (never
 * drops, never reorders by itself), so the impairment is at least the configured one.
 *
 * Counters (`stats()`): received, sent (datagrams out, duplicates included), dropped,
 * duplicated, reordered (a packet sent after one with a higher RTP sequence number, 16-bit
 * wrap-aware), noEndpoint, pending (in flight now), rtcp.
 */
import dgram from 'node:dgram';
import { prng } from './prng.ts';

const LOOPBACK = '127.0.0.1';

export interface Endpoint {
  address: string;
  port: number;
}

export interface Impairment {
  /** Long-run share of packets lost, 0..1. Default 0. */
  loss?: number;
  /** Mean length of a loss run (> 1: bursty, Gilbert model). Default 1: independent losses. */
  burstLength?: number;
  /** Fixed one-way delay, ms. Default 0. */
  delayMs?: number;
  /** Spread of the variable delay added to delayMs, ms (see the header). Default 0. */
  jitterMs?: number;
  distribution?: 'uniform' | 'normal';
  /** Share of packets sent twice, 0..1. Default 0. */
  duplicate?: number;
}

export interface Decision {
  drop: boolean;
  /** Delays (ms) of the copies to send: none when dropped, two when duplicated. */
  delaysMs: number[];
}

/** The seeded decisions of one direction: one `decide()` per packet, in arrival order. */
export class ImpairmentModel {
  readonly #rand: () => number;
  readonly #loss: number;
  readonly #burst: number;
  readonly #delay: number;
  readonly #jitter: number;
  readonly #normal: boolean;
  readonly #dup: number;
  #inBurst = false;

  /** @throws RangeError for a probability outside 0..1, a negative delay or a burst length < 1. */
  constructor(seed: number, imp: Impairment = {}) {
    this.#rand = prng(seed);
    this.#loss = imp.loss ?? 0;
    this.#burst = imp.burstLength ?? 1;
    this.#delay = imp.delayMs ?? 0;
    this.#jitter = imp.jitterMs ?? 0;
    this.#normal = imp.distribution === 'normal';
    this.#dup = imp.duplicate ?? 0;
    for (const [name, p] of [['loss', this.#loss], ['duplicate', this.#dup]] as const) if (!(p >= 0 && p <= 1)) throw new RangeError(`${name} must be within 0..1, got ${p}`);
    if (!(this.#burst >= 1)) throw new RangeError(`burstLength must be >= 1, got ${this.#burst}`);
    if (!(this.#delay >= 0) || !(this.#jitter >= 0)) throw new RangeError('delayMs and jitterMs must be >= 0');
    if (this.#burst > 1 && this.#loss >= 1) throw new RangeError('a bursty loss needs loss < 1');
  }

  decide(): Decision {
    // Always five draws, so one packet's outcome never shifts the next packet's numbers.
    const uLoss = this.#rand();
    const d1 = this.#rand();
    const d2 = this.#rand();
    const uDup = this.#rand();
    const d3 = this.#rand();
    let drop: boolean;
    if (this.#burst <= 1) drop = uLoss < this.#loss;
    else {
      // Gilbert: stay in a loss run with 1 - 1/L (mean run L); enter one with q such that the
      // stationary loss q / (q + 1/L) equals `loss`.
      const leave = 1 / this.#burst;
      const enter = (this.#loss * leave) / (1 - this.#loss);
      this.#inBurst = this.#inBurst ? uLoss >= leave : uLoss < enter;
      drop = this.#inBurst;
    }
    if (drop) return { drop: true, delaysMs: [] };
    const delaysMs = [this.#delayOf(d1, d2)];
    if (uDup < this.#dup) delaysMs.push(this.#delayOf(d3, d1));
    return { drop: false, delaysMs };
  }

  #delayOf(u: number, v: number): number {
    if (this.#jitter === 0) return this.#delay;
    if (!this.#normal) return this.#delay + u * this.#jitter;
    // Box-Muller; (1 - u) keeps the logarithm finite.
    const z = Math.sqrt(-2 * Math.log(1 - u)) * Math.cos(2 * Math.PI * v);
    return this.#delay + Math.min(this.#jitter, Math.max(0, this.#jitter / 2 + (z * this.#jitter) / 4));
  }
}

export interface DirectionStats {
  received: number;
  sent: number;
  dropped: number;
  duplicated: number;
  reordered: number;
  noEndpoint: number;
  pending: number;
}

export interface RelayStats {
  /** Received on `a` (from endpoint A), sent to endpoint B. */
  aToB: DirectionStats;
  /** Received on `b` (from endpoint B), sent to endpoint A. */
  bToA: DirectionStats;
  /** RTCP datagrams received on the odd ports (not forwarded). */
  rtcp: number;
}

export interface ImpairingRelayOptions {
  seed: number;
  /** The impairment of both directions, unless one is given below. */
  impair?: Impairment;
  aToB?: Impairment;
  bToA?: Impairment;
  /** Endpoint A when known in advance (else learnt from the first packet on `a`). */
  a?: Endpoint;
  b?: Endpoint;
}

export interface ImpairingRelay {
  /** The side endpoint A talks to: give this address to A (e.g. in an SDP). */
  readonly a: Endpoint;
  readonly b: Endpoint;
  readonly seed: number;
  /** Sets an endpoint (a known one is never replaced by packets from elsewhere). */
  setEndpoint(side: 'a' | 'b', to: Endpoint): void;
  endpoint(side: 'a' | 'b'): Endpoint | undefined;
  stats(): RelayStats;
  readonly closed: boolean;
  /** Idempotent: drops the packets in flight and closes the sockets. */
  close(): Promise<void>;
}

function bind(sock: dgram.Socket, port: number): Promise<boolean> {
  return new Promise((done) => {
    const onError = () => done(false);
    sock.once('error', onError);
    sock.bind(port, LOOPBACK, () => {
      sock.off('error', onError);
      done(true);
    });
  });
}

const closeSocket = (s: dgram.Socket) => new Promise<void>((r) => s.close(() => r()));

/** An even port of 127.0.0.1 for RTP and the next one for RTCP, both OS-chosen and bound. */
async function bindPair(): Promise<{ rtp: dgram.Socket; rtcp: dgram.Socket }> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const probe = dgram.createSocket('udp4');
    if (!(await bind(probe, 0))) continue;
    const base = probe.address().port & ~1;
    await closeSocket(probe);
    if (base < 1024 || base > 65534) continue;
    const rtp = dgram.createSocket('udp4');
    if (!(await bind(rtp, base))) {
      rtp.close();
      continue;
    }
    const rtcp = dgram.createSocket('udp4');
    if (!(await bind(rtcp, base + 1))) {
      rtcp.close();
      await closeSocket(rtp);
      continue;
    }
    return { rtp, rtcp };
  }
  throw new Error('impairing relay: no free even/odd UDP port pair on 127.0.0.1');
}

/** RTP sequence number of a datagram, or undefined when it is not RTP (or is RTCP). */
function rtpSeq(msg: Buffer): number | undefined {
  if (msg.length < 12 || msg[0]! >> 6 !== 2) return undefined;
  if (msg[1]! >= 200 && msg[1]! <= 204) return undefined;
  return msg.readUInt16BE(2);
}

export async function startImpairingRelay(o: ImpairingRelayOptions): Promise<ImpairingRelay> {
  const models = {
    aToB: new ImpairmentModel(o.seed, o.aToB ?? o.impair),
    bToA: new ImpairmentModel((o.seed + 1) >>> 0, o.bToA ?? o.impair),
  };
  const zero = (): DirectionStats => ({ received: 0, sent: 0, dropped: 0, duplicated: 0, reordered: 0, noEndpoint: 0, pending: 0 });
  const stats: RelayStats = { aToB: zero(), bToA: zero(), rtcp: 0 };
  const highest: { aToB: number | undefined; bToA: number | undefined } = { aToB: undefined, bToA: undefined };
  const ends: { a: Endpoint | undefined; b: Endpoint | undefined } = { a: o.a, b: o.b };
  const timers = new Set<NodeJS.Timeout>();
  let closed = false;

  const pairA = await bindPair();
  let pairB: Awaited<ReturnType<typeof bindPair>>;
  try {
    pairB = await bindPair();
  } catch (err) {
    await Promise.all([closeSocket(pairA.rtp), closeSocket(pairA.rtcp)]);
    throw err;
  }
  const sockets = { a: pairA.rtp, b: pairB.rtp };

  const forward = (dir: 'aToB' | 'bToA', msg: Buffer) => {
    const st = stats[dir];
    const to = dir === 'aToB' ? 'b' : 'a';
    const out = sockets[to];
    const seq = rtpSeq(msg);
    const send = () => {
      const end = ends[to];
      if (closed || !end) return;
      if (seq !== undefined) {
        const h = highest[dir];
        // Signed 16-bit distance (RFC 3550 A.1): behind the highest sent is out of order.
        const diff = h === undefined ? 1 : ((seq - h + 0x8000) & 0xffff) - 0x8000;
        if (diff < 0) st.reordered++;
        else highest[dir] = seq;
      }
      st.sent++;
      out.send(msg, end.port, end.address);
    };
    const d = models[dir].decide();
    if (d.drop) {
      st.dropped++;
      return;
    }
    if (d.delaysMs.length > 1) st.duplicated++;
    for (const ms of d.delaysMs) {
      st.pending++;
      const t = setTimeout(() => {
        timers.delete(t);
        st.pending--;
        send();
      }, ms);
      timers.add(t);
    }
  };

  const onMessage = (side: 'a' | 'b') => (msg: Buffer, rinfo: dgram.RemoteInfo) => {
    if (closed) return;
    ends[side] ??= { address: rinfo.address, port: rinfo.port };
    const dir = side === 'a' ? 'aToB' : 'bToA';
    stats[dir].received++;
    if (!ends[side === 'a' ? 'b' : 'a']) {
      stats[dir].noEndpoint++;
      return;
    }
    forward(dir, msg);
  };
  sockets.a.on('message', onMessage('a'));
  sockets.b.on('message', onMessage('b'));
  for (const s of [pairA.rtcp, pairB.rtcp]) s.on('message', () => void stats.rtcp++);
  // ICMP port unreachable (an endpoint gone) may surface as a socket error: not ours to fail on.
  for (const s of [pairA.rtp, pairA.rtcp, pairB.rtp, pairB.rtcp]) s.on('error', () => {});

  const relay: ImpairingRelay = {
    a: { address: LOOPBACK, port: pairA.rtp.address().port },
    b: { address: LOOPBACK, port: pairB.rtp.address().port },
    seed: o.seed,
    setEndpoint(side, to) {
      ends[side] = { ...to };
    },
    endpoint: (side) => ends[side],
    stats: () => ({ aToB: { ...stats.aToB }, bToA: { ...stats.bToA }, rtcp: stats.rtcp }),
    get closed() {
      return closed;
    },
    async close() {
      if (closed) return;
      closed = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      stats.aToB.pending = 0;
      stats.bToA.pending = 0;
      await Promise.all([pairA.rtp, pairA.rtcp, pairB.rtp, pairB.rtcp].map(closeSocket));
    },
  };
  return relay;
}

/** One line of counters, for logs and assertion messages. */
export function describeRelayStats(s: RelayStats): string {
  const one = (d: DirectionStats) =>
    `received ${d.received}, sent ${d.sent}, dropped ${d.dropped} (${d.received ? ((100 * d.dropped) / d.received).toFixed(1) : '0'} %), duplicated ${d.duplicated}, reordered ${d.reordered}, no endpoint ${d.noEndpoint}`;
  return `a->b: ${one(s.aToB)}; b->a: ${one(s.bToA)}; rtcp ${s.rtcp}`;
}
