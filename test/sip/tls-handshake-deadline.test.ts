/**
 * Stalled TLS handshakes against a real daemon (SIP over TLS on 127.0.0.1, an OS-chosen port, a
 * self-signed certificate made by openssl for the run). A socket that connects to the TLS port
 * and then sends nothing, 30 bytes of a ClientHello, or a whole ClientHello and then nothing is
 * closed by the daemon once sip.tls_handshake_timeout_ms has passed since the accept (shortened
 * here to 400 ms); until then it holds one of its source's sip.tcp_max_connections_per_source
 * slots, so a real client from that source is refused while the slots are full and served once
 * the daemon has closed them. The closes are counted (callbridge_sip_tcp_connections_closed_total
 * reason tls_handshake_timeout) and logged once per source, not once per socket.
 *
 * Linux routes all of 127.0.0.0/8 to loopback: the stalled peers bind 127.0.0.21 to be one host.
 */
import { execFileSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect as netConnect, createServer as createNetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseMessage, SipStreamFramer, type SipResponse } from '../../src/sip/message/index.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

const HANDSHAKE_TIMEOUT_MS = 400;
const PER_SOURCE = 3;
const SOURCE = '127.0.0.21';

function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
const HAS_OPENSSL = hasOpenssl();

let td: TestDaemon;
let dir: string;
let tlsPort: number;
const logLines: string[] = [];

beforeAll(async () => {
  if (!HAS_OPENSSL) return;
  dir = mkdtempSync(join(tmpdir(), 'callbridge-tls-deadline-'));
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost', '-days', '1', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'), '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1'],
    { stdio: 'ignore' },
  );
  td = await startTestDaemon(
    {
      sip: {
        tls_cert: join(dir, 'cert.pem'),
        tls_key: join(dir, 'key.pem'),
        tls_port: 0,
        tls_handshake_timeout_ms: HANDSHAKE_TIMEOUT_MS,
        tcp_max_connections_per_source: PER_SOURCE,
      },
    },
    undefined,
    {},
    logLines,
  );
  tlsPort = td.daemon.sip!.ua.endpoints.find((e) => e.protocol === 'tls')!.port;
});

afterAll(async () => {
  await td?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The first bytes a real node:tls client sends: its ClientHello (caught by a plain TCP server). */
async function clientHello(): Promise<Buffer> {
  const catcher = createNetServer();
  catcher.listen(0, '127.0.0.1');
  await once(catcher, 'listening');
  const got = new Promise<Buffer>((resolve) =>
    catcher.once('connection', (s) =>
      s.once('data', (d: Buffer) => {
        resolve(d);
        s.destroy();
      }),
    ),
  );
  const client = tlsConnect({ host: '127.0.0.1', port: (catcher.address() as { port: number }).port, rejectUnauthorized: false });
  client.on('error', () => {});
  const hello = await got;
  client.destroy();
  catcher.close();
  return hello;
}

/** A raw TCP socket from SOURCE to the TLS port that writes `bytes` (if any) and then stays silent. */
async function stalled(bytes?: Buffer): Promise<{ socket: Socket; closed: Promise<number> }> {
  const socket = netConnect({ host: '127.0.0.1', port: tlsPort, localAddress: SOURCE });
  socket.on('error', () => {});
  socket.on('data', () => {}); // the ServerHello of the whole-ClientHello peer: read and ignored
  const closed = once(socket, 'close').then(() => Date.now());
  await once(socket, 'connect');
  if (bytes) socket.write(bytes);
  return { socket, closed };
}

/** A real TLS client from SOURCE: resolves 'connected' after its handshake, 'refused' when the daemon closes it first. */
function realClient(): Promise<{ outcome: 'connected' | 'refused'; socket: TLSSocket }> {
  const socket = tlsConnect({ socket: netConnect({ host: '127.0.0.1', port: tlsPort, localAddress: SOURCE }), host: '127.0.0.1', rejectUnauthorized: false });
  return new Promise((resolve) => {
    socket.once('secureConnect', () => resolve({ outcome: 'connected', socket }));
    socket.once('error', () => resolve({ outcome: 'refused', socket }));
    socket.once('close', () => resolve({ outcome: 'refused', socket }));
  });
}

function optionsRequest(port: number): string {
  return (
    `OPTIONS sip:probe@127.0.0.1:${tlsPort} SIP/2.0\r\n` +
    `Via: SIP/2.0/TLS ${SOURCE}:${port};branch=z9hG4bKtlsdeadline1;rport\r\n` +
    'Max-Forwards: 70\r\n' +
    'From: <sip:probe@127.0.0.1>;tag=tlsdeadline\r\n' +
    `To: <sip:callbridge@127.0.0.1:${tlsPort}>\r\n` +
    'Call-ID: tls-deadline-1@probe\r\n' +
    'CSeq: 1 OPTIONS\r\n' +
    'Content-Length: 0\r\n\r\n'
  );
}

async function nextResponse(socket: TLSSocket, ms = 3000): Promise<SipResponse> {
  const framer = new SipStreamFramer();
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('no SIP response in time')), ms);
    socket.on('data', (chunk: Buffer) => {
      for (const m of framer.push(chunk)) {
        const msg = parseMessage(m);
        if (!msg.isRequest) {
          clearTimeout(t);
          resolve(msg);
        }
      }
    });
  });
}

async function metric(name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${td.url}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

describe.skipIf(!HAS_OPENSSL)('SIP over TLS: handshakes not finished in time are closed', () => {
  it('closes a silent socket, a partial ClientHello and a whole ClientHello left unanswered; the source is then served', async () => {
    const hello = await clientHello();
    expect(hello.length).toBeGreaterThan(30);
    const t0 = Date.now();
    const peers = [await stalled(), await stalled(hello.subarray(0, 30)), await stalled(hello)];

    // The three hold the source's slots: a real client from it is refused meanwhile.
    const early = await realClient();
    early.socket.destroy();
    expect(early.outcome).toBe('refused');

    // The daemon closes all three, not before the deadline (closing them early would not
    // be the deadline at work). Without the deadline they stay open and this times out.
    const closedAt = await Promise.all(peers.map((p) => p.closed));
    for (const at of closedAt) expect(at - t0).toBeGreaterThanOrEqual(HANDSHAKE_TIMEOUT_MS - 50);
    const stats = td.daemon.sip!.ua.transport.stats;
    expect(stats.tlsHandshakeTimeouts).toBe(3);
    expect(await metric('callbridge_sip_tcp_connections_closed_total', 'reason="tls_handshake_timeout"')).toBe(3);
    // Logged once for the source, not once per socket.
    const lines = logLines.filter((l) => l.includes('TLS handshake not finished in time'));
    expect(lines).toHaveLength(1);
    expect(JSON.parse(lines[0]!)).toMatchObject({ source: SOURCE, timeoutMs: HANDSHAKE_TIMEOUT_MS });

    // The slots are free again: a real TLS client from the same source gets an answer.
    const late = await realClient();
    expect(late.outcome).toBe('connected');
    const answer = nextResponse(late.socket);
    late.socket.write(optionsRequest(late.socket.localPort!));
    expect((await answer).status).toBe(200);
    late.socket.destroy();
  }, 15_000);
});
