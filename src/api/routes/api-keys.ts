/**
 * API keys (ours; docs/api-keys.md): list, create, revoke the keys of the caller's organization.
 * The key itself is made here and shown once, in the create answer; the store keeps its sha256
 * only, and no other response schema names it. A revoked key is refused from the next request
 * on (the store decides: src/store/organizations.ts).
 */
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { DateTime, errorResponses, IdParams, Obj, Pagination, Uuid } from '../schemas.ts';
import { conflict, notFound } from '../../domain/errors.ts';
import type { ApiKeyRecord } from '../../store/api-key-material.ts';

const keyFields = {
  id: Uuid(),
  name: Type.String({ description: 'what the key is for; empty when not named' }),
  prefix: Type.String({ description: 'the first characters of the key, to tell keys apart (the rest is never shown again)' }),
  created_at: DateTime(),
  last_used_at: Type.Unsafe<string | null>({ type: ['string', 'null'], format: 'date-time', description: 'when a request last used the key, to within a minute; null: never' }),
  current: Type.Boolean({ description: 'whether this is the key of the request that reads it' }),
};
const ApiKey = Type.Object(keyFields, { title: 'ApiKey', description: 'ours: an API key of the organization, without the key' });
const CreatedApiKey = Type.Object(
  { ...keyFields, key: Type.String({ description: 'the key to send as Authorization: Bearer <key>: shown only in this answer' }) },
  { title: 'CreatedApiKey' },
);

export async function apiKeyRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { store, config } = deps;
  const tags = ['api-keys'];
  const shown = (record: ApiKeyRecord, currentKeyId: string) => ({ ...record, current: record.id === currentKeyId });

  app.post(
    '/v1/api-keys',
    {
      // The body is optional: no body makes a key without a name.
      preValidation: async (req) => {
        if (req.body === undefined || req.body === null) req.body = {};
      },
      schema: {
        tags,
        summary: "ours: create an API key of the caller's organization (the key is in this answer only)",
        body: Obj({ name: Type.Optional(Type.String({ maxLength: config.limits.max_name_length, description: 'what the key is for' })) }),
        response: { 201: CreatedApiKey, ...errorResponses(400, 401) },
      },
    },
    async (req, reply) => {
      const body = (req.body ?? {}) as { name?: string };
      const { record, key } = await store.apiKeys.create(req.org.id, body.name ?? '');
      req.log.info({ apiKeyId: record.id, prefix: record.prefix }, 'api key created');
      return reply.code(201).send({ ...shown(record, req.apiKeyId), key });
    },
  );

  app.get(
    '/v1/api-keys',
    {
      schema: {
        tags,
        summary: "ours: the organization's active API keys, oldest first (never the keys themselves)",
        querystring: Pagination(config.limits.max_page_size),
        response: { 200: Type.Array(ApiKey), ...errorResponses(400, 401) },
      },
    },
    async (req) => {
      const q = req.query as { limit?: number; offset?: number };
      return (await store.apiKeys.list(req.org.id, q.limit ?? 100, q.offset ?? 0)).map((r) => shown(r, req.apiKeyId));
    },
  );

  app.delete(
    '/v1/api-keys/:id',
    {
      schema: {
        tags,
        summary: "ours: revoke an API key (refused from the next request on); 409 for the organization's last key",
        params: IdParams,
        response: { 204: Type.Null(), ...errorResponses(400, 401, 404, 409) },
      },
    },
    async (req, reply) => {
      const { id } = req.params as { id: string };
      const result = await store.apiKeys.revoke(req.org.id, id);
      if (result === 'not_found') throw notFound('api key');
      if (result === 'last_key') throw conflict("this is the organization's last active API key: create another one before revoking it", 'API_KEY_LAST');
      req.log.info({ apiKeyId: id, self: id === req.apiKeyId }, 'api key revoked');
      return reply.code(204).send();
    },
  );
}
