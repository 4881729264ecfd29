/**
 * Stream transports of the transport layer: TCP (RFC 3261 18.3) and TLS (RFC 3261 26.2, RFC 5630)
 * listeners, outgoing connections, one SipStreamFramer per connection, idle timeouts and the
 * pool that reuses a connection to the same remote endpoint (RFC 3261 18.1.1) and keeps the
 * number of connections bounded. Parsing, Via handling and statistics are the layer's
 * (index.ts); this file moves framed bytes.
 *
 *   peer --TCP/TLS--> StreamServer --socket--> StreamConnection --framed message--> layer
 *                                                  |  framer (Content-Length, caps, pings)
 *   layer --send--> ConnectionPool.get / find / connectStream() --> StreamConnection.write
 */
import { connect as netConnect, createServer as createNetServer, type Server, type Socket } from 'node:net';
import { connect as tlsConnect, createServer as createTlsServer, type ConnectionOptions, type PeerCertificate, type TLSSocket } from 'node:tls';
import { checkSipServerIdentity } from './tls-identity.ts';
import { SipTransportError, type SipParseError } from '../message/index.ts';
import { SipStreamFramer } from '../message/index.ts';
import { defaultInterfaceAddress, formatEndpoint, ipFamily, isUnspecified, unmapIPv4, type IpFamily } from './address.ts';
import type { Endpoint } from './types.ts';

export type StreamProtocol = 'tcp' | 'tls';

/** Why a connection closed ('connectionClosed' event). */
export type ConnectionCloseReason =
  /** The peer closed it (FIN or reset). */
  | 'peer'
  /** No traffic for idleTimeoutMs. */
  | 'idle'
  /**
   * A message was not complete messageTimeoutMs after its first byte (a slow or trickling
   * sender), or an accepted connection sent no byte at all within messageTimeoutMs.
   */
  | 'message-timeout'
  /** The byte stream lost its framing (RFC 3261 18.3): answered if possible, then closed. */
  | 'framing'
  /** A keep-alive ping of ours got no pong in time (RFC 5626 4.4.1: the flow failed). */
  | 'keepalive'
  /** Closed to make room under maxConnections (see ConnectionPool.evictionCandidate). */
  | 'evicted'
  /** The peer does not read what we write: the write backlog passed its cap. */
  | 'backlog'
  /** A socket error (reset, TLS alert...). */
  | 'error'
  /** The layer closed. */
  | 'shutdown';

export interface StreamConnectionHooks {
  /** One framed message (not yet parsed). */
  onMessage(message: Buffer, conn: StreamConnection): void;
  /** The framer failed: the connection is unusable (the layer answers if it can, then closes). */
  onFramingError(err: SipParseError, conn: StreamConnection): void;
  /**
   * A "\r\n\r\n" keep-alive ping was received (RFC 5626 4.4.1); called once per ping. The
   * pings of one chunk get one "\r\n" pong (see StreamConnection.#pong).
   */
  onPing(conn: StreamConnection): void;
  /** Called once, when the connection stops being usable. */
  onClose(conn: StreamConnection, reason: ConnectionCloseReason, err: Error | undefined): void;
}

export interface StreamConnectionOptions {
  id: string;
  protocol: StreamProtocol;
  socket: Socket | TLSSocket;
  /** We opened it (true) or accepted it (false). */
  outbound: boolean;
  remote: Endpoint;
  maxHeaderBytes: number;
  maxBodyBytes: number;
  idleTimeoutMs: number;
  /**
   * A message must be complete this long after its first byte, and an accepted connection must
   * send its first byte this long after the accept (0: no deadline).
   */
  messageTimeoutMs: number;
  maxWriteBufferBytes: number;
  now: () => number;
  hooks: StreamConnectionHooks;
}

/** How long a connection closed after a framing error may take to flush its last response. */
const GRACEFUL_CLOSE_MS = 2000;
const PONG = Buffer.from('\r\n');
const PING = Buffer.from('\r\n\r\n');

