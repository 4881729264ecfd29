/**
 * The HTTP server's bounds against slow and numerous clients, on a real daemon (HTTP on
 * 127.0.0.1, an OS-chosen port) with shortened settings: http.request_timeout_ms 1000 and
 * http.max_connections_per_source 3. Clients are raw TCP sockets writing HTTP/1.1 by hand (a
 * body can be trickled, and what comes back is read byte for byte) bound to 127.0.0.x source
 * addresses to look like different hosts (Linux routes all of 127.0.0.0/8 to loopback); the
 * WebSocket is a real voice session on /v1/connection.
 */
import { once } from 'node:events';
import { get as httpGet } from 'node:http';
import { connect as netConnect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { connect as wsConnect, issue, scriptedRuntime, wsUrl } from '../session/helpers.ts';

const REQUEST_TIMEOUT_MS = 1000;
const PER_SOURCE = 3;

let td: TestDaemon;
let port: number;
const rt = scriptedRuntime();
const sockets: Socket[] = [];

beforeAll(async () => {
  td = await startTestDaemon({ http: { host: '127.0.0.1', port: 0, request_timeout_ms: REQUEST_TIMEOUT_MS, max_connections_per_source: PER_SOURCE } }, undefined, { runtimeFactory: (ctx, io) => rt.factory(ctx, io) });
  port = Number(new URL(td.url).port);
});

afterAll(async () => {
  for (const s of sockets) s.destroy();
  await td?.close();
});

const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

interface RawClient {
  socket: Socket;
  /** Everything received so far. */
  text(): string;
  /** Resolves with the time the connection closed (either side). */
  closed: Promise<number>;
  isClosed(): boolean;
}

async function rawClient(localAddress: string): Promise<RawClient> {
  const socket = netConnect({ host: '127.0.0.1', port, localAddress });
  sockets.push(socket);
  socket.on('error', () => {});
  let received = '';
  let isClosed = false;
  socket.on('data', (d: Buffer) => (received += d.toString('utf8')));
  const closed = once(socket, 'close').then(() => {
    isClosed = true;
    return Date.now();
  });
  await once(socket, 'connect');
  return { socket, text: () => received, closed, isClosed: () => isClosed };
}

/** Status and JSON body of the first response in `text`. */
function parseResponse(text: string): { status: number; body: any; headers: string } {
  const end = text.indexOf('\r\n\r\n');
  const head = text.slice(0, end);
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]);
  const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1] ?? '0');
  const rest = text.slice(end + 4, end + 4 + length);
  return { status, headers: head, body: rest ? JSON.parse(rest) : undefined };
}

async function until(cond: () => boolean, what: string, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await delay(5);
  }
}

/** One GET /healthz on the connection, answered; the connection stays open (keep-alive). */
async function healthz(c: RawClient): Promise<number> {
  const before = c.text().length;
  c.socket.write('GET /healthz HTTP/1.1\r\nHost: callbridge\r\n\r\n');
  await until(() => c.text().length > before && c.text().slice(before).includes('\r\n\r\n'), 'the /healthz answer');
  return parseResponse(c.text().slice(before)).status;
}

