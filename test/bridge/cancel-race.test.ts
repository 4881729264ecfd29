/**
 * A CANCEL that races the answer: the caller gives up while the bridge's socket to the voice
 * session is still connecting. The call ends (487 to the INVITE), the bridge closes the socket
 * it was opening, and `ws` reports that close as an error. That is a normal race, not a failure
 * of the voice server, so the daemon logs it at info level and says what happened; no line of
 * the call is at error level.
 *
 * Real sockets throughout: a raw SIP UAC on loopback, the daemon (bridge.upstream_url pointing at
 * a small HTTP server of the test), and that server, which issues a session token and then holds
 * the WebSocket upgrade unanswered. So the CANCEL is sent exactly while the session is being
 * opened, every run, with the socket on the main thread and in a media worker.
 */
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startLoggedDaemon, type LoggedDaemon } from '../helpers/logged-daemon.ts';
import { startRawSipPeer, type RawSipPeer } from '../helpers/raw-sip.ts';

const NUMBER = '+15550408100';
const INFO = 30;
const ERROR = 50;
const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function until<T>(what: string, check: () => T | undefined | false, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await delay(10);
  }
}

/** An upstream voice server that issues tokens and never finishes a WebSocket handshake. */
interface HangingUpstream {
  url: string;
  /** Upgrade requests received (each held open). */
  upgrades: Socket[];
  close(): Promise<void>;
}

async function startHangingUpstream(): Promise<HangingUpstream> {
  const upgrades: Socket[] = [];
  const server: Server = createServer((req, res) => {
    if (req.method === 'POST' && req.url === '/v1/session-token') {
      req.resume();
      // Only the sub claim is read by the bridge (unverified): header.payload.signature.
      const part = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
      const token = `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ sub: randomUUID() })}.c2ln`;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ token }));
      return;
    }
    res.writeHead(404).end();
  });
  server.on('upgrade', (_req, socket: Socket) => {
    upgrades.push(socket);
    socket.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    upgrades,
    close: () =>
      new Promise<void>((r) => {
        for (const s of upgrades) s.destroy();
        server.close(() => r());
      }),
  };
}

let d: LoggedDaemon | undefined;
let peer: RawSipPeer | undefined;
let upstream: HangingUpstream | undefined;
afterEach(async () => {
  await peer?.close();
  await d?.close();
  await upstream?.close();
  peer = d = upstream = undefined;
});

describe('a CANCEL while the voice session is being opened', () => {
  it.each([
    ['on the main thread', 0],
    ['in a media worker', 1],
  ])('ends the call with 487 and logs the abandoned connection at info level, not error (socket %s)', async (_where, mediaThreads) => {
    upstream = await startHangingUpstream();
    d = await startLoggedDaemon({ rtp: { media_threads: mediaThreads }, bridge: { upstream_url: upstream.url, upstream_api_key: 'cbk_test_upstream_key' } });
    const agent = (await d.api('POST', '/v1/agents', { name: 'Desk', first_message: 'Hello.' })).body;
    const trunk = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
    expect((await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER })).status).toBe(201);

    peer = await startRawSipPeer('127.0.0.1');
    const sipPort = d.sipPort;
    const callId = peer.invite(sipPort, { user: NUMBER });
    // The session exists upstream and the bridge's socket to it is connecting: the caller gives up now.
    await until('the bridge to open its voice session socket', () => upstream!.upgrades.length === 1);
    await until('a provisional response', () => peer!.for(callId).some((r) => r.status < 200));
    peer.cancel(sipPort, callId);
    const final = await until('the final response to the INVITE', () => peer!.for(callId).find((r) => r.status >= 200 && r.get('cseq')?.endsWith('INVITE')));
    expect(final.status).toBe(487);
    peer.ackFailure(sipPort, callId);
    await until('the call to end in the bridge', () => d!.daemon.bridge.active === 0);

    const line = await until('the line about the socket the bridge closed', () => d!.lines.find((l) => /voice session (socket|connection)/.test(l.msg)));
    expect(line.msg).toBe('voice session connection abandoned: the call ended while its session was being opened');
    expect(line.level).toBe(INFO);
    expect(String(line.why)).toMatch(/^caller side ended/);
    await delay(200); // anything logged a moment later would show up here
    expect(d.lines.filter((l) => l.level >= ERROR).map((l) => l.msg)).toEqual([]);
  });
});
