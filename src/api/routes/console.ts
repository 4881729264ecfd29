/**
 * The operator console (docs/console.md): the static front end in web/ and the three library
 * files it runs on, served at /console with a strict Content-Security-Policy. The console holds
 * no secret and renders nothing on the server: it calls this daemon's REST API with the API key
 * the operator types in, so serving it needs no auth.
 *
 * Only files known when the daemon starts are served (web/ as it was then, and the vendor files
 * named below): a path is looked up in that table, never joined onto a directory, so no request
 * can reach another file.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply } from 'fastify';

/** The repository's root, from src/api/routes/ (or dist/api/routes/ in a build). */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** The library files the console loads, by the name it asks for under /console/vendor/. */
const VENDOR_FILES: Record<string, string> = {
  'preact-htm.mjs': 'node_modules/htm/preact/standalone.mjs',
  'chart.umd.js': 'node_modules/chart.js/dist/chart.umd.js',
  'pico.min.css': 'node_modules/@picocss/pico/css/pico.min.css',
};

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.ico': 'image/x-icon',
};

/** Everything the console's pages may load: only this origin, no inline script or style. */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "media-src 'self' blob:",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

interface ServedFile {
  body: Buffer;
  type: string;
  etag: string;
  /** Library files change only with an npm update: cached a day. The console's own: revalidated. */
  cache: string;
}

function served(path: string, cache: string): ServedFile {
  const body = readFileSync(path);
  const type = CONTENT_TYPES[extname(path)] ?? 'application/octet-stream';
  return { body, type, cache, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` };
}

/** web/'s files by their URL path under /console/ (index.html also as the console's root). */
function consoleFiles(webDir: string): Map<string, ServedFile> {
  const files = new Map<string, ServedFile>();
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile() && CONTENT_TYPES[extname(entry.name)] !== undefined) {
        files.set(relative(webDir, path).split(sep).join('/'), served(path, 'no-cache'));
      }
    }
  };
  walk(webDir);
  for (const [name, path] of Object.entries(VENDOR_FILES)) files.set(`vendor/${name}`, served(join(ROOT, path), 'public, max-age=86400'));
  const index = files.get('index.html');
  if (index) files.set('', index);
  return files;
}

function securityHeaders(reply: FastifyReply): FastifyReply {
  return reply
    .header('content-security-policy', CONSOLE_CSP)
    .header('x-content-type-options', 'nosniff')
    .header('referrer-policy', 'no-referrer')
    .header('x-frame-options', 'DENY');
}

/** Serves the console at /console; `webDir` is the front end's directory (the repository's web/). */
export async function consoleRoutes(app: FastifyInstance, options: { webDir?: string } = {}): Promise<void> {
  const files = consoleFiles(options.webDir ?? join(ROOT, 'web'));
  const route = { config: { public: true }, schema: { hide: true } };

  const send = (path: string, ifNoneMatch: string | undefined, reply: FastifyReply): FastifyReply => {
    securityHeaders(reply);
    const file = files.get(path);
    if (file === undefined) return reply.code(404).send({ error: `no console file /console/${path}` });
    reply.header('content-type', file.type).header('cache-control', file.cache).header('etag', file.etag);
    if (ifNoneMatch === file.etag) return reply.code(304).send();
    return reply.send(file.body);
  };

  app.get('/console', route, async (req, reply) => send('', req.headers['if-none-match'], reply));
  app.get('/console/*', route, async (req, reply) => {
    const path = (req.params as { '*': string })['*'];
    return send(path, req.headers['if-none-match'], reply);
  });
}
