/**
 * The webhook POST and its destination policy against a real HTTP server on loopback: loopback
 * is refused unless private destinations are allowed; an answer is read whatever its status; a
 * redirect is not followed; a silent server is cut at the deadline; the address checked is the
 * one connected to, whatever the name resolves to later.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPublicAddress } from '../../src/events/destination.ts';
import { PostError, postJson } from '../../src/events/http-post.ts';

let server: Server;
let base: string;
const received: Array<{ url: string; body: string; headers: IncomingMessage['headers'] }> = [];

beforeAll(async () => {
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      received.push({ url: req.url ?? '', body, headers: req.headers });
      if (req.url === '/redirect') res.writeHead(307, { location: '/ok' }).end();
      else if (req.url === '/silent') return; // never answers
      else if (req.url === '/big') res.writeHead(200).end('x'.repeat(200_000));
      else res.writeHead(req.url === '/fail' ? 500 : 200, { 'content-type': 'application/json' }).end('{"output":"done"}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => {
  server.closeAllConnections();
  server.close();
});

const allow = { policy: { allowPrivate: true }, timeoutMs: 2000 };

describe('postJson', () => {
  it('posts the body and headers, and returns the answer', async () => {
    const a = await postJson(`${base}/ok`, '{"a":1}', { ...allow, headers: { 'webhook-id': 'm1' } });
    expect(a).toEqual({ status: 200, body: '{"output":"done"}' });
    expect(received.at(-1)).toMatchObject({ url: '/ok', body: '{"a":1}', headers: { 'webhook-id': 'm1', 'content-type': 'application/json' } });
  });

  it('a non-2xx status is an answer; a redirect is not followed', async () => {
    expect((await postJson(`${base}/fail`, '{}', allow)).status).toBe(500);
    const n = received.length;
    expect((await postJson(`${base}/redirect`, '{}', allow)).status).toBe(307);
    expect(received.length).toBe(n + 1);
  });

  it('loopback is refused by default, before any connection', async () => {
    const n = received.length;
    const err = await postJson(`${base}/ok`, '{}', { policy: { allowPrivate: false }, timeoutMs: 2000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PostError);
    expect((err as PostError).kind).toBe('destination');
    expect((err as PostError).message).toMatch(/not a public address/);
    expect(received.length).toBe(n);
  });

  it('a name resolving to a private address among public ones is refused', async () => {
    const lookup = async () => [{ address: '93.184.216.34', family: 4 }, { address: '10.0.0.5', family: 4 }];
    const err = await postJson('http://hooks.example.test/x', '{}', { policy: { allowPrivate: false, lookup }, timeoutMs: 2000 }).catch((e: unknown) => e);
    expect((err as PostError).kind).toBe('destination');
  });

  it('connects to the address that was checked, not to what the name says later', async () => {
    const lookup = async () => [{ address: '127.0.0.1', family: 4 }];
    const port = (server.address() as AddressInfo).port;
    const a = await postJson(`http://receiver.example.test:${port}/ok`, '{}', { policy: { allowPrivate: true, lookup }, timeoutMs: 2000 });
    expect(a.status).toBe(200);
    expect(received.at(-1)!.headers.host).toBe(`receiver.example.test:${port}`);
  });

  it('a silent endpoint is cut at the deadline', async () => {
    const t0 = Date.now();
    const err = await postJson(`${base}/silent`, '{}', { ...allow, timeoutMs: 300 }).catch((e: unknown) => e);
    expect((err as PostError).kind).toBe('timeout');
    expect(Date.now() - t0).toBeLessThan(2000);
  });

  it('a long answer is read up to the bound', async () => {
    const a = await postJson(`${base}/big`, '{}', { ...allow, maxResponseBytes: 1000 });
    expect(a.body.length).toBe(1000);
  });

  it('bad URLs are refused with a reason', async () => {
    for (const [url, why] of [['ftp://x.example/', /http or https/], ['not a url', /absolute URL/], ['http://u:p@x.example/', /credentials/]] as const) {
      const err = await postJson(url, '{}', allow).catch((e: unknown) => e);
      expect((err as PostError).kind, url).toBe('destination');
      expect((err as PostError).message, url).toMatch(why);
    }
  });
});

describe('isPublicAddress', () => {
  it('tells public unicast from loopback, private, link-local, CGNAT, documentation and mapped forms', () => {
    for (const a of ['8.8.8.8', '93.184.216.34', '2606:4700:4700::1111']) expect(isPublicAddress(a), a).toBe(true);
    for (const a of ['127.0.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0', '::1', '::', 'fe80::1', 'fd00::1', '::ffff:127.0.0.1', '::ffff:10.0.0.1', '224.0.0.1', 'not-an-ip']) {
      expect(isPublicAddress(a), a).toBe(false);
    }
  });
});
