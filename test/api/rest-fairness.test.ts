/**
 * REST load must not hold SIP signaling (REST saturation once stalled SIP OPTIONS for a second): a burst of 200 concurrent
 * `GET /v1/agents?limit=100` (100 agents, a few ms of work each) is written on 200 open
 * keep-alive connections, and a raw UDP OPTIONS right after it. The daemon runs REST work in
 * turns of http.fair_share_ms (src/api/fair-share.ts) and reads the network between turns, so
 * the OPTIONS is answered while most of the burst still waits. Before, the event loop ran every
 * request of the burst to the end before it read the datagram.
 *
 * An ordering assertion, not a timed one (performance is measured in bench/signaling).
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startRawSipPeer, type RawSipPeer } from '../helpers/raw-sip.ts';

const AGENTS = 100;
const BURST = 200;

function get(agent: http.Agent, url: URL, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get({ agent, host: url.hostname, port: url.port, path, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.once('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.once('error', reject);
    });
    req.once('error', reject);
  });
}

function options(peer: RawSipPeer, sipPort: number, callId: string): void {
  const uri = `sip:probe@127.0.0.1:${sipPort}`;
  peer.socket.send(
    [
      `OPTIONS ${uri} SIP/2.0`,
      `Via: SIP/2.0/UDP 127.0.0.1:${peer.port};rport;branch=z9hG4bK${callId}`,
      `From: <sip:test@127.0.0.1:${peer.port}>;tag=t1`,
      `To: <${uri}>`,
      `Call-ID: ${callId}`,
      'CSeq: 1 OPTIONS',
      'Max-Forwards: 70',
      'Content-Length: 0',
      '',
      '',
    ].join('\r\n'),
    sipPort,
    '127.0.0.1',
  );
}

describe('REST load and SIP signaling share the main thread fairly', () => {
  let d: TestDaemon;
  let peer: RawSipPeer;
  const agent = new http.Agent({ keepAlive: true, maxSockets: BURST });

  beforeAll(async () => {
    d = await startTestDaemon();
    peer = await startRawSipPeer();
    for (let i = 0; i < AGENTS; i++) expect((await d.api('POST', '/v1/agents', { name: `fair-${i}` })).status).toBe(201);
  });
  afterAll(async () => {
    agent.destroy();
    await peer?.close();
    await d?.close();
  });

  it('answers an OPTIONS sent behind a burst of 200 agent pages before most of the pages are sent', async () => {
    const url = new URL(d.url);
    const sipPort = d.daemon.sip!.port;
    // 200 connections open and idle first, so the burst is 200 writes in one go.
    await Promise.all(Array.from({ length: BURST }, () => get(agent, url, '/healthz')));
    expect(Object.values(agent.freeSockets).reduce((n, list) => n + (list?.length ?? 0), 0)).toBe(BURST);

    let pagesDone = 0;
    let pagesDoneAtOptions: number | undefined;
    const callId = `fair-${Date.now()}`;
    const answered = new Promise<void>((resolve) => {
      const onMessage = () => {
        if (peer.for(callId).some((r) => r.status === 200)) {
          pagesDoneAtOptions = pagesDone;
          peer.socket.off('message', onMessage);
          resolve();
        }
      };
      // After the peer's own listener, which parses and keeps the response.
      peer.socket.on('message', onMessage);
    });
    const pages = Array.from({ length: BURST }, () =>
      get(agent, url, `/v1/agents?limit=${AGENTS}`, { authorization: `Bearer ${d.key}` }).then((r) => {
        pagesDone++;
        return r;
      }),
    );
    options(peer, sipPort, callId);
    const results = await Promise.all(pages);
    await answered;

    for (const r of results) {
      expect(r.status).toBe(200);
      expect((JSON.parse(r.body) as unknown[]).length).toBe(AGENTS);
    }
    // Unscheduled, all 200 pages were sent before the OPTIONS was read.
    expect(pagesDoneAtOptions).toBeDefined();
    expect(pagesDoneAtOptions!).toBeLessThan(BURST / 2);
  });
});
