/**
 * The SIP transport layer (RFC 3261 section 18; RFC 3581 rport; RFC 5626 keep-alives): UDP, TCP
 * and TLS listeners on IPv4 and IPv6, the one implementation of the SipTransport contract
 * (types.ts) the transaction layer talks to.
 *
 *                     +------------------------ SipTransportLayer ------------------------+
 *   datagram -------> | UdpListener --+                                                  |
 *   TCP/TLS bytes --> | StreamConnection (SipStreamFramer) --+--> parseMessage           |
 *                     |                                      |     ok: requests get Via   | --> 'request' / 'response'
 *                     |                                      |     received/rport (18.2.1)|     { message, source, local,
 *                     |                                      |     bad request: stateless |       connectionId }
 *                     |                                      |     400/505/513 (8.2.6.2)  |
 *   send(request, destination) --> fill the Via placeholder, pick socket / connection ---> wire
 *   send(response) --> where the request came from (its connection / source address and port);
 *                      the route of its top Via (18.2.2) only for a trusted proxy
 *                     +-------------------------------------------------------------------+
 *
 * Nothing here logs per packet: malformed input is counted in `stats` and logged at most once
 * per `logIntervalMs` per kind, with the number of occurrences suppressed in between.
 * docs/sip-transport.md has the decisions and the API for the layers above.
 */
import { EventEmitter } from 'node:events';
import { lookup } from 'node:dns/promises';
import type { RemoteInfo } from 'node:dgram';
import { BlockList, type Socket } from 'node:net';
import type { ConnectionOptions, TLSSocket } from 'node:tls';
import { SipParseError, SipTransportError } from '../message/index.ts';
import {
  buildStatelessResponse,
  createVia,
  parseMessage,
  parseVia,
  SipTooLargeError,
  splitList,
  tryExtractResponseContext,
  type ResponseContext,
  type SipMessageAny,
  type SipRequest,
  type SipResponse,
  type Via,
} from '../message/index.ts';
import {
  defaultPort,
  endpointKey,
  formatEndpoint,
  ipFamily,
  isUnspecified,
  protocolOfVia,
  sameAddress,
  stripBrackets,
  unmapIPv4,
  viaTransport,
  withoutZone,
  type IpFamily,
} from './address.ts';
import { ConnectionPool, connectStream, StreamConnection, StreamServer, type ConnectionCloseReason, type StreamConnectionHooks, type StreamProtocol } from './tcp.ts';
import type { Endpoint, Inbound, SipTransport, TransportProtocol } from './types.ts';
import { UdpListener } from './udp.ts';

export type { ConnectionCloseReason } from './tcp.ts';
export type { Endpoint, Inbound, SipTransport, TransportProtocol } from './types.ts';

// --- options ------------------------------------------------------------------------------------

/** One listening socket. */
export interface SipTransportListen {
  protocol: TransportProtocol;
  /** An IPv4 or IPv6 literal ("0.0.0.0", "::" for every interface; "::" is dual-stack). */
  address: string;
  /** 0: chosen by the OS (see `endpoints` after start()). */
  port: number;
  /** Required for `tls`: PEM certificate (chain) and private key. */
  tls?: { cert: string | Buffer; key: string | Buffer };
  /**
   * The host written into the Via sent-by of requests sent from this listener and reported as
   * `local` (for Contact): a public address or name behind a static NAT. Default: the bound
   * address, or for a wildcard bind, the connection's local address (TCP/TLS) or the first
   * non-internal interface address (UDP).
   */
  advertise?: string;
  /** The port to advertise with it (a NAT that forwards another port). Default: the bound port. */
  advertisePort?: number;
}

