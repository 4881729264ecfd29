/**
 * One UDP listening socket of the transport layer (RFC 3261 18, RFC 768). It only moves
 * datagrams: parsing, Via handling and statistics are the layer's (index.ts). The same socket
 * sends our requests and our responses, so a NAT that mapped a peer's request to us also lets
 * our answers and our requests back in (RFC 3581 4: "the response MUST be sent from the same
 * address and port that the request was received on").
 */
import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { SipTransportError } from '../message/index.ts';
import { defaultInterfaceAddress, formatEndpoint, ipFamily, isUnspecified, mapIPv4, type IpFamily } from './address.ts';
import type { Endpoint } from './types.ts';

export interface UdpListenerOptions {
  address: string;
  port: number;
  /** Host written in Via sent-by and reported as `local` (default: the bound address). */
  advertise?: string;
  advertisePort?: number;
  /** SO_RCVBUF in bytes (the kernel caps it at net.core.rmem_max); default the OS's. */
  recvBufferSize?: number;
  onDatagram: (datagram: Buffer, rinfo: RemoteInfo, listener: UdpListener) => void;
  onError: (err: Error, listener: UdpListener) => void;
}

export class UdpListener {
  readonly family: IpFamily;
  readonly #opts: UdpListenerOptions;
  readonly #socket: Socket;
  #bound: Endpoint | undefined;
  #advertised: Endpoint | undefined;
  /** A dual-stack socket ("::") talking to an IPv4 peer advertises an IPv4 address. */
  #advertised4: Endpoint | undefined;
  #closed = false;

  constructor(opts: UdpListenerOptions) {
    this.#opts = opts;
    this.family = ipFamily(opts.address) === 6 ? 6 : 4;
    // A socket bound to "::" is dual-stack (ipv6Only false): it also serves IPv4 peers, which it
    // reports as ::ffff:a.b.c.d.
    this.#socket = createSocket({
      type: this.family === 6 ? 'udp6' : 'udp4',
      ipv6Only: false,
      ...(opts.recvBufferSize !== undefined ? { recvBufferSize: opts.recvBufferSize } : {}),
    });
    this.#socket.on('message', (msg, rinfo) => {
      if (!this.#closed) opts.onDatagram(msg, rinfo, this);
    });
    // Errors before the bind completed are the bind's (reported by bind()).
    this.#socket.on('error', (err) => {
      if (this.#bound && !this.#closed) opts.onError(err, this);
    });
  }

  /** "udp@127.0.0.1:5060": the id inbound messages carry as `connectionId` (see index.ts). */
  get id(): string {
    return `udp@${formatEndpoint(this.bound)}`;
  }

  /** The address and port bound (the port the OS chose for port 0). */
  get bound(): Endpoint {
    if (!this.#bound) throw new SipTransportError('SIP_TRANSPORT_CLOSED', 'UDP listener not bound');
    return this.#bound;
  }

  /** What goes into Via sent-by and Inbound.local: the advertised host/port, else the bound ones. */
  get advertised(): Endpoint {
    if (!this.#advertised) throw new SipTransportError('SIP_TRANSPORT_CLOSED', 'UDP listener not bound');
    return this.#advertised;
  }

  /** What to advertise to a peer of `family` (differs only on a dual-stack socket without `advertise`). */
  advertisedFor(family: 0 | IpFamily): Endpoint {
    return family === 4 && this.#advertised4 ? this.#advertised4 : this.advertised;
  }

  /** Bound to "0.0.0.0" / "::" (with "::": dual-stack, serves IPv4 peers too). */
  get wildcard(): boolean {
    return isUnspecified(this.#opts.address);
  }

  /** @throws SipTransportError SIP_TRANSPORT_BIND */
  bind(): Promise<void> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => {
        reject(new SipTransportError('SIP_TRANSPORT_BIND', `cannot bind UDP ${formatEndpoint(this.#opts)}: ${err.message}`, { cause: err }));
      };
      this.#socket.once('error', onError);
      this.#socket.bind({ address: this.#opts.address, port: this.#opts.port, exclusive: true }, () => {
        this.#socket.off('error', onError);
        const a = this.#socket.address();
        this.#bound = { protocol: 'udp', address: a.address, port: a.port };
        const host = this.#opts.advertise ?? (this.wildcard ? defaultInterfaceAddress(this.family) : a.address);
        this.#advertised = { protocol: 'udp', address: host, port: this.#opts.advertisePort ?? a.port };
        if (this.family === 6 && this.wildcard && this.#opts.advertise === undefined) {
          this.#advertised4 = { ...this.#advertised, address: defaultInterfaceAddress(4) };
        }
        resolve();
      });
    });
  }

  /** Whether this socket can send to an address of `family` (0: a host name, resolved by Node). */
  canReach(family: 0 | IpFamily): boolean {
    return family === 0 || family === this.family || (family === 4 && this.wildcard);
  }

  /**
   * Sends one datagram. `address` is an IP literal or a host name (resolved by Node in the
   * socket's family).
   * @throws SipTransportError SIP_TRANSPORT_SEND (EMSGSIZE, unreachable, closed socket)
   */
  send(datagram: Buffer, address: string, port: number): Promise<void> {
    if (this.#closed) return Promise.reject(new SipTransportError('SIP_TRANSPORT_CLOSED', 'UDP listener closed'));
    const to = this.family === 6 && ipFamily(address) === 4 ? mapIPv4(address) : address;
    return new Promise((resolve, reject) => {
      try {
        this.#socket.send(datagram, port, to, (err) => {
          if (err) reject(new SipTransportError('SIP_TRANSPORT_SEND', `UDP send to ${formatEndpoint({ address, port })} failed: ${err.message}`, { cause: err, endpoint: { protocol: 'udp', address, port } }));
          else resolve();
        });
      } catch (err) {
        // Synchronous throws: a bad port, a socket closed under us.
        reject(new SipTransportError('SIP_TRANSPORT_SEND', `UDP send to ${formatEndpoint({ address, port })} failed: ${String(err)}`, { cause: err, endpoint: { protocol: 'udp', address, port } }));
      }
    });
  }

  close(): Promise<void> {
    if (this.#closed) return Promise.resolve();
    this.#closed = true;
    return new Promise((resolve) => {
      try {
        this.#socket.close(() => resolve());
      } catch {
        resolve(); // never bound
      }
    });
  }
}
