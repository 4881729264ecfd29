/**
 * Webhook endpoints (docs/webhooks.md): create, list, get, partial update, delete, and an
 * endpoint's recent deliveries. The signing secret is made here and shown once, in the create
 * answer; no other response schema names it and the store hands it back to no read.
 */
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { DateTime, errorResponses, IdParams, Obj, Pagination, Uuid } from '../schemas.ts';
import { notFound, validation } from '../../domain/errors.ts';
import { newId, nowIso } from '../../domain/ids.ts';
import { checkWebhookEvents, MAX_WEBHOOK_DESCRIPTION_LENGTH, MAX_WEBHOOK_URL_LENGTH, WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../domain/webhook.ts';
import { DestinationError, parseWebhookUrl } from '../../events/destination.ts';
import { newWebhookSecret } from '../../events/standard-webhooks.ts';

const MAX_DELIVERIES = 100;

// events are plain strings in the schema, so that an unknown type gets a 400 naming it
// (checkWebhookEvents) rather than the validator's "must be equal to one of the allowed values".
const Events = Type.Array(Type.String({ maxLength: 64 }), { minItems: 1, maxItems: WEBHOOK_EVENT_TYPES.length * 2, description: `event types: ${WEBHOOK_EVENT_TYPES.join(', ')}` });
const Url = Type.String({ maxLength: MAX_WEBHOOK_URL_LENGTH, description: 'http or https URL without credentials; by default only public addresses receive (webhooks.allow_private_destinations)' });
const Description = Type.String({ maxLength: MAX_WEBHOOK_DESCRIPTION_LENGTH });

const endpointFields = {
  id: Uuid(),
  url: Type.String(),
  events: Type.Array(Type.String()),
  description: Type.String(),
  created_at: DateTime(),
};
const WebhookEndpoint = Type.Object(endpointFields, { title: 'WebhookEndpoint' });
const CreatedWebhookEndpoint = Type.Object(
  { ...endpointFields, secret: Type.String({ description: 'whsec_ + base64 key for the Standard Webhooks signature: shown only in this answer' }) },
  { title: 'CreatedWebhookEndpoint' },
);
const Delivery = Type.Object(
  {
    id: Uuid(),
    event_id: Uuid('the webhook-id header: the same on every attempt'),
    event_type: Type.String(),
    call_id: Type.String(),
    status: Type.Unsafe<string>({ type: 'string', enum: ['pending', 'delivered', 'failed'], description: 'failed: given up after webhooks.retry_max_hours' }),
    attempts: Type.Integer(),
    response_status: Type.Optional(Type.Integer({ description: 'HTTP status of the last answer' })),
    error: Type.Optional(Type.String({ description: 'why the last attempt failed' })),
    next_attempt_at: Type.Optional(DateTime()),
    created_at: DateTime(),
    finished_at: Type.Optional(DateTime()),
  },
  { title: 'WebhookDelivery' },
);

function checkedUrl(raw: string): string {
  try {
    return parseWebhookUrl(raw).href;
  } catch (err) {
    if (err instanceof DestinationError) throw validation(`body.${err.message}`);
    throw err;
  }
}

export async function webhookRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { store, config } = deps;
  const tags = ['webhooks'];

  app.post(
    '/v1/webhooks',
    {
      schema: {
        tags,
        summary: 'Create a webhook endpoint (its secret is in this answer only)',
        body: Obj({ url: Url, events: Events, description: Type.Optional(Description) }),
        response: { 201: CreatedWebhookEndpoint, ...errorResponses(400, 401) },
      },
    },
    async (req, reply) => {
      const body = req.body as { url: string; events: string[]; description?: string };
      const url = checkedUrl(body.url);
      const events = checkWebhookEvents(body.events);
      const secret = newWebhookSecret();
      const id = newId();
      await store.webhooks.insert({ id, org_id: req.org.id, url, events, description: body.description ?? '', secret, created_at: nowIso() });
      const created = (await store.webhooks.get(req.org.id, id))!;
      req.log.info({ webhookId: id, events }, 'webhook endpoint created');
      return reply.code(201).send({ ...created, secret });
    },
  );

  app.get(
    '/v1/webhooks',
    { schema: { tags, summary: 'List the webhook endpoints', querystring: Pagination(config.limits.max_page_size), response: { 200: Type.Array(WebhookEndpoint), ...errorResponses(400, 401) } } },
    async (req) => {
      const q = req.query as { limit?: number; offset?: number };
      return store.webhooks.list(req.org.id, q.limit ?? 100, q.offset ?? 0);
    },
  );

  app.get('/v1/webhooks/:id', { schema: { tags, summary: 'Get a webhook endpoint', params: IdParams, response: { 200: WebhookEndpoint, ...errorResponses(400, 401, 404) } } }, async (req) => {
    const { id } = req.params as { id: string };
    const endpoint = await store.webhooks.get(req.org.id, id);
    if (!endpoint) throw notFound('webhook');
    return endpoint;
  });

  app.patch(
    '/v1/webhooks/:id',
    {
      schema: {
        tags,
        summary: 'Change a webhook endpoint (pending deliveries go to the new url)',
        params: IdParams,
        body: Obj({ url: Type.Optional(Url), events: Type.Optional(Events), description: Type.Optional(Description) }),
        response: { 200: WebhookEndpoint, ...errorResponses(400, 401, 404) },
      },
    },
    async (req) => {
      const { id } = req.params as { id: string };
      const body = (req.body ?? {}) as { url?: string; events?: string[]; description?: string };
      const change: { url?: string; events?: WebhookEventType[]; description?: string } = {};
      if (body.url !== undefined) change.url = checkedUrl(body.url);
      if (body.events !== undefined) change.events = checkWebhookEvents(body.events);
      if (body.description !== undefined) change.description = body.description;
      if (!(await store.webhooks.update(req.org.id, id, change, nowIso()))) throw notFound('webhook');
      return (await store.webhooks.get(req.org.id, id))!;
    },
  );

  app.delete(
    '/v1/webhooks/:id',
    { schema: { tags, summary: 'Delete a webhook endpoint (its undelivered events are dropped)', params: IdParams, response: { 204: Type.Null(), ...errorResponses(400, 401, 404) } } },
    async (req, reply) => {
      const { id } = req.params as { id: string };
      if (!(await store.webhooks.delete(req.org.id, id))) throw notFound('webhook');
      req.log.info({ webhookId: id }, 'webhook endpoint deleted');
      return reply.code(204).send();
    },
  );

  app.get(
    '/v1/webhooks/:id/deliveries',
    {
      schema: {
        tags,
        summary: "The endpoint's recent deliveries, newest first",
        params: IdParams,
        querystring: Obj({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_DELIVERIES, default: 50 })) }),
        response: { 200: Type.Array(Delivery), ...errorResponses(400, 401, 404) },
      },
    },
    async (req) => {
      const { id } = req.params as { id: string };
      const { limit } = req.query as { limit?: number };
      if (!(await store.webhooks.get(req.org.id, id))) throw notFound('webhook');
      return (await store.webhookDeliveries.listForEndpoint(id, limit ?? 50)).map((d) => ({
        id: d.id,
        event_id: d.event_id,
        event_type: d.event_type,
        call_id: d.call_id,
        status: d.status,
        attempts: d.attempts,
        ...(d.last_status_code !== null ? { response_status: d.last_status_code } : {}),
        ...(d.last_error !== null ? { error: d.last_error } : {}),
        ...(d.next_attempt_at !== null ? { next_attempt_at: d.next_attempt_at } : {}),
        created_at: d.created_at,
        ...(d.finished_at !== null ? { finished_at: d.finished_at } : {}),
      }));
    },
  );
}