/** Structurally a pino logger. */
export interface SipTransportLogger {
  debug(obj: object, msg?: string): void;
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface SipTransportLayerOptions {
  listen: SipTransportListen[];
  /**
   * Largest message accepted, header section and body (default 65535). A larger UDP request is
   * answered 513 (RFC 3261 18.1.1, 21.5.7); on a stream, a header section over
   * min(32 KiB, this) or a Content-Length over this breaks the connection (answered 513 when the
   * header was complete).
   */
  maxMessageBytes?: number;
  logger?: SipTransportLogger;
  /** A TCP/TLS connection without traffic either way this long is closed (default 120 s; 0: never). */
  idleTimeoutMs?: number;
  /**
   * Most TCP/TLS connections held at once, both directions (default 1000). To make room, the
   * least recently active inbound connection that never completed a message is closed; only
   * when there is none, the least recently active of the others.
   */
  maxConnections?: number;
  /**
   * A TCP/TLS message (header section and body) must be complete this long after its first byte,
   * or the connection is closed (default 10 s; 0: no deadline). Bytes trickling in do not
   * extend it, unlike the idle timeout. An accepted connection must also send its first byte
   * (a keep-alive's will do) this long after the accept.
   */
  messageTimeoutMs?: number;
  /** Most inbound TCP/TLS connections (TLS handshakes included) from one source address (default 32; 0: no limit). */
  maxConnectionsPerSource?: number;
  /**
   * Source addresses or CIDRs ("10.0.0.5", "192.0.2.0/24", "2001:db8::/32") whose requests are
   * answered along the RFC 3261 18.2.2 route of the top Via (maddr, received, rport, sent-by,
   * the Via's transport). Everyone else is answered where the request came from: the packet's
   * source address and port (UDP), the request's connection or its source address (TCP/TLS).
   * Default: none.
   */
  trustedProxies?: readonly string[];
  /** Outgoing TCP connect + TLS handshake timeout (default 10 s). */
  connectTimeoutMs?: number;
  /** Unsent bytes one connection may queue before it is closed as not reading (default 1 MiB). */
  maxWriteBufferBytes?: number;
  /**
   * An incoming TLS handshake not finished this long after the TCP accept is closed, however
   * many bytes trickled in (default 10 s): until then the socket holds a slot under
   * maxConnectionsPerSource and the listener's socket cap.
   */
  tlsHandshakeTimeoutMs?: number;
  /**
   * Outgoing TLS (tls.connect): trust anchors (default: Node's CA store), whether to verify the
   * peer (default true), a client certificate (default: the first TLS listener's).
   */
  outboundTls?: Pick<ConnectionOptions, 'ca' | 'cert' | 'key' | 'rejectUnauthorized' | 'minVersion'>;
  /**
   * SO_RCVBUF of the UDP sockets (default 4 MiB, capped by the kernel's net.core.rmem_max): a
   * pause of the event loop under load must not overflow the OS default (~208 KiB), or the
   * kernel drops requests and the peers' retransmissions pile up (measured in bench/sip).
   */
  udpRecvBufferBytes?: number;
  /** Malformed input and listener failures are logged at most once per kind per interval (default 60 s). */
  logIntervalMs?: number;
  /** Clock (ms) for idle bookkeeping and log throttling; injectable for tests. */
  now?: () => number;
}

export const TRANSPORT_DEFAULTS = {
  maxMessageBytes: 65535,
  idleTimeoutMs: 120_000,
  messageTimeoutMs: 10_000,
  maxConnections: 1000,
  maxConnectionsPerSource: 32,
  connectTimeoutMs: 10_000,
  maxWriteBufferBytes: 1024 * 1024,
  tlsHandshakeTimeoutMs: 10_000,
  logIntervalMs: 60_000,
  udpRecvBufferBytes: 4 * 1024 * 1024,
} as const;

/** Extra, per-send options (beyond the SipTransport contract). */
export interface SendOptions {
  /**
   * TLS: the name to check the peer's certificate against and send as SNI when `destination`
   * is an IP address the caller resolved itself (RFC 5922 7). A host name destination is used
   * as is.
   */
  servername?: string;
}

/** A TCP or TLS connection, as reported by events and connections(). */
export interface ConnectionInfo {
  id: string;
  protocol: StreamProtocol;
  remote: Endpoint;
  local: Endpoint;
  /** Opened by us (a request we sent) rather than accepted. */
  outbound: boolean;
}

export type SipTransportEvents = {
  /** A request that parsed; its top Via has received/rport filled (RFC 3261 18.2.1, RFC 3581 4). */
  request: [inbound: Inbound<SipRequest>];
  /** A response that parsed (matched to a client transaction by the transaction layer, 17.1.3). */
  response: [inbound: Inbound<SipResponse>];
  /** A TCP/TLS connection was accepted or opened. */
  connection: [info: ConnectionInfo];
  /** A TCP/TLS connection closed (transactions using it may fail over per RFC 3261 18.2.2). */
  connectionClosed: [info: ConnectionInfo, reason: ConnectionCloseReason];
  /** Never fatal: a socket error, a listener that threw. Emitted only when someone listens. */
  error: [error: SipTransportError];
  close: [];
};

type PerProtocol = Record<TransportProtocol, number>;

/** Counters for metrics; a snapshot from `stats`. */
export interface SipTransportStats {
  /** Units handed to the parser: UDP datagrams (keep-alives included), framed TCP/TLS messages. */
  received: PerProtocol;
  bytesIn: PerProtocol;
  /** Messages that parsed and were emitted as 'request' / 'response'. */
  messagesIn: PerProtocol;
  /** Messages written (ours and stateless responses). */
  messagesOut: PerProtocol;
  bytesOut: PerProtocol;
  /** Input that did not parse (including framing errors and oversized messages). */
  parseErrors: number;
  /** ...of which responses (dropped, never answered). */
  droppedResponses: number;
  /** ...of which ACKs (never answered, RFC 3261 17.2.1). */
  droppedAcks: number;
  /** ...of which input with no request to answer (binary noise, a lone word). */
  droppedNoise: number;
  /** ...of which larger than maxMessageBytes or the framer's caps. */
  oversized: number;
  /** Stateless 400 / 505 / 513 responses sent to requests that did not parse (RFC 3261 8.2.6.2). */
  statelessResponses: number;
  /** TCP/TLS connections closed because the stream lost its framing (RFC 3261 18.3). */
  framingErrors: number;
  /** CRLF keep-alives received: UDP datagrams of only CR/LF, stream pings answered (RFC 5626). */
  keepAlives: number;
  /** send() failures and failed stateless answers (connect failures counted apart). */
  sendErrors: number;
  connectFailures: number;
  /** TLS handshakes of incoming connections that failed (timeouts included). */
  tlsHandshakeFailures: number;
  /** TLS handshakes of incoming connections not finished within tlsHandshakeTimeoutMs (closed). */
  tlsHandshakeTimeouts: number;
  /** Event listeners that threw (or rejected). */
  listenerErrors: number;
  /** TCP + TLS connections open now. */
  connectionsOpen: number;
  connectionsOpened: number;
  connectionsIdleClosed: number;
  /** Closed to stay under maxConnections. */
  connectionsEvicted: number;
  /** Closed because a message was not complete messageTimeoutMs after its first byte. */
  messageTimeouts: number;
  /** Inbound connections closed at once: their source already held maxConnectionsPerSource. */
  connectionsRefused: number;
}

function perProtocol(): PerProtocol {
  return { udp: 0, tcp: 0, tls: 0 };
}

function emptyStats(): SipTransportStats {
  return {
    received: perProtocol(),
    bytesIn: perProtocol(),
    messagesIn: perProtocol(),
    messagesOut: perProtocol(),
    bytesOut: perProtocol(),
    parseErrors: 0,
    droppedResponses: 0,
    droppedAcks: 0,
    droppedNoise: 0,
    oversized: 0,
    statelessResponses: 0,
    framingErrors: 0,
    keepAlives: 0,
    sendErrors: 0,
    connectFailures: 0,
    tlsHandshakeFailures: 0,
    tlsHandshakeTimeouts: 0,
    listenerErrors: 0,
    connectionsOpen: 0,
    connectionsOpened: 0,
    connectionsIdleClosed: 0,
    connectionsEvicted: 0,
    messageTimeouts: 0,
    connectionsRefused: 0,
  };
}

/**
 * True for a Via sent-by the caller left for the transport to fill: an empty host or an
 * unspecified address ("0.0.0.0", "::"), which no real Via can carry.
 */
export function isViaPlaceholder(host: string): boolean {
  return host === '' || isUnspecified(host);
}

/**
 * A top Via for a request whose sent-by the transport fills in at send(): transport token, host
 * and port follow the socket the request leaves from. The branch (the transaction id, RFC 3261
 * 17.1.3) is the caller's; rport is asked for (RFC 3581 3).
 */
export function placeholderVia(branch?: string): ReturnType<typeof createVia> {
  return createVia('UDP', '0.0.0.0', undefined, branch);
}

/** Most log-throttle windows kept at once (some kinds are per source address; see #throttled). */
const MAX_THROTTLE_KEYS = 1024;

/** RFC 3261 18.1.1: above this a UDP request is written with compact header names (7.3.3). */
const UDP_COMPACT_THRESHOLD = 1300;

type State = 'new' | 'starting' | 'started' | 'closed';

// --- the layer ----------------------------------------------------------------------------------

export class SipTransportLayer extends EventEmitter<SipTransportEvents> implements SipTransport {
  readonly #opts: SipTransportLayerOptions;
  readonly #maxMessage: number;
  readonly #maxConnections: number;
  readonly #maxPerSource: number;
  readonly #idleTimeoutMs: number;
  readonly #messageTimeoutMs: number;
  /** Sources answered along the RFC 3261 18.2.2 route of their Via; undefined: none. */
  readonly #trusted: BlockList | undefined;
  /** Inbound TCP/TLS sockets (handshakes in progress included) per source address. */
  readonly #perSource = new Map<string, number>();
  readonly #logger: SipTransportLogger | undefined;
  readonly #logInterval: number;
  readonly #now: () => number;
  readonly #udp: UdpListener[] = [];
  readonly #servers: StreamServer[] = [];
  readonly #pool = new ConnectionPool();
  /** Pool key of each connection (its remote endpoint), for removal. */
  readonly #keys = new Map<string, string>();
  readonly #stats = emptyStats();
  readonly #throttle = new Map<string, { at: number; suppressed: number }>();
  #state: State = 'new';
  #startPromise: Promise<void> | undefined;
  #closePromise: Promise<void> | undefined;
  #connectionSeq = 0;

