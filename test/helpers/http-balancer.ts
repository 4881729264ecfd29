/**
 * A load balancer for tests: one loopback HTTP port in front of several daemons, each request
 * (and WebSocket upgrade) sent to the daemon `pick` names for it, as a shared HTTP load balancer
 * would spread a carrier's webhooks, status callbacks and media streams over the nodes behind
 * one public URL. Requests are forwarded as received (method, path, headers, body).
 */
import { createServer, request, type IncomingMessage } from 'node:http';
import { connect, type AddressInfo } from 'node:net';

export interface HttpBalancer {
  /** http://127.0.0.1:<port> */
  url: string;
  /** Every request forwarded: its path and the base URL it went to. */
  forwarded: Array<{ path: string; to: string }>;
  close(): Promise<void>;
}

/** `pick` returns the base URL (http://host:port) of the daemon that gets the request. */
export async function startHttpBalancer(pick: (req: IncomingMessage) => string): Promise<HttpBalancer> {
  const forwarded: HttpBalancer['forwarded'] = [];
  const target = (req: IncomingMessage) => {
    const to = pick(req);
    forwarded.push({ path: req.url ?? '', to });
    return new URL(to);
  };
  const server = createServer((req, res) => {
    const t = target(req);
    const up = request({ host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    req.pipe(up);
  });
  server.on('upgrade', (req: IncomingMessage, socket, head: Buffer) => {
    const t = target(req);
    const up = connect(Number(t.port), t.hostname, () => {
      const lines = [`${req.method} ${req.url} HTTP/1.1`];
      for (let i = 0; i < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
      up.write(lines.join('\r\n') + '\r\n\r\n');
      if (head.length > 0) up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
    up.on('error', () => socket.destroy());
    socket.on('error', () => up.destroy());
    up.on('close', () => socket.destroy());
    socket.on('close', () => up.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    forwarded,
    close() {
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