/** One TCP or TLS connection with its framer. */
export class StreamConnection {
  readonly id: string;
  readonly protocol: StreamProtocol;
  readonly outbound: boolean;
  /** The peer (IPv4 peers of a dual-stack listener unmapped). */
  readonly remote: Endpoint;
  /** Our side of the connection (address and port as the OS reports them). */
  readonly localAddress: string;
  readonly localPort: number;
  /** Time of the last byte received or sent (the `now` clock). */
  lastActivity: number;
  /**
   * Opened by us, or a message received on it parsed (the layer sets it): a connection a peer
   * uses, such as a PBX's persistent one, as opposed to one that never got past half a message.
   * The pool evicts the others first.
   */
  established: boolean;

  readonly #socket: Socket | TLSSocket;
  readonly #framer: SipStreamFramer;
  readonly #opts: StreamConnectionOptions;
  #closed = false;
  #error: Error | undefined;
  #graceTimer: NodeJS.Timeout | undefined;
  /** `now` at the first byte of the message being received; -1 between messages. */
  #messageStart = -1;
  /** Set while a message is in progress (and a little after: it re-checks, see #onDeadline). */
  #deadlineTimer: NodeJS.Timeout | undefined;
  /** A byte was received (see the first-byte deadline in the constructor). */
  #heard = false;
  /** Pings the framer found in the chunk being handled (answered after it, see #pong). */
  #pings = 0;
  /** Our ping waiting for its pong (ping()). */
  #pongWait: { resolve: (ok: boolean) => void; timer: NodeJS.Timeout } | undefined;