  /** @throws SipTransportError SIP_TRANSPORT_CONFIG when a trustedProxies entry is not an address or CIDR */
  constructor(opts: SipTransportLayerOptions) {
    // Async listeners' rejections come back to [captureRejectionSymbol] below.
    super({ captureRejections: true });
    this.#opts = opts;
    this.#maxMessage = opts.maxMessageBytes ?? TRANSPORT_DEFAULTS.maxMessageBytes;
    this.#maxConnections = Math.max(1, opts.maxConnections ?? TRANSPORT_DEFAULTS.maxConnections);
    this.#maxPerSource = opts.maxConnectionsPerSource ?? TRANSPORT_DEFAULTS.maxConnectionsPerSource;
    this.#idleTimeoutMs = opts.idleTimeoutMs ?? TRANSPORT_DEFAULTS.idleTimeoutMs;
    this.#messageTimeoutMs = opts.messageTimeoutMs ?? TRANSPORT_DEFAULTS.messageTimeoutMs;
    this.#trusted = trustedList(opts.trustedProxies ?? []);
    this.#logger = opts.logger;
    this.#logInterval = opts.logIntervalMs ?? TRANSPORT_DEFAULTS.logIntervalMs;
    this.#now = opts.now ?? Date.now;
  }

  // --- lifecycle ---

  /**
   * Binds every listener. Idempotent while starting or started.
   * @throws SipTransportError SIP_TRANSPORT_CONFIG (bad options), SIP_TRANSPORT_BIND (a listener
   *   could not bind; the others are closed again), SIP_TRANSPORT_CLOSED (after close()).
   */
  start(): Promise<void> {
    if (this.#state === 'closed') return Promise.reject(new SipTransportError('SIP_TRANSPORT_CLOSED', 'the SIP transport is closed'));
    this.#startPromise ??= this.#start();
    return this.#startPromise;
  }

  async #start(): Promise<void> {
    this.#state = 'starting';
    const binds: Promise<void>[] = [];
    try {
      for (const l of this.#opts.listen) {
        this.#checkListen(l);
        if (l.protocol === 'udp') {
          const u = new UdpListener({
            address: l.address,
            port: l.port,
            ...(l.advertise !== undefined ? { advertise: l.advertise } : {}),
            ...(l.advertisePort !== undefined ? { advertisePort: l.advertisePort } : {}),
            recvBufferSize: this.#opts.udpRecvBufferBytes ?? TRANSPORT_DEFAULTS.udpRecvBufferBytes,
            onDatagram: this.#onDatagram,
            onError: (err) => this.#socketError(err, 'UDP socket'),
          });
          this.#udp.push(u);
          binds.push(u.bind());
        } else {
          const s = new StreamServer({
            protocol: l.protocol,
            address: l.address,
            port: l.port,
            ...(l.tls ? { tls: l.tls } : {}),
            ...(l.advertise !== undefined ? { advertise: l.advertise } : {}),
            ...(l.advertisePort !== undefined ? { advertisePort: l.advertisePort } : {}),
            handshakeTimeoutMs: this.#opts.tlsHandshakeTimeoutMs ?? TRANSPORT_DEFAULTS.tlsHandshakeTimeoutMs,
            // The pool evicts at maxConnections; this backstop also bounds TLS handshakes in
            // progress, which the pool does not see yet.
            maxSockets: this.#maxConnections + 64,
            admit: this.#admit,
            onSocket: (socket) => this.#adopt(socket, l.protocol as StreamProtocol, false),
            onError: (err) => this.#socketError(err, `${l.protocol.toUpperCase()} listener`),
            onTlsClientError: (err, _server, source) => this.#onTlsClientError(err, source),
          });
          this.#servers.push(s);
          binds.push(s.listen());
        }
      }
      const results = await Promise.allSettled(binds);
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    } catch (err) {
      await Promise.allSettled(binds);
      await this.close();
      throw err instanceof SipTransportError ? err : new SipTransportError('SIP_TRANSPORT_CONFIG', String(err), { cause: err });
    }
    if (this.#state !== 'starting') throw new SipTransportError('SIP_TRANSPORT_CLOSED', 'the SIP transport was closed while starting');
    this.#state = 'started';
    this.#logger?.info({ endpoints: this.endpoints.map((e) => `${e.protocol}:${formatEndpoint(e)}`) }, 'SIP transport listening');
  }

  #checkListen(l: SipTransportListen): void {
    const where = `${String(l.protocol)} ${String(l.address)}:${String(l.port)}`;
    if (l.protocol !== 'udp' && l.protocol !== 'tcp' && l.protocol !== 'tls') throw new SipTransportError('SIP_TRANSPORT_CONFIG', `unknown protocol in listener ${where}`);
    if (ipFamily(l.address) === 0 || l.address.startsWith('[')) throw new SipTransportError('SIP_TRANSPORT_CONFIG', `listener ${where}: the address must be an IPv4 or IPv6 literal`);
    if (!Number.isInteger(l.port) || l.port < 0 || l.port > 65535) throw new SipTransportError('SIP_TRANSPORT_CONFIG', `listener ${where}: bad port`);
    if (l.protocol === 'tls' && (!l.tls?.cert || !l.tls.key)) throw new SipTransportError('SIP_TRANSPORT_CONFIG', `listener ${where}: TLS needs tls.cert and tls.key`);
  }

  /** True once close() was called. */
  get closed(): boolean {
    return this.#state === 'closed';
  }

