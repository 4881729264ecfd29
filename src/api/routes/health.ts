import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { ApiDeps } from '../context.ts';
import { Obj } from '../schemas.ts';

const Health = Obj({ status: Type.String(), reason: Type.Optional(Type.String()) });

export async function healthRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  app.get('/healthz', { config: { public: true }, schema: { tags: ['operations'], response: { 200: Health } } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { config: { public: true }, schema: { tags: ['operations'], response: { 200: Health, 503: Health } } }, async (_req, reply) => {
    const r = deps.readiness();
    if (r.ready && !r.draining) return { status: 'ready' };
    return reply.code(503).send({ status: r.draining ? 'draining' : 'starting', reason: r.reason ?? '' });
  });
}
