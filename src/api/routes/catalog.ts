/** Read-only catalogs (models from configuration, voices from the voice catalog service), and the caller's organization. */
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { DateTime, errorResponses, Uuid } from '../schemas.ts';
import { modelCatalog } from '../../config.ts';

const Voice = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    description: Type.Optional(Type.String()),
    provider: Type.String(),
    languages: Type.Array(Type.String()),
    preview_url: Type.Optional(Type.String()),
  },
  { title: 'Voice' },
);

export async function catalogRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const llms = modelCatalog(deps.config);

  app.get('/v1/llms', { schema: { tags: ['models'], response: { 200: Type.Object({ llms: Type.Array(Type.String()) }), ...errorResponses(401) } } }, async () => ({
    llms,
  }));

  app.get('/v1/voices', { schema: { tags: ['voices'], response: { 200: Type.Object({ voices: Type.Array(Voice) }), ...errorResponses(401) } } }, async () => ({
    // Read from the catalog's cache; only a request during a vendor's first fetch may wait (bounded).
    voices: await deps.voiceCatalog.list(),
  }));

  app.get(
    '/v1/organization',
    { schema: { tags: ['organization'], response: { 200: Type.Object({ id: Uuid(), name: Type.String(), created_at: DateTime() }), ...errorResponses(401) } } },
    async (req) => ({ id: req.org.id, name: req.org.name, created_at: req.org.created_at }),
  );
}