  /**
   * Closes every listener and connection (connects in progress are dropped when they complete),
   * then emits 'close'. Idempotent; later send() calls reject with SIP_TRANSPORT_CLOSED.
   */
  close(): Promise<void> {
    if (this.#closePromise) return this.#closePromise;
    this.#state = 'closed';
    this.#closePromise = (async () => {
      for (const c of this.#pool.all()) c.close('shutdown');
      await Promise.allSettled([...this.#udp.map((u) => u.close()), ...this.#servers.map((s) => s.close())]);
      this.#fire('close');
    })();
    return this.#closePromise;
  }

  // --- what the layers above read ---

  /** The bound listeners, ports as chosen by the OS (after start()). */
  get endpoints(): Endpoint[] {
    const out: Endpoint[] = [];
    for (const u of this.#udp) out.push({ ...u.bound });
    for (const s of this.#servers) out.push({ ...s.bound });
    return out;
  }

  /** A snapshot of the counters. */
  get stats(): SipTransportStats {
    const s = this.#stats;
    return {
      ...s,
      received: { ...s.received },
      bytesIn: { ...s.bytesIn },
      messagesIn: { ...s.messagesIn },
      messagesOut: { ...s.messagesOut },
      bytesOut: { ...s.bytesOut },
      connectionsOpen: this.#pool.size,
    };
  }

  /**
   * Keeps the TCP/TLS connection `connectionId` open through `ms` without traffic (at least the
   * idle timeout; 0 restores it): a registrar's binding lives on it (RFC 5626 flows). False when
   * no such connection is open.
   */
  holdConnection(connectionId: string, ms: number): boolean {
    const c = this.#pool.get(connectionId);
    if (c === undefined || c.closed) return false;
    c.holdIdle(ms);
    return true;
  }

  /**
   * RFC 5626 4.4.1 keep-alive as the client, on the open TCP/TLS connection to `destination` (an
   * IP literal and port, as requests were sent to it): a "\r\n\r\n" ping, then 'pong' when the
   * "\r\n" answer comes within `timeoutMs`; 'no-pong' when it does not (that connection is closed,
   * so the next request opens a new one) or it closed meanwhile; 'no-connection' when none is open
   * (or the destination is UDP).
   */
  async pingEndpoint(destination: Endpoint, timeoutMs: number): Promise<'pong' | 'no-pong' | 'no-connection'> {
    if (destination.protocol === 'udp') return 'no-connection';
    const c = this.#pool.find(endpointKey(destination.protocol, stripBrackets(destination.address), destination.port));
    if (c === undefined || c.closed) return 'no-connection';
    return (await c.ping(timeoutMs)) ? 'pong' : 'no-pong';
  }

  /** The TCP/TLS connections open now. */
  connections(): ConnectionInfo[] {
    return this.#pool.all().map((c) => this.#info(c));
  }

  /** RFC 3261 17.1.1.2, 17.1.2.2: timers A, E, G only on unreliable transports. */
  isReliable(protocol: TransportProtocol): boolean {
    return protocol !== 'udp';
  }

  /**
   * The advertised endpoint of the first listener of `protocol` (of `family` when given): the
   * host/port for Via and Contact.
   * @throws SipTransportError SIP_TRANSPORT_NO_LISTENER when there is none (or not started).
   */
  localEndpoint(protocol: TransportProtocol, family?: IpFamily): Endpoint {
    if (protocol === 'udp') {
      const u = this.#udp.find((x) => family === undefined || x.family === family);
      if (u && this.#state === 'started') return { ...u.advertised };
    } else {
      const s = this.#servers.find((x) => x.protocol === protocol && (family === undefined || x.family === family));
      if (s && this.#state === 'started') return s.advertised();
    }
    throw new SipTransportError('SIP_TRANSPORT_NO_LISTENER', `no ${protocol.toUpperCase()} listener${family ? ` for IPv${family}` : ''}`);
  }

  // --- sending ---

  /**
   * Sends a request to `destination`, or a response along the route of its top Via.
   *
   * Requests: a top Via whose host is a placeholder (isViaPlaceholder: "", "0.0.0.0", "::") gets
   * the transport token, host and port of the socket used (the branch stays); a request without
   * Via gets a new one (read it back from `topVia`). UDP leaves from the listener of the
   * destination's family (or the one named by `connectionId`); TCP/TLS reuses the connection
   * `connectionId` names, else an open one to the destination, else opens one (RFC 3261 18.1.1).
   *
   * Responses go back where the request came from (#sendToSource): `destination` (the request's
   * source) over UDP, the request's connection (`connectionId`) or one to `destination` over
   * TCP/TLS. Only to a trusted proxy (trustedProxies) do they follow RFC 3261 18.2.2 / RFC 3581
   * 4 from the top Via: TCP/TLS over the request's connection while open, else to `received`
   * (or the sent-by host) and the sent-by port over a connection opened for it; UDP to maddr,
   * else `received`:`rport`, else `received`:sent-by port, else the sent-by host and port (5060 /
   * 5061 by default), from the listener the request came in on.
   *
   * @throws SipTransportError SIP_TRANSPORT_CLOSED, SIP_TRANSPORT_NO_LISTENER, SIP_TRANSPORT_RESOLVE,
   *   SIP_TRANSPORT_CONNECT, SIP_TRANSPORT_SEND; TypeError when the message cannot be serialized.
   */
  async send(message: SipRequest | SipResponse, destination: Endpoint, connectionId?: string, options: SendOptions = {}): Promise<void> {
    if (this.#state !== 'started') {
      throw new SipTransportError('SIP_TRANSPORT_CLOSED', this.#state === 'closed' ? 'the SIP transport is closed' : 'the SIP transport is not started');
    }
    try {
      if (message.isRequest) await this.#sendRequest(message, destination, connectionId, options);
      else await this.#sendResponse(message, destination, connectionId, options);
    } catch (err) {
      if (err instanceof SipTransportError) {
        if (err.code === 'SIP_TRANSPORT_CONNECT') this.#stats.connectFailures++;
        else this.#stats.sendErrors++;
      }
      throw err;
    }
  }

  async #sendRequest(req: SipRequest, dest: Endpoint, connectionId: string | undefined, options: SendOptions): Promise<void> {
    if (dest.protocol === 'udp') {
      let address = stripBrackets(dest.address);
      // A host name (a carrier's Contact or Record-Route): A/AAAA lookup, as for TCP/TLS. No
      // RFC 3263 SRV/NAPTR: the port is the URI's.
      if (ipFamily(address) === 0) {
        // Ask for the family we have a UDP socket of, when we have only one ("localhost" may be ::1).
        const families = new Set(this.#udp.map((u) => u.family));
        address = await this.#resolve(address, 'udp', dest.port, families.size === 1 ? [...families][0] : undefined);
      }
      const listener = this.#udpFor(address, connectionId);
      this.#fillVia(req, listener.advertisedFor(ipFamily(address)));
      await this.#sendUdp(listener, serializeForUdp(req), address, dest.port);
      return;
    }
    const conn = await this.#connectionFor(dest.protocol, dest.address, dest.port, connectionId, options.servername ?? dest.tlsName);
    this.#fillVia(req, this.#streamLocal(conn));
    await this.#sendStream(conn, req.toBuffer());
  }

  /** RFC 3261 18.1.1: the transport fills in sent-by (and the transport token) of the top Via. */
  #fillVia(req: SipRequest, local: Endpoint): void {
    const via = req.topVia;
    if (via === undefined) {
      req.prepend('Via', createVia(viaTransport(local.protocol), local.address, local.port));
      return;
    }
    if (!isViaPlaceholder(via.host)) return;
    via.transport = viaTransport(local.protocol);
    via.host = local.address;
    via.port = local.port;
  }

  async #sendResponse(res: SipResponse, dest: Endpoint, connectionId: string | undefined, options: SendOptions): Promise<void> {
    const via = res.topVia;
    if (!via || !this.#isTrusted(dest.address)) {
      await this.#sendToSource(res, via, dest, connectionId, options);
      return;
    }
    // A trusted proxy: RFC 3261 18.2.2 and RFC 3581 4 from its Via.
    const protocol = protocolOfVia(via.transport) ?? dest.protocol;
    if (protocol === 'udp') {
      let address = dest.address;
      let port = dest.port;
      if (via) {
        const received = via.received;
        const rport = via.rport;
        if (via.maddr !== undefined) {
          address = via.maddr;
          port = via.port ?? 5060;
        } else if (received !== undefined) {
          // RFC 3581 4: received + rport when the client asked for rport, else the sent-by port.
          address = received;
          port = typeof rport === 'number' ? rport : (via.port ?? 5060);
        } else {
          // A request we did not stamp (or a hand-made response): the sent-by (RFC 3263 6).
          address = via.host;
          port = via.port ?? 5060;
        }
      }
      address = stripBrackets(address);
      await this.#sendUdp(this.#udpFor(address, connectionId), res.toBuffer(), address, port);
      return;
    }
    // RFC 3261 18.2.2, reliable: the connection the request arrived on, while it is open.
    let conn = connectionId !== undefined ? this.#pool.get(connectionId) : undefined;
    if (conn && (conn.closed || conn.protocol !== protocol)) conn = undefined;
    if (!conn && via) {
      // The connection the request came from, found by its source address and port.
      const rport = via.rport;
      if (via.received !== undefined && typeof rport === 'number') conn = this.#pool.find(endpointKey(protocol, via.received, rport));
      // "Otherwise ... open a connection to the IP address in received, using the port in the
      // sent-by value, or the default port."
      if (!conn) {
        const servername = options.servername ?? (ipFamily(via.host) === 0 ? via.host : undefined);
        conn = await this.#connectionFor(protocol, via.received ?? via.host, via.port ?? defaultPort(protocol), undefined, servername);
      }
    }
    conn ??= await this.#connectionFor(protocol, dest.address, dest.port, undefined, options.servername);
    await this.#sendStream(conn, res.toBuffer());
  }

  /**
   * A response to a peer that is not a trusted proxy goes back where its request came from
   * (`dest`, the request's source, and `connectionId`), over the transport it came on, whatever
   * its Via says. Else a Via's `maddr`, a `received` or rport the client wrote itself, or a
   * sent-by naming another host or transport would let anyone aim our responses (a 200 to an
   * OPTIONS, retransmitted) at a third address: a reflection attack.
   *
   *   UDP      dest address and port (RFC 3581 4's received:rport, asked for or not)
   *   TCP/TLS  the request's connection while open; else an open connection from dest; else a
   *            new connection to dest's address at the sent-by port (RFC 3261 18.2.2), default
   *            5060 / 5061
   */
  async #sendToSource(res: SipResponse, via: Via | undefined, dest: Endpoint, connectionId: string | undefined, options: SendOptions): Promise<void> {
    const address = stripBrackets(dest.address);
    if (dest.protocol === 'udp') {
      await this.#sendUdp(this.#udpFor(address, connectionId), res.toBuffer(), address, dest.port);
      return;
    }
    let conn = connectionId !== undefined ? this.#pool.get(connectionId) : undefined;
    if (conn && (conn.closed || conn.protocol !== dest.protocol)) conn = undefined;
    if (!conn) {
      const servername = options.servername ?? (via && ipFamily(via.host) === 0 ? via.host : undefined);
      const open = this.#pool.find(endpointKey(dest.protocol, address, dest.port));
      conn = open && !open.closed ? open : await this.#connectionFor(dest.protocol, address, via?.port ?? defaultPort(dest.protocol), undefined, servername);
    }
    await this.#sendStream(conn, res.toBuffer());
  }

  /** True when `address` (an IP literal) is one of trustedProxies. */
  #isTrusted(address: string): boolean {
    const t = this.#trusted;
    if (t === undefined) return false;
    const family = ipFamily(address);
    return family !== 0 && t.check(withoutZone(address), family === 6 ? 'ipv6' : 'ipv4');
  }

  /**
   * The UDP socket for a destination address: the one `hint` names when it can reach it (the
   * listener a request came in on, RFC 3581 4), else one of the address's family, else a
   * dual-stack one.
   */
  #udpFor(address: string, hint: string | undefined): UdpListener {
    const family = ipFamily(address);
    if (hint !== undefined) {
      for (const u of this.#udp) if (u.id === hint && u.canReach(family)) return u;
    }
    const want = family === 0 ? 4 : family;
    const u = this.#udp.find((x) => x.family === want) ?? this.#udp.find((x) => x.canReach(family));
    if (!u) throw new SipTransportError('SIP_TRANSPORT_NO_LISTENER', `no UDP listener can reach ${address}`, { endpoint: { protocol: 'udp', address, port: 0 } });
    return u;
  }

  async #sendUdp(listener: UdpListener, buf: Buffer, address: string, port: number): Promise<void> {
    await listener.send(buf, address, port);
    this.#stats.messagesOut.udp++;
    this.#stats.bytesOut.udp += buf.length;
  }

  async #sendStream(conn: StreamConnection, buf: Buffer): Promise<void> {
    await conn.write(buf);
    this.#stats.messagesOut[conn.protocol]++;
    this.#stats.bytesOut[conn.protocol] += buf.length;
  }

  /**
   * A connection to a stream destination: the one `connectionId` names while open, else one
   * open to the same remote endpoint, else a connect in progress to it, else a new one.
   */
  async #connectionFor(protocol: StreamProtocol, address: string, port: number, connectionId: string | undefined, servername: string | undefined): Promise<StreamConnection> {
    if (connectionId !== undefined) {
      const c = this.#pool.get(connectionId);
      if (c && !c.closed && c.protocol === protocol) return c;
    }
    let ip = stripBrackets(address);
    let sni = servername;
    if (ipFamily(ip) === 0) {
      sni ??= ip;
      ip = await this.#resolve(ip, protocol, port);
    }
    const key = endpointKey(protocol, ip, port);
    const open = this.#pool.find(key);
    if (open && !open.closed) return open;
    let pending = this.#pool.pending.get(key);
    if (!pending) {
      pending = this.#connect(protocol, ip, port, sni).finally(() => this.#pool.pending.delete(key));
      this.#pool.pending.set(key, pending);
    }
    return pending;
  }

