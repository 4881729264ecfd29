/**
 * Bounds of the HTTP server against slow and numerous clients (docs/http-limits.md):
 *
 * - The whole request (header section and body) must arrive within http.request_timeout_ms of its
 *   first byte: Node's own requestTimeout / headersTimeout, checked every
 *   connectionsCheckingInterval. Node reports the expiry as a clientError, answered here with
 *   408 and the API's `{ "error" }` body, then the connection is closed. WebSockets are not
 *   concerned: once upgraded, a connection has no HTTP request in progress.
 * - At most http.max_connections_per_source connections per source address, counted at accept:
 *   one over it is answered 429 `{ "error" }` and closed before Node's HTTP parser sees it.
 */
import { STATUS_CODES, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyHttpOptions } from 'fastify';
import { Counter, type Registry } from 'prom-client';
import type { Logger } from '../log.ts';

/** How long a refused connection may take to read its 429 before it is destroyed. */
const REFUSAL_GRACE_MS = 1000;
/** One log line per kind per this interval, whatever the number of sources. */
const LOG_INTERVAL_MS = 60_000;

/**
 * The Fastify options that bound a request in time. Fastify's own requestTimeout defaults to 0
 * (none, overriding Node's 300 s) and it does not expose headersTimeout: both go to Node's
 * server, and the checking interval (Node's default 30 s, which made the deadlines late by up
 * to that much) is a tenth of the deadline, within 100 ms..1 s.
 */
export function requestTimeoutOptions(timeoutMs: number): Pick<FastifyHttpOptions<Server>, 'requestTimeout' | 'http' | 'clientErrorHandler'> {
  return {
    requestTimeout: timeoutMs,
    http: {
      requestTimeout: timeoutMs,
      headersTimeout: timeoutMs,
      connectionsCheckingInterval: Math.min(1000, Math.max(100, Math.round(timeoutMs / 10))),
    },
    clientErrorHandler: (err: NodeJS.ErrnoException, socket: Duplex) => answerClientError(err, socket, timeoutMs),
  };
}

/**
 * Node's clientError: a request timed out (408), a header section over Node's cap (431), or
 * bytes that are not HTTP (400). Answered with the API's error body, then closed (the stream's
 * framing cannot be trusted, and a timed-out client is not waited for).
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex, timeoutMs: number): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  let status = 400;
  let message = 'malformed HTTP request';
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    status = 408;
    message = `request not received in full within ${timeoutMs} ms (http.request_timeout_ms)`;
  } else if (err.code === 'HPE_HEADER_OVERFLOW') {
    status = 431;
    message = 'request header section too large';
  }
  if (socket.writable) socket.write(rawResponse(status, message));
  socket.destroy();
}

function rawResponse(status: number, message: string, extraHeaders = ''): string {
  const body = JSON.stringify({ error: message });
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extraHeaders}Connection: close\r\n\r\n${body}`;
}

export interface ConnectionLimitOptions {
  /** Most connections per source address; 0: no limit. */
  maxPerSource: number;
  logger: Logger;
  registry: Registry;
}

/**
 * Counts the server's connections per source address and refuses those over the limit. Node's
 * own 'connection' listeners (the HTTP parser's) run only for admitted sockets: a refused one
 * costs no parser and is never a request. A connection from this host to the address it reached
 * (remote address = local address: the bridge's own voice sockets, a reverse proxy on the same
 * host) is not counted: those are many clients behind one address, bounded elsewhere
 * (bridge.max_calls, the proxy's own limits).
 * Call after every plugin is registered (they may listen to 'connection' too).
 */
export function installConnectionLimit(server: Server, o: ConnectionLimitOptions): void {
  const refused = new Counter({
    name: 'callbridge_http_connections_refused_total',
    help: 'HTTP connections answered 429 and closed at accept: their source address already held http.max_connections_per_source.',
    registers: [o.registry],
  });
  if (o.maxPerSource <= 0) return;
  const perSource = new Map<string, number>();
  let lastLog = -Infinity;
  let suppressed = 0;
  const inner = server.listeners('connection') as ((socket: Socket) => void)[];
  server.removeAllListeners('connection');
  server.on('connection', (socket: Socket) => {
    const remote = socket.remoteAddress;
    if (remote === undefined || remote === socket.localAddress) {
      for (const l of inner) l.call(server, socket);
      return;
    }
    const source = unmapIPv4(remote);
    const n = perSource.get(source) ?? 0;
    if (n >= o.maxPerSource) {
      refused.inc();
      const now = Date.now();
      if (now - lastLog >= LOG_INTERVAL_MS) {
        o.logger.warn({ source, limit: o.maxPerSource, ...(suppressed > 0 ? { suppressed } : {}) }, 'HTTP connection refused: too many connections from one source');
        lastLog = now;
        suppressed = 0;
      } else {
        suppressed++;
      }
      refuse(socket, o.maxPerSource);
      return;
    }
    perSource.set(source, n + 1);
    socket.once('close', () => {
      const m = (perSource.get(source) ?? 1) - 1;
      if (m > 0) perSource.set(source, m);
      else perSource.delete(source);
    });
    for (const l of inner) l.call(server, socket);
  });
}

/**
 * 429 with the API's error body, written at once (the client reads it as the answer to the
 * request it sends or is sending), then a half close. What the client sends meanwhile is read and
 * dropped, so that closing does not reset the connection under the answer; destroyed after a
 * grace period whatever the client does.
 */
/** An IPv4 peer of a dual-stack listener ("::ffff:192.0.2.1") as the IPv4 address it is. */
function unmapIPv4(address: string): string {
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
}

function refuse(socket: Socket, limit: number): void {
  socket.on('error', () => {});
  socket.resume();
  socket.end(rawResponse(429, `too many connections from your address (limit ${limit}, http.max_connections_per_source)`, 'Retry-After: 1\r\n'));
  setTimeout(() => socket.destroy(), REFUSAL_GRACE_MS).unref();
}
