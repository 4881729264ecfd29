/**
 * RTP/RTCP port pairs from a configured range (CALLBRIDGE_RTP_PORT_MIN/MAX).
 *
 * RFC 3550 section 11: RTP uses an even port and RTCP the next odd one (RFC 4566 announces only
 * the RTP port; the peer derives RTCP = RTP + 1 unless `a=rtcp` says otherwise, RFC 3605). So
 * the allocator hands out even ports only and binds both sockets before returning, which is the
 * only reliable way to know a port is free: another process may hold any port of the range.
 *
 * Allocation is round-robin: a cursor walks the range and a freed pair goes to the back of the
 * line. Reusing a port at once would let late packets of the previous call (the peer has not
 * seen our BYE yet) land in the next call on the same port.
 *
 * Sockets are created with a synchronous address lookup for IP literals. Node's default
 * `dns.lookup` defers every `send()` by one tick even for "127.0.0.1"; with the synchronous
 * lookup, `send()` hands the datagram to the kernel before it returns (unless the kernel queue
 * is full, which `getSendQueueCount()` reveals), so the session can reuse its send buffer and a
 * final RTCP BYE leaves before the socket closes.
 */
import dgram from 'node:dgram';
import dns from 'node:dns';
import net from 'node:net';
import { BindError, PortsExhaustedError } from './errors.ts';

/** A bound RTP socket (even port) and its RTCP socket (port + 1), owned by one RtpSession. */
export interface RtpPortPair {
  /** The local address both sockets are bound to. */
  readonly address: string;
  readonly family: 'IPv4' | 'IPv6';
  readonly rtpPort: number;
  readonly rtcpPort: number;
  readonly rtp: dgram.Socket;
  readonly rtcp: dgram.Socket;
  readonly closed: boolean;
  /** Closes both sockets and returns the ports to the allocator. Idempotent. */
  close(): void;
}

export interface PortAllocatorOptions {
  /** Lowest port of the range (rounded up to even). */
  min: number;
  /** Highest port of the range; the last pair is (max-1, max) when max is odd. */
  max: number;
  /** Default local address to bind: '0.0.0.0', '::', or one interface's address. */
  address?: string;
  /** SO_RCVBUF / SO_SNDBUF for every socket; the OS default when unset. */
  recvBufferSize?: number;
  sendBufferSize?: number;
}

/** Errors of bind() that mean "this port is taken, try the next one". */
const PORT_TAKEN = new Set(['EADDRINUSE', 'EACCES']);

/** dns.lookup, but synchronous for IP literals (see the file comment). */
function lookupSync(
  hostname: string,
  options: dns.LookupOneOptions,
  callback: (err: NodeJS.ErrnoException | null, address: string, family: number) => void,
): void {
  const family = net.isIP(hostname);
  if (family !== 0) {
    callback(null, hostname, family);
    return;
  }
  dns.lookup(hostname, options, callback);
}

/** Creates an unbound UDP socket of the right family with the synchronous lookup. */
export function createUdpSocket(
  address: string,
  options: { recvBufferSize?: number; sendBufferSize?: number } = {},
): dgram.Socket {
  const type = net.isIPv6(address) ? 'udp6' : 'udp4';
  const opts: dgram.SocketOptions = { type, lookup: lookupSync };
  if (options.recvBufferSize !== undefined) opts.recvBufferSize = options.recvBufferSize;
  if (options.sendBufferSize !== undefined) opts.sendBufferSize = options.sendBufferSize;
  return dgram.createSocket(opts);
}

/** Binds a socket; resolves when listening, rejects with the raw bind error. */
function bind(socket: dgram.Socket, port: number, address: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error): void => {
      socket.off('listening', onListening);
      reject(err);
    };
    const onListening = (): void => {
      socket.off('error', onError);
      resolve();
    };
    socket.once('error', onError);
    socket.once('listening', onListening);
    socket.bind({ port, address, exclusive: true });
  });
}

function closeQuietly(socket: dgram.Socket): void {
  try {
    socket.close();
  } catch {
    // already closed or never bound: nothing to release
  }
}