  async #resolve(host: string, protocol: TransportProtocol, port: number, family?: IpFamily): Promise<string> {
    try {
      return (await (family === undefined ? lookup(host) : lookup(host, { family }))).address;
    } catch (err) {
      throw new SipTransportError('SIP_TRANSPORT_RESOLVE', `cannot resolve ${host}: ${err instanceof Error ? err.message : String(err)}`, { cause: err, endpoint: { protocol, address: host, port } });
    }
  }

  async #connect(protocol: StreamProtocol, ip: string, port: number, servername: string | undefined): Promise<StreamConnection> {
    const tlsOpts: ConnectionOptions = { ...this.#opts.outboundTls };
    if (protocol === 'tls' && tlsOpts.cert === undefined && tlsOpts.key === undefined) {
      // Present our server certificate as client certificate: carriers that authenticate the
      // SBC by mutual TLS expect it.
      const own = this.#opts.listen.find((l) => l.protocol === 'tls' && l.tls);
      if (own?.tls) {
        tlsOpts.cert = own.tls.cert;
        tlsOpts.key = own.tls.key;
      }
    }
    const socket = await connectStream({
      protocol,
      address: ip,
      port,
      ...(servername !== undefined ? { servername } : {}),
      tls: tlsOpts,
      timeoutMs: this.#opts.connectTimeoutMs ?? TRANSPORT_DEFAULTS.connectTimeoutMs,
    });
    if (this.#state === 'closed') {
      socket.destroy();
      throw new SipTransportError('SIP_TRANSPORT_CLOSED', 'the SIP transport closed while connecting');
    }
    const conn = this.#adopt(socket, protocol, true, { protocol, address: ip, port });
    if (!conn) throw new SipTransportError('SIP_TRANSPORT_CONNECT', `connection to ${formatEndpoint({ address: ip, port })} closed at once`, { endpoint: { protocol, address: ip, port } });
    return conn;
  }

