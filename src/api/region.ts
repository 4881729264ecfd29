/**
 * Region pinning (DESIGN.md): `x-service-region` naming this daemon's region is served here;
 * naming the other supported region is proxied to that region's configured base URL (503 when
 * none is configured); any other value is 400. Runs before authentication, because the key
 * may belong to the other region's store.
 */
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { REGIONS, type Config, type Region } from '../config.ts';
import { sendError } from './errors.ts';

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'upgrade', 'proxy-connection', 'te', 'trailer', 'host', 'content-length']);

export function peerUrl(config: Config, region: Region): string {
  return region === 'us-central1' ? config.region.peer_us_central1 : config.region.peer_northamerica_northeast1;
}

export function installRegionPinning(app: FastifyInstance, config: Config): void {
  // A callback hook: almost every request is served here, and that path must not pay for a
  // promise. Only a proxied request goes asynchronous.
  app.addHook('onRequest', (req, reply, done) => {
    const raw = req.headers['x-service-region'];
    if (raw === undefined) return done();
    const region = Array.isArray(raw) ? raw[0] : raw;
    if (region === config.region.self) return done();
    // Replying ends the request; done() is not called then. Never return the reply here: it is
    // thenable, and Fastify would take this callback hook for an async one.
    if (!(REGIONS as readonly string[]).includes(region as string)) {
      sendError(reply, 400, `x-service-region must be one of ${REGIONS.join(', ')}`);
      return;
    }
    const base = peerUrl(config, region as Region);
    if (!base) {
      sendError(reply, 503, `region ${region} is not configured on this deployment`);
      return;
    }
    proxy(req, reply, base, region as Region, config.region.proxy_timeout_ms).catch((err: unknown) => {
      req.log.error({ err }, 'region proxy failed');
      if (!reply.sent) sendError(reply, 502, `region ${region} did not answer`);
    });
  });
}

/** Forwards the request to the peer region and relays its answer. */
async function proxy(req: FastifyRequest, reply: FastifyReply, base: string, region: Region, timeoutMs: number): Promise<void> {
  const headers = new Headers();
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined || HOP_BY_HOP.has(k)) continue;
    headers.set(k, Array.isArray(v) ? v.join(', ') : v);
  }
  headers.set('x-forwarded-for', req.ip);
  const hasBody = req.method !== 'GET' && req.method !== 'HEAD';
  let upstream: Response;
  try {
    // Appended, not resolved, so a base URL with a path prefix keeps it.
    upstream = await fetch(base.replace(/\/+$/, '') + req.url, {
      method: req.method,
      headers,
      body: hasBody ? (Readable.toWeb(req.raw) as ReadableStream) : undefined,
      // Streams a request body through without buffering it (undici requires this flag).
      ...(hasBody ? { duplex: 'half' } : {}),
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
    } as RequestInit);
  } catch (err) {
    req.log.warn({ err, region }, 'region proxy failed');
    sendError(reply, 502, `region ${region} did not answer`);
    return;
  }
  reply.code(upstream.status);
  upstream.headers.forEach((value, key) => {
    if (!HOP_BY_HOP.has(key) && key !== 'content-encoding') reply.header(key, value);
  });
  reply.header('x-served-by-region', region);
  reply.send(Buffer.from(await upstream.arrayBuffer()));
}