export class PortAllocator {
  readonly min: number;
  readonly max: number;
  readonly address: string;
  readonly #firstEven: number;
  readonly #pairs: number;
  readonly #socketOptions: { recvBufferSize?: number; sendBufferSize?: number };
  /** Even ports we hold (or are binding right now). */
  readonly #held = new Set<number>();
  /** Index (0-based pair number) where the next search starts. */
  #cursor = 0;

  /** @throws RangeError when the range holds no even/odd pair or is out of 1..65535. */
  constructor(options: PortAllocatorOptions) {
    const { min, max } = options;
    if (!Number.isInteger(min) || !Number.isInteger(max) || min < 1 || max > 65535 || min > max) {
      throw new RangeError(`RTP port range ${min}-${max} is invalid (1..65535, min <= max)`);
    }
    this.#firstEven = min % 2 === 0 ? min : min + 1;
    this.#pairs = Math.floor((max - this.#firstEven + 1) / 2);
    if (this.#pairs < 1) {
      throw new RangeError(`RTP port range ${min}-${max} holds no even/odd port pair`);
    }
    this.min = min;
    this.max = max;
    this.address = options.address ?? '0.0.0.0';
    this.#socketOptions = {};
    if (options.recvBufferSize !== undefined) this.#socketOptions.recvBufferSize = options.recvBufferSize;
    if (options.sendBufferSize !== undefined) this.#socketOptions.sendBufferSize = options.sendBufferSize;
  }

  /** Number of RTP/RTCP pairs in the range. */
  get capacity(): number {
    return this.#pairs;
  }

  /** Number of pairs currently handed out (or being bound). */
  get inUse(): number {
    return this.#held.size;
  }

  /**
   * Binds the next free pair, skipping ports other processes hold.
   * @throws PortsExhaustedError (MEDIA_PORTS_EXHAUSTED) when every pair is taken.
   * @throws BindError (MEDIA_BIND_FAILED) when binding fails for another reason (bad address).
   */
  async allocate(options: { address?: string } = {}): Promise<RtpPortPair> {
    const address = options.address ?? this.address;
    for (let tried = 0; tried < this.#pairs; tried++) {
      const index = this.#cursor;
      this.#cursor = (this.#cursor + 1) % this.#pairs;
      const port = this.#firstEven + index * 2;
      if (this.#held.has(port)) continue;
      // Claimed before the first await, so concurrent allocate() calls never race for it.
      this.#held.add(port);
      let pair: RtpPortPair | undefined;
      try {
        pair = await this.#tryBind(address, port);
      } finally {
        if (!pair) this.#held.delete(port);
      }
      if (pair) return pair;
    }
    throw new PortsExhaustedError(this.min, this.max, address);
  }

  /** Binds RTP on port and RTCP on port + 1; undefined when either is taken. */
  async #tryBind(address: string, port: number): Promise<RtpPortPair | undefined> {
    const rtp = createUdpSocket(address, this.#socketOptions);
    const rtcp = createUdpSocket(address, this.#socketOptions);
    let bound = false;
    try {
      await bind(rtp, port, address);
      await bind(rtcp, port + 1, address);
      bound = true;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? '';
      if (!PORT_TAKEN.has(code)) throw new BindError(address, port, err);
      return undefined;
    } finally {
      if (!bound) {
        closeQuietly(rtp);
        closeQuietly(rtcp);
      }
    }
    return this.#makePair(address, port, rtp, rtcp);
  }

  #makePair(address: string, port: number, rtp: dgram.Socket, rtcp: dgram.Socket): RtpPortPair {
    let closed = false;
    const held = this.#held;
    return {
      address,
      family: net.isIPv6(address) ? 'IPv6' : 'IPv4',
      rtpPort: port,
      rtcpPort: port + 1,
      rtp,
      rtcp,
      get closed() {
        return closed;
      },
      close() {
        if (closed) return;
        closed = true;
        closeQuietly(rtp);
        closeQuietly(rtcp);
        held.delete(port);
      },
    };
  }
}