  /** Our endpoint on a connection, for Via sent-by and Inbound.local. */
  #streamLocal(conn: StreamConnection): Endpoint {
    const servers = this.#servers.filter((s) => s.protocol === conn.protocol);
    // The listener that accepted it (same local port), else one of the same family, else any.
    const fam = ipFamily(conn.localAddress);
    const s = servers.find((x) => !conn.outbound && x.bound.port === conn.localPort) ?? servers.find((x) => x.family === fam) ?? servers[0];
    if (s) return s.advertised(conn.localAddress);
    return { protocol: conn.protocol, address: conn.localAddress, port: conn.localPort };
  }

  // --- connections ---

  /** Takes a connected socket into the pool (evicting the least recently active one when full). */
  #adopt(socket: Socket | TLSSocket, protocol: StreamProtocol, outbound: boolean, remote?: Endpoint): StreamConnection | undefined {
    if (this.#state === 'closed' || (!remote && socket.remoteAddress === undefined)) {
      // Closed meanwhile, or a peer that reset before we got to it.
      socket.on('error', noop);
      socket.destroy();
      return undefined;
    }
    while (this.#pool.size >= this.#maxConnections) {
      const victim = this.#pool.evictionCandidate();
      if (!victim) break;
      this.#stats.connectionsEvicted++;
      victim.close('evicted');
    }
    const r = remote ?? { protocol, address: unmapIPv4(socket.remoteAddress ?? ''), port: socket.remotePort ?? 0 };
    const key = endpointKey(protocol, r.address, r.port);
    const conn = new StreamConnection({
      id: `${protocol}:${++this.#connectionSeq}`,
      protocol,
      socket,
      outbound,
      remote: r,
      maxHeaderBytes: Math.min(32 * 1024, this.#maxMessage),
      maxBodyBytes: this.#maxMessage,
      idleTimeoutMs: this.#idleTimeoutMs,
      messageTimeoutMs: this.#messageTimeoutMs,
      maxWriteBufferBytes: this.#opts.maxWriteBufferBytes ?? TRANSPORT_DEFAULTS.maxWriteBufferBytes,
      now: this.#now,
      hooks: this.#hooks,
    });
    this.#keys.set(conn.id, key);
    this.#pool.add(conn, key);
    this.#stats.connectionsOpened++;
    this.#fire('connection', this.#info(conn));
    return conn;
  }

  readonly #hooks: StreamConnectionHooks = {
    onMessage: (buf, conn) => this.#onStreamMessage(buf, conn),
    onFramingError: (err, conn) => this.#onFramingError(err, conn),
    onPing: () => {
      this.#stats.keepAlives++;
    },
    onClose: (conn, reason, err) => {
      const key = this.#keys.get(conn.id);
      this.#keys.delete(conn.id);
      if (key !== undefined) this.#pool.remove(conn, key);
      if (reason === 'idle') this.#stats.connectionsIdleClosed++;
      if (reason === 'message-timeout') {
        this.#stats.messageTimeouts++;
        this.#throttled('message-timeout', 'info', { remote: `${conn.protocol}:${formatEndpoint(conn.remote)}`, timeoutMs: this.#messageTimeoutMs }, 'SIP connection closed: message not complete in time');
      }
      if (reason === 'error' && err && this.#state !== 'closed') this.#throttled('connection-error', 'debug', { err: err.message, connectionId: conn.id, remote: formatEndpoint(conn.remote) }, 'SIP connection error');
      this.#fire('connectionClosed', this.#info(conn), reason);
    },
  };

  /**
   * Admission of an accepted socket, before its TLS handshake: at most maxConnectionsPerSource
   * per source address (0: no limit), so one host cannot take every slot of maxConnections.
   */
  readonly #admit = (socket: Socket): boolean => {
    const address = socket.remoteAddress;
    if (this.#maxPerSource <= 0 || address === undefined) return true;
    const source = unmapIPv4(address);
    const n = this.#perSource.get(source) ?? 0;
    if (n >= this.#maxPerSource) {
      this.#stats.connectionsRefused++;
      // One line per window for all sources (the map of throttles stays bounded), naming the latest.
      this.#throttled('connection-refused', 'warn', { source, limit: this.#maxPerSource }, 'SIP connection refused: too many connections from one source');
      return false;
    }
    this.#perSource.set(source, n + 1);
    socket.once('close', () => {
      const m = (this.#perSource.get(source) ?? 1) - 1;
      if (m > 0) this.#perSource.set(source, m);
      else this.#perSource.delete(source);
    });
    return true;
  };

  /** A TLS handshake failed or timed out; Node's tlsClientError, the socket already destroyed. */
  #onTlsClientError(err: Error, source: string): void {
    this.#stats.tlsHandshakeFailures++;
    if ((err as NodeJS.ErrnoException).code !== 'ERR_TLS_HANDSHAKE_TIMEOUT') return;
    this.#stats.tlsHandshakeTimeouts++;
    const timeoutMs = this.#opts.tlsHandshakeTimeoutMs ?? TRANSPORT_DEFAULTS.tlsHandshakeTimeoutMs;
    // Per source: a stalled client, or a flood of stalled sockets, is named once per window.
    this.#throttled(`tls-handshake-timeout ${source}`, 'info', { source, timeoutMs }, 'SIP TLS handshake not finished in time: connection closed');
  }

  #info(conn: StreamConnection): ConnectionInfo {
    return { id: conn.id, protocol: conn.protocol, remote: { ...conn.remote }, local: this.#streamLocal(conn), outbound: conn.outbound };
  }

  // --- receiving ---

  readonly #onDatagram = (buf: Buffer, rinfo: RemoteInfo, listener: UdpListener): void => {
    const st = this.#stats;
    st.received.udp++;
    st.bytesIn.udp += buf.length;
    if (isLineEndsOnly(buf)) {
      // CRLF keep-alives (RFC 5626 4.4.1 defines them for streams; many UAs send them over UDP).
      st.keepAlives++;
      return;
    }
    const source: Endpoint = { protocol: 'udp', address: unmapIPv4(rinfo.address), port: rinfo.port };
    let msg: SipMessageAny;
    try {
      if (buf.length > this.#maxMessage) throw tooLarge('datagram', buf, this.#maxMessage);
      msg = parseMessage(buf, { maxBodyBytes: this.#maxMessage });
    } catch (err) {
      const e = this.#rejected(err, buf, source);
      if (e) this.#answerUdp(listener, e, source);
      return;
    }
    this.#deliver(msg, source, { ...listener.advertisedFor(ipFamily(source.address)) }, listener.id);
  };

  #onStreamMessage(buf: Buffer, conn: StreamConnection): void {
    const p = conn.protocol;
    this.#stats.received[p]++;
    this.#stats.bytesIn[p] += buf.length;
    let msg: SipMessageAny;
    try {
      if (buf.length > this.#maxMessage) throw tooLarge('message', buf, this.#maxMessage);
      msg = parseMessage(buf, { stream: true, maxBodyBytes: this.#maxMessage });
    } catch (err) {
      // One bad message; the framing holds, the connection carries on.
      const e = this.#rejected(err, buf, conn.remote);
      const out = e && buildStatelessResponse(e);
      if (out) this.#answerStream(conn, out, false);
      return;
    }
    conn.established = true;
    this.#deliver(msg, { ...conn.remote }, this.#streamLocal(conn), conn.id);
  }

  /** RFC 3261 18.3: the stream lost its framing. Answer if there is a request to answer, then close. */
  #onFramingError(err: SipParseError, conn: StreamConnection): void {
    this.#stats.framingErrors++;
    const e = this.#rejected(err, Buffer.alloc(0), conn.remote);
    const out = e && buildStatelessResponse(e);
    if (out) this.#answerStream(conn, out, true);
    else conn.close('framing');
  }

  /**
   * Counts and (throttled) logs input that did not parse; returns the error when a stateless
   * response should be sent (a request other than ACK, with its header fields recovered).
   */
  #rejected(err: unknown, buf: Buffer, source: Endpoint): SipParseError | undefined {
    const st = this.#stats;
    const e = err instanceof SipParseError ? err : new SipParseError('Bad Request', String(err), { cause: err, context: tryExtractResponseContext(buf) });
    st.parseErrors++;
    if (e.status === 513) st.oversized++;
    if (e.isResponse) {
      // RFC 3261 18.1.2 / 8.1.3.3: a malformed response is dropped.
      st.droppedResponses++;
      this.#throttled('bad-response', 'debug', { reason: e.reason, detail: e.detail, source: `${source.protocol}:${formatEndpoint(source)}` }, 'malformed SIP response dropped');
      return undefined;
    }
    if (!e.context) {
      st.droppedNoise++;
      this.#throttled('noise', 'debug', { reason: e.reason, detail: e.detail, source: `${source.protocol}:${formatEndpoint(source)}` }, 'unparseable input dropped (nothing to answer)');
      return undefined;
    }
    if (e.context.method === 'ACK') {
      st.droppedAcks++;
      return undefined;
    }
    this.#throttled('bad-request', 'info', { reason: e.reason, detail: e.detail, status: e.status, method: e.context.method, callId: e.context.callId, source: `${source.protocol}:${formatEndpoint(source)}` }, 'malformed SIP request answered statelessly');
    return e;
  }

  /**
   * The stateless answer over UDP: to the packet's source address and port. From a trusted
   * proxy, RFC 3261 18.2.2 with RFC 3581 4: the source address (the `received` we would have
   * set), at its source port when the Via asked for rport or cannot be read, else at the Via's
   * sent-by port.
   */
  #answerUdp(listener: UdpListener, err: SipParseError, source: Endpoint): void {
    const out = buildStatelessResponse(err);
    if (!out) return;
    const port = this.#isTrusted(source.address) ? statelessPort(err.context, source.port) : source.port;
    listener.send(out, source.address, port).then(
      () => {
        this.#stats.statelessResponses++;
        this.#stats.messagesOut.udp++;
        this.#stats.bytesOut.udp += out.length;
      },
      (e: unknown) => this.#answerFailed(e),
    );
  }

  #answerStream(conn: StreamConnection, out: Buffer, thenClose: boolean): void {
    conn.write(out).then(
      () => {
        this.#stats.statelessResponses++;
        this.#stats.messagesOut[conn.protocol]++;
        this.#stats.bytesOut[conn.protocol] += out.length;
      },
      (e: unknown) => this.#answerFailed(e),
    );
    if (thenClose) conn.close('framing', true);
  }

  #answerFailed(err: unknown): void {
    this.#stats.sendErrors++;
    this.#throttled('answer-failed', 'debug', { err: err instanceof Error ? err.message : String(err) }, 'stateless SIP response not sent');
  }

  #deliver(msg: SipMessageAny, source: Endpoint, local: Endpoint, connectionId: string): void {
    const p = source.protocol;
    this.#stats.messagesIn[p]++;
    if (msg.isRequest) {
      stampVia(msg, source);
      this.#fire('request', { message: msg, source, local, connectionId });
    } else {
      this.#fire('response', { message: msg, source, local, connectionId });
    }
  }

  // --- events, errors, logs ---

  /** Emits without letting a listener's exception into the socket handler. */
  #fire<K extends keyof SipTransportEvents>(event: K, ...args: SipTransportEvents[K]): void {
    try {
      (this.emit as (e: K, ...a: SipTransportEvents[K]) => boolean)(event, ...args);
    } catch (err) {
      this.#listenerFailed(String(event), err);
    }
  }

  /** Node calls this for a listener whose promise rejected (captureRejections). */
  override [EventEmitter.captureRejectionSymbol](err: Error, event: unknown, ..._args: unknown[]): void {
    this.#listenerFailed(String(event), err);
  }

  #listenerFailed(event: string, err: unknown): void {
    this.#stats.listenerErrors++;
    const e = new SipTransportError('SIP_TRANSPORT_LISTENER', `a '${event}' listener threw: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    this.#throttled(`listener-${event}`, 'error', { err }, e.message);
    this.#emitError(e);
  }

  #socketError(err: Error, what: string): void {
    const e = new SipTransportError('SIP_TRANSPORT_SOCKET', `${what}: ${err.message}`, { cause: err });
    this.#throttled(`socket-${what}`, 'warn', { err: err.message }, e.message);
    this.#emitError(e);
  }

  #emitError(e: SipTransportError): void {
    if (this.listenerCount('error') === 0) return;
    try {
      this.emit('error', e);
    } catch (err) {
      this.#throttled('listener-error', 'error', { err }, "an 'error' listener of the SIP transport threw");
    }
  }

  /** Logs at most once per kind per logIntervalMs, with how many were suppressed since. */
  #throttled(kind: string, level: keyof SipTransportLogger, obj: Record<string, unknown>, msg: string): void {
    if (!this.#logger) return;
    const now = this.#now();
    const t = this.#throttle.get(kind);
    if (t && now - t.at < this.#logInterval) {
      t.suppressed++;
      return;
    }
    // Kinds keyed by source address are many: entries whose window has passed are dropped before
    // the map grows past a bound (their suppressed counts were reported or are stale).
    if (!t && this.#throttle.size >= MAX_THROTTLE_KEYS) {
      for (const [k, v] of this.#throttle) if (now - v.at >= this.#logInterval) this.#throttle.delete(k);
      // Still full (more sources than that within one window): this line is suppressed.
      if (this.#throttle.size >= MAX_THROTTLE_KEYS) return;
    }
    this.#throttle.set(kind, { at: now, suppressed: 0 });
    this.#logger[level]({ ...obj, ...(t && t.suppressed > 0 ? { suppressed: t.suppressed } : {}) }, msg);
  }
}

// --- helpers ------------------------------------------------------------------------------------

function noop(): void {}

/** 513 for a request (with what is needed to answer it), a drop for a response. */
function tooLarge(what: string, buf: Buffer, limit: number): SipTooLargeError {
  let i = 0;
  while (i < buf.length && (buf[i] === 0x0d || buf[i] === 0x0a)) i++;
  const isResponse = buf.length - i >= 4 && buf.toString('latin1', i, i + 4).toUpperCase() === 'SIP/';
  return new SipTooLargeError(what, buf.length, limit, isResponse ? { isResponse } : { context: tryExtractResponseContext(buf) });
}

/** A datagram of only CR and LF: a keep-alive. */
function isLineEndsOnly(buf: Buffer): boolean {
  if (buf.length === 0 || buf.length > 8) return false;
  for (const b of buf) if (b !== 0x0d && b !== 0x0a) return false;
  return true;
}

/**
 * RFC 3261 18.2.1 and RFC 3581 4, on every request received: `received` when the sent-by host is
 * not the source address (always when rport was asked for), `rport` filled with the source port
 * when present without a value. The transaction layer and the response route then read them.
 *
 * A `received` or an rport value already in the top Via was written by the sender itself (only
 * the receiving hop adds them): never the truth about where the request came from, so both are
 * replaced with the source's, and whoever reads the Via reads what we saw.
 */
function stampVia(req: SipRequest, source: Endpoint): void {
  const via = req.topVia;
  if (!via) return; // the parser guarantees one; keep the transport safe anyway
  try {
    const askedRport = via.rport !== undefined;
    if (askedRport) via.rport = source.port;
    if (askedRport || via.received !== undefined || !sameAddress(via.host, source.address)) via.received = withoutZone(source.address);
  } catch {
    // A source address the Params grammar refuses cannot happen with IP literals; leave the Via.
  }
}

/**
 * trustedProxies as a BlockList (Node's matcher of addresses and subnets); undefined when empty.
 * @throws SipTransportError SIP_TRANSPORT_CONFIG for an entry that is not an address or CIDR
 */
function trustedList(entries: readonly string[]): BlockList | undefined {
  if (entries.length === 0) return undefined;
  const list = new BlockList();
  for (const entry of entries) {
    const [address = '', bits, extra] = entry.trim().split('/');
    const family = ipFamily(address);
    const type = family === 6 ? 'ipv6' : 'ipv4';
    const max = family === 6 ? 128 : 32;
    const prefix = bits === undefined ? max : /^\d{1,3}$/.test(bits) ? Number(bits) : -1;
    if (family === 0 || extra !== undefined || prefix < 0 || prefix > max) {
      throw new SipTransportError('SIP_TRANSPORT_CONFIG', `trustedProxies: "${entry}" is not an IP address or CIDR`);
    }
    list.addSubnet(address, prefix, type);
  }
  return list;
}

/** The destination port of a stateless response over UDP, from the raw top Via (see #answerUdp). */
function statelessPort(ctx: ResponseContext | undefined, sourcePort: number): number {
  const first = ctx?.via[0];
  if (first === undefined) return sourcePort;
  try {
    const via = parseVia(splitList(first)[0] ?? '');
    return via.rport !== undefined ? sourcePort : (via.port ?? 5060);
  } catch {
    return sourcePort; // an unreadable Via: the packet's source is all we know
  }
}

/** RFC 3261 7.3.3 / 18.1.1: compact header names when a UDP request gets near the MTU. */
function serializeForUdp(req: SipRequest): Buffer {
  const full = req.toBuffer();
  return full.length > UDP_COMPACT_THRESHOLD ? req.toBuffer({ compact: true }) : full;
}