  constructor(o: StreamConnectionOptions) {
    this.#opts = o;
    this.id = o.id;
    this.protocol = o.protocol;
    this.outbound = o.outbound;
    this.remote = o.remote;
    this.#socket = o.socket;
    this.localAddress = unmapIPv4(o.socket.localAddress ?? '');
    this.localPort = o.socket.localPort ?? 0;
    this.lastActivity = o.now();
    this.established = o.outbound;
    this.#framer = new SipStreamFramer({
      maxHeaderBytes: o.maxHeaderBytes,
      maxBodyBytes: o.maxBodyBytes,
      onPing: () => this.#pings++,
      onPong: () => this.#ponged(),
    });
    const s = o.socket;
    s.setNoDelay(true);
    // Node resets the timer on every read and write: "idle" is "no traffic either way".
    if (o.idleTimeoutMs > 0) s.setTimeout(o.idleTimeoutMs);
    s.on('timeout', () => this.close('idle'));
    s.on('data', (chunk: Buffer) => this.#onData(chunk));
    s.on('error', (err) => {
      this.#error ??= err;
      this.#finish('error');
    });
    s.on('close', () => this.#finish(this.#error ? 'error' : 'peer'));
    // A socket that died before we took it: its 'close' has been emitted already.
    if (s.destroyed) queueMicrotask(() => this.#finish('peer'));
    // The first-byte deadline of an accepted connection: one that never sends anything would
    // otherwise hold its slot (and one of its source's) until the idle timeout, 120 s; TLS
    // handshakes have their own deadline, and this one starts after it. The whole-message
    // clock runs as if a message had begun at the accept, and the first byte (a message's or a
    // keep-alive's) stops it (#onData). Our own connections are not bounded this way.
    if (!o.outbound && o.messageTimeoutMs > 0) {
      this.#messageStart = o.now();
      this.#armDeadline(o.messageTimeoutMs);
    }
  }

  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Lets the connection stay silent for `ms` (never less than its configured idle timeout; 0
   * restores that): a PBX registered over it gets its calls on it and may send nothing between
   * its re-REGISTERs.
   */
  holdIdle(ms: number): void {
    if (this.#closed) return;
    const idle = Math.max(this.#opts.idleTimeoutMs, ms);
    if (idle > 0) this.#socket.setTimeout(idle);
  }

  /** Bytes queued for a message not complete yet (bounded by the framer's caps). */
  get buffered(): number {
    return this.#framer.buffered;
  }

  #onData(chunk: Buffer): void {
    if (this.#closed) return;
    const now = this.#opts.now();
    this.lastActivity = now;
    if (!this.#heard) {
      this.#heard = true;
      this.#messageStart = -1; // the first-byte deadline is met; #watchMessage takes over
    }
    let messages: Buffer[];
    try {
      messages = this.#framer.push(chunk);
    } catch (err) {
      this.#pings = 0;
      // push throws only SipParseError (docs/sip-message.md); anything else is a bug of the
      // framer's, handled the same way: the stream cannot be trusted any more.
      this.#opts.hooks.onFramingError(err as SipParseError, this);
      return;
    }
    if (this.#pings > 0) this.#pong();
    if (this.#pongWait !== undefined && this.#framer.takePong()) this.#ponged();
    if (this.#opts.messageTimeoutMs > 0) this.#watchMessage(messages.length > 0, now);
    for (const m of messages) {
      if (this.#closed) return; // a listener closed us
      this.#opts.hooks.onMessage(m, this);
    }
  }

  /**
   * The whole-message deadline. The idle timeout restarts with every byte, so a peer sending one
   * byte every few seconds would hold the connection (and a slot under maxConnections) forever:
   * this clock starts at the first byte of a message and only a complete message stops it.
   * Keep-alive CRLFs are not messages. One timer per connection at most, armed when a message
   * starts and not cleared when it ends (no timer work per message on a busy connection).
   */
  #watchMessage(completed: boolean, now: number): void {
    if (!this.#framer.inMessage) {
      this.#messageStart = -1;
      return;
    }
    // A message began in this chunk: none was in progress, or the one that was completed.
    if (this.#messageStart < 0 || completed) {
      this.#messageStart = now;
      if (this.#deadlineTimer === undefined) this.#armDeadline(this.#opts.messageTimeoutMs);
    }
  }

  #armDeadline(ms: number): void {
    this.#deadlineTimer = setTimeout(() => this.#onDeadline(), ms);
    this.#deadlineTimer.unref();
  }

  #onDeadline(): void {
    this.#deadlineTimer = undefined;
    if (this.#closed || this.#messageStart < 0) return;
    // The message in progress may have started after the timer was set (another one completed
    // meanwhile): wait for what is left of its own time.
    const left = this.#messageStart + this.#opts.messageTimeoutMs - this.#opts.now();
    if (left > 0) this.#armDeadline(left);
    else this.close('message-timeout');
  }

  /**
   * RFC 5626 4.4.1: a double-CRLF ping is answered with a single CRLF pong. The ping was read, so
   * the connection's idle timer (Node's socket timeout, reset by every read and write) and
   * lastActivity have restarted: a peer that pings keeps its connection, a registered flow
   * included (holdIdle), however long the idle timeout.
   *
   * One pong for all the pings of a chunk: a client sends one ping and waits for its pong, so
   * several at once are a flood, and pongs written back to back would reach the peer as
   * "\r\n\r\n", a ping of ours. A peer that pings without reading finds its pongs counted
   * against maxWriteBufferBytes like any other write: over it, the connection is closed.
   */
  #pong(): void {
    const n = this.#pings;
    this.#pings = 0;
    if (this.#closed) return;
    if (this.#socket.writableLength + PONG.length > this.#opts.maxWriteBufferBytes) {
      this.close('backlog');
      return;
    }
    this.#socket.write(PONG);
    for (let i = 0; i < n; i++) this.#opts.hooks.onPing(this);
  }

  /**
   * RFC 5626 4.4.1 as the client: sends a "\r\n\r\n" ping and resolves true when the pong comes
   * within `timeoutMs`, false when it does not (the connection is then closed, reason
   * 'keepalive': the flow failed, and the next request must open a new one) or the connection
   * closes first. One ping at a time: a second call while one waits shares its outcome.
   */
  ping(timeoutMs: number): Promise<boolean> {
    if (this.#closed) return Promise.resolve(false);
    const waiting = this.#pongWait;
    if (waiting !== undefined) return new Promise((resolve) => {
      const prev = waiting.resolve;
      waiting.resolve = (ok) => {
        prev(ok);
        resolve(ok);
      };
    });
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#pongWait = undefined;
        resolve(false);
        this.close('keepalive');
      }, timeoutMs);
      timer.unref();
      this.#pongWait = { resolve, timer };
      this.write(PING).catch(() => this.#settlePong(false));
    });
  }

  #ponged(): void {
    this.#settlePong(true);
  }

  #settlePong(ok: boolean): void {
    const w = this.#pongWait;
    if (w === undefined) return;
    this.#pongWait = undefined;
    clearTimeout(w.timer);
    w.resolve(ok);
  }

  /**
   * Writes bytes; resolves once they are handed to the kernel.
   * @throws SipTransportError SIP_TRANSPORT_SEND when the connection is closed or the write fails,
   *   or when the peer does not read and the backlog passes maxWriteBufferBytes (the connection
   *   is then closed: one slow reader must not hold our memory).
   */
  write(data: Buffer): Promise<void> {
    const endpoint = this.remote;
    if (this.#closed) return Promise.reject(new SipTransportError('SIP_TRANSPORT_SEND', `connection ${this.id} is closed`, { endpoint, connectionId: this.id }));
    if (this.#socket.writableLength + data.length > this.#opts.maxWriteBufferBytes) {
      this.close('backlog');
      return Promise.reject(new SipTransportError('SIP_TRANSPORT_SEND', `connection ${this.id}: write backlog over ${this.#opts.maxWriteBufferBytes} bytes`, { endpoint, connectionId: this.id }));
    }
    this.lastActivity = this.#opts.now();
    return new Promise((resolve, reject) => {
      this.#socket.write(data, (err) => {
        if (err) reject(new SipTransportError('SIP_TRANSPORT_SEND', `write on connection ${this.id} failed: ${err.message}`, { cause: err, endpoint, connectionId: this.id }));
        else resolve();
      });
    });
  }

  /**
   * Stops using the connection: at once (destroy), or after flushing what was written
   * (`graceful`, used after a framing error so the 400 gets out). Idempotent.
   */
  close(reason: ConnectionCloseReason, graceful = false): void {
    if (this.#closed) return;
    if (graceful) {
      this.#socket.end();
      this.#graceTimer = setTimeout(() => this.#socket.destroy(), GRACEFUL_CLOSE_MS);
      this.#graceTimer.unref();
    } else {
      this.#socket.destroy();
    }
    this.#finish(reason);
  }

  #finish(reason: ConnectionCloseReason): void {
    if (this.#closed) {
      if (this.#graceTimer && this.#socket.destroyed) clearTimeout(this.#graceTimer);
      return;
    }
    this.#closed = true;
    if (this.#deadlineTimer !== undefined) clearTimeout(this.#deadlineTimer);
    this.#settlePong(false);
    this.#opts.hooks.onClose(this, reason, this.#error);
  }
}

// --- listening ----------------------------------------------------------------------------------

export interface StreamServerOptions {
  protocol: StreamProtocol;
  address: string;
  port: number;
  tls?: { cert: string | Buffer; key: string | Buffer };
  advertise?: string;
  advertisePort?: number;
  /**
   * A TLS handshake not finished this long after the TCP accept is dropped (Node's
   * handshakeTimeout; the socket is destroyed in the tlsClientError listener, see below).
   */
  handshakeTimeoutMs: number;
  /** Hard cap of sockets the server holds, handshakes in progress included. */
  maxSockets: number;
  /**
   * Called with each accepted TCP socket before anything else is done with it (before the TLS
   * handshake): false destroys it at once (the per-source limit).
   */
  admit(socket: Socket): boolean;
  onSocket(socket: Socket | TLSSocket, server: StreamServer): void;
  onError(err: Error, server: StreamServer): void;
  /** A handshake failed or timed out (the socket is destroyed already); `source`: the peer's address ('' if unknown). */
  onTlsClientError(err: Error, server: StreamServer, source: string): void;
}

/** A TCP or TLS listening socket. */
export class StreamServer {
  readonly protocol: StreamProtocol;
  readonly family: IpFamily;
  readonly #opts: StreamServerOptions;
  readonly #server: Server;
  /** Every accepted socket until it closes, TLS handshakes in progress included (see close()). */
  readonly #sockets = new Set<Socket>();
  #bound: Endpoint | undefined;
  #listening = false;

  /** @throws SipTransportError SIP_TRANSPORT_CONFIG for TLS without cert and key */
  constructor(o: StreamServerOptions) {
    this.#opts = o;
    this.protocol = o.protocol;
    this.family = ipFamily(o.address) === 6 ? 6 : 4;
    if (o.protocol === 'tls') {
      if (!o.tls?.cert || !o.tls.key) throw new SipTransportError('SIP_TRANSPORT_CONFIG', `TLS listener ${formatEndpoint(o)} needs tls.cert and tls.key`);
      const server = createTlsServer({ cert: o.tls.cert, key: o.tls.key, handshakeTimeout: o.handshakeTimeoutMs });
      server.on('secureConnection', (socket) => o.onSocket(socket, this));
      // A failed handshake (a port scanner, a client that rejects our certificate) or one not
      // finished within handshakeTimeoutMs. Node destroys the socket after an OpenSSL error,
      // but on ERR_TLS_HANDSHAKE_TIMEOUT it only emits this event and leaves the socket open:
      // a peer that sent nothing, part of a ClientHello, or a ClientHello and then nothing
      // would hold its slot (and its source's) forever. Destroying it here covers every case.
      server.on('tlsClientError', (err, socket) => {
        const source = unmapIPv4(socket.remoteAddress ?? ''); // gone once destroyed
        socket.destroy();
        o.onTlsClientError(err, this, source);
      });
      this.#server = server;
    } else {
      this.#server = createNetServer();
    }
    this.#server.maxConnections = o.maxSockets;
    // 'connection' carries the raw TCP socket, for TLS servers too, whose own listener starts
    // the handshake: it runs only for sockets admitted here, so a refused socket costs no
    // handshake and is no handshake failure.
    const tlsListeners = this.#server.listeners('connection') as ((socket: Socket) => void)[];
    this.#server.removeAllListeners('connection');
    this.#server.on('connection', (socket: Socket) => {
      if (!o.admit(socket)) {
        socket.on('error', noop);
        socket.destroy();
        return;
      }
      this.#sockets.add(socket);
      socket.once('close', () => this.#sockets.delete(socket));
      if (o.protocol === 'tls') for (const l of tlsListeners) l.call(this.#server, socket);
      else o.onSocket(socket, this);
    });
    this.#server.on('error', (err) => {
      if (this.#listening) o.onError(err, this);
    });
  }

  get bound(): Endpoint {
    if (!this.#bound) throw new SipTransportError('SIP_TRANSPORT_CLOSED', `${this.protocol.toUpperCase()} listener not listening`);
    return this.#bound;
  }

  /** Via sent-by / Inbound.local: the advertised host and port, else the bound ones. */
  advertised(connectionLocalAddress?: string): Endpoint {
    const b = this.bound;
    let host = this.#opts.advertise ?? b.address;
    if (this.#opts.advertise === undefined && this.wildcard) {
      // On a wildcard listener the connection knows which local address the peer reached.
      host = connectionLocalAddress && !isUnspecified(connectionLocalAddress) ? connectionLocalAddress : defaultInterfaceAddress(this.family);
    }
    return { protocol: this.protocol, address: host, port: this.#opts.advertisePort ?? b.port };
  }

  get wildcard(): boolean {
    return isUnspecified(this.#opts.address);
  }

  /** @throws SipTransportError SIP_TRANSPORT_BIND */
  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => {
        reject(new SipTransportError('SIP_TRANSPORT_BIND', `cannot listen on ${this.protocol.toUpperCase()} ${formatEndpoint(this.#opts)}: ${err.message}`, { cause: err }));
      };
      this.#server.once('error', onError);
      this.#server.listen({ host: this.#opts.address, port: this.#opts.port, exclusive: true, ipv6Only: false }, () => {
        this.#server.off('error', onError);
        this.#listening = true;
        const a = this.#server.address();
        const port = a !== null && typeof a === 'object' ? a.port : this.#opts.port;
        const address = a !== null && typeof a === 'object' ? a.address : this.#opts.address;
        this.#bound = { protocol: this.protocol, address, port };
        resolve();
      });
    });
  }

  /**
   * Stops accepting and destroys what the pool does not own yet (TLS handshakes in progress,
   * which would otherwise hold server.close() for up to the handshake timeout).
   */
  close(): Promise<void> {
    if (!this.#listening) return Promise.resolve();
    this.#listening = false;
    return new Promise((resolve) => {
      this.#server.close(() => resolve());
      for (const s of this.#sockets) s.destroy();
    });
  }
}

// --- connecting ---------------------------------------------------------------------------------

export interface ConnectOptions {
  protocol: StreamProtocol;
  /** An IP literal. */
  address: string;
  port: number;
  /** TLS: the name to send in SNI and to check the certificate against (not an IP). */
  servername?: string;
  tls?: ConnectionOptions;
  timeoutMs: number;
}

/**
 * Opens a TCP connection, or a TLS one with the handshake done and the certificate checked.
 * @throws SipTransportError SIP_TRANSPORT_CONNECT (refused, timeout, handshake or certificate failure)
 */
export function connectStream(o: ConnectOptions): Promise<Socket | TLSSocket> {
  const endpoint: Endpoint = { protocol: o.protocol, address: o.address, port: o.port };
  return new Promise((resolve, reject) => {
    let socket: Socket | TLSSocket;
    const ready = o.protocol === 'tls' ? 'secureConnect' : 'connect';
    if (o.protocol === 'tls') {
      // A name: SNI, and the certificate checked against it by RFC 5922 (the SIP domain, not the
      // address we connect to). An IP literal only: node's check against the IP SANs.
      const name = o.servername !== undefined && ipFamily(o.servername) === 0 ? o.servername : undefined;
      socket = tlsConnect({
        ...o.tls,
        host: o.address,
        port: o.port,
        ...(name !== undefined ? { servername: name, checkServerIdentity: (_host: string, cert: PeerCertificate) => checkSipServerIdentity(name, cert) } : {}),
      });
    } else {
      socket = netConnect({ host: o.address, port: o.port });
    }
    const timer = setTimeout(() => fail(new Error(`timed out after ${o.timeoutMs} ms`)), o.timeoutMs);
    const fail = (err: Error): void => {
      clearTimeout(timer);
      socket.off(ready, ok);
      socket.destroy();
      reject(new SipTransportError('SIP_TRANSPORT_CONNECT', `cannot connect ${o.protocol.toUpperCase()} to ${formatEndpoint(o)}: ${err.message}`, { cause: err, endpoint }));
    };
    const ok = (): void => {
      clearTimeout(timer);
      socket.off('error', fail);
      resolve(socket);
    };
    socket.once('error', fail);
    socket.once(ready, ok);
  });
}

// --- the pool -----------------------------------------------------------------------------------

/**
 * Open connections by id and by remote endpoint (protocol, address, port), for reuse (RFC 3261
 * 18.1.1: "if a connection is open to the destination, it SHOULD be used"), and the connects in
 * progress, so that two requests to one destination share one connection.
 */
export class ConnectionPool {
  readonly #byId = new Map<string, StreamConnection>();
  readonly #byRemote = new Map<string, StreamConnection>();
  readonly pending = new Map<string, Promise<StreamConnection>>();

  get size(): number {
    return this.#byId.size;
  }

  get(id: string): StreamConnection | undefined {
    return this.#byId.get(id);
  }

  find(key: string): StreamConnection | undefined {
    return this.#byRemote.get(key);
  }

  add(conn: StreamConnection, key: string): void {
    this.#byId.set(conn.id, conn);
    this.#byRemote.set(key, conn);
  }

  remove(conn: StreamConnection, key: string): void {
    this.#byId.delete(conn.id);
    if (this.#byRemote.get(key) === conn) this.#byRemote.delete(key);
  }

  /**
   * The connection to close to make room under maxConnections: the least recently active of
   * those that are not `established` (accepted, no message parsed yet: half-open or silent
   * connections, slowloris), and only when there is none, the least recently active of all.
   * So a flood of connections that never complete a message cannot push out a PBX's
   * persistent connection, however long ago its last OPTIONS was.
   */
  evictionCandidate(): StreamConnection | undefined {
    let fresh: StreamConnection | undefined;
    let lru: StreamConnection | undefined;
    for (const c of this.#byId.values()) {
      if (!c.established) {
        if (!fresh || c.lastActivity < fresh.lastActivity) fresh = c;
      } else if (!fresh && (!lru || c.lastActivity < lru.lastActivity)) {
        lru = c;
      }
    }
    return fresh ?? lru;
  }

  all(): StreamConnection[] {
    return [...this.#byId.values()];
  }
}

function noop(): void {}