describe('HTTP: slow requests', () => {
  it('a body trickled slower than http.request_timeout_ms is answered 408 { error } and the connection closed', async () => {
    const c = await rawClient('127.0.0.2');
    const body = JSON.stringify({ name: 'Trickled agent with a long enough name to take a while' });
    const start = Date.now();
    c.socket.write(`POST /v1/agents HTTP/1.1\r\nHost: callbridge\r\nAuthorization: Bearer ${td.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`);
    // A byte every 50 ms: always arriving, never the whole body within the deadline.
    let sent = 0;
    while (!c.isClosed() && sent < body.length - 1 && Date.now() - start < 5000) {
      c.socket.write(body[sent++]!);
      await delay(50);
    }
    const closedAt = await Promise.race([c.closed, delay(500).then(() => undefined)]);
    expect(closedAt, 'the trickling connection is still open').toBeDefined();
    expect(closedAt! - start).toBeGreaterThanOrEqual(REQUEST_TIMEOUT_MS - 50);
    expect(sent).toBeLessThan(body.length - 1); // cut while bytes were still arriving
    const res = parseResponse(c.text());
    expect(res.status).toBe(408);
    expect(res.body).toEqual({ error: expect.stringContaining('http.request_timeout_ms') });
    expect(Object.keys(res.body)).toEqual(['error']);
    // Nothing was created from the half body.
    expect((await td.api('GET', '/v1/agents')).body).toEqual([]);
  });

  it('a request sent in pieces within the deadline, and requests after it on the same connection, are served', async () => {
    const c = await rawClient('127.0.0.2');
    const body = JSON.stringify({ name: 'Agent sent in pieces' });
    const head = `POST /v1/agents HTTP/1.1\r\nHost: callbridge\r\nAuthorization: Bearer ${td.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
    for (const part of [head, body.slice(0, 10), body.slice(10)]) {
      c.socket.write(part);
      await delay(REQUEST_TIMEOUT_MS / 4);
    }
    await until(() => c.text().includes('\r\n\r\n'), 'the POST answer');
    expect(parseResponse(c.text()).status).toBe(201);
    // The deadline is per request: a keep-alive connection idle past it is still served.
    await delay(REQUEST_TIMEOUT_MS * 1.5);
    expect(c.isClosed()).toBe(false);
    expect(await healthz(c)).toBe(200);
    c.socket.destroy();
  });

  it('a voice WebSocket open for longer than the deadline is not cut', async () => {
    const agent = (await td.api('POST', '/v1/agents', { name: 'Socket agent' })).body;
    const version = (await td.api('POST', `/v1/agents/${agent.id}/versions`, { tag: 'v1' })).body;
    expect((await td.api('POST', `/v1/agents/${agent.id}/versions/${version.id}/publish`)).status).toBe(200);
    const t = await issue(td, { agent_id: agent.id });
    const ws = wsConnect(wsUrl(td, t.token));
    await ws.opened;
    const s = await rt.session(t.id);
    expect(await ws.message(0)).toEqual({ type: 'session_started', data: { id: t.id } });
    await delay(REQUEST_TIMEOUT_MS * 2.5);
    // Still open both ways: the server's runtime reaches the client.
    s.io.send({ type: 'response_text', data: { turn_id: 't1', text: 'still here', is_final: true } });
    expect(await ws.message(1)).toEqual({ type: 'response_text', data: { turn_id: 't1', text: 'still here', is_final: true } });
    expect(ws.ws.readyState).toBe(ws.ws.OPEN);
    ws.ws.close();
    await ws.closed;
  });
});

describe('HTTP: connections per source address', () => {
  it(`holds ${PER_SOURCE} connections of one source; the next is answered 429 { error } and closed; a slot freed is usable again`, async () => {
    const held: RawClient[] = [];
    for (let i = 0; i < PER_SOURCE; i++) {
      const c = await rawClient('127.0.0.3');
      expect(await healthz(c)).toBe(200);
      held.push(c);
    }
    const over = await rawClient('127.0.0.3');
    over.socket.write('GET /healthz HTTP/1.1\r\nHost: callbridge\r\n\r\n');
    const closedAt = await Promise.race([over.closed, delay(3000).then(() => undefined)]);
    expect(closedAt, 'the connection over the limit was kept').toBeDefined();
    const res = parseResponse(over.text());
    expect(res.status).toBe(429);
    expect(res.body).toEqual({ error: expect.stringContaining(`limit ${PER_SOURCE}`) });
    // node:http reads it as the answer to the request it sends.
    const viaClient = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = httpGet({ host: '127.0.0.1', port, path: '/healthz', localAddress: '127.0.0.3', agent: false }, (r) => {
        let text = '';
        r.setEncoding('utf8');
        r.on('data', (d: string) => (text += d));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, body: text }));
      });
      req.on('error', reject);
    });
    expect(viaClient.status).toBe(429);
    expect(JSON.parse(viaClient.body)).toEqual({ error: expect.stringContaining(`limit ${PER_SOURCE}`) });
    // The held connections are untouched, and another source is served.
    for (const c of held) expect(await healthz(c)).toBe(200);
    const other = await rawClient('127.0.0.4');
    expect(await healthz(other)).toBe(200);
    const metrics = await (await fetch(`${td.url}/metrics`)).text();
    expect(metrics).toMatch(/^callbridge_http_connections_refused_total 2$/m);

    // One closes: the source may open another.
    const gone = held.pop()!;
    gone.socket.destroy();
    await gone.closed;
    await delay(50);
    const again = await rawClient('127.0.0.3');
    expect(await healthz(again)).toBe(200);
    for (const c of [...held, other, again]) c.socket.destroy();
  });
});
