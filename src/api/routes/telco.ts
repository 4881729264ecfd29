/**
 * Telco numbers: import a carrier number (validated against the carrier's REST API), list,
 * relabel, delete (not in the service's document: the webhook import set is given back). The auth_token sent on import is write-only: sealed in the store, never returned.
 *
 * Served under two prefixes with the same handlers: `/v1/telco/numbers` (the API document's
 * neutral name) and `/v1/twilio/numbers` (the hosted service's name, which its SDK calls).
 */
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { DateTime, errorResponses, IdParams, Obj, Uuid } from '../schemas.ts';
import { conflict, notFound } from '../../domain/errors.ts';
import { newId, nowIso } from '../../domain/ids.ts';
import { E164_PATTERN } from '../../domain/phone.ts';
import { isUniqueViolation } from '../../store/db.ts';
import type { TelcoNumber } from '../../store/telco-numbers.ts';
import type { Config } from '../../config.ts';
import { importVoiceUrl, pointNumber, restoreNumber } from '../../telco/twilio-voice-url.ts';
import type { NumberWebhook } from '../../telco/carrier-client.ts';

/** The schemas depend on config (label length), so they are built per app. */
function telcoSchemas(config: Config) {
  const Label = (description: string) => Type.String({ minLength: 1, maxLength: config.limits.max_name_length, description });
  const TelcoNumberResource = Obj(
    {
      id: Uuid('record id of this import'),
      phone_number: Type.String({ description: 'E.164' }),
      phone_sid: Type.String({ description: "the carrier's identifier of the number" }),
      label: Type.String({ description: 'friendly name' }),
      account_sid: Type.String({ description: 'carrier account the number belongs to' }),
      created_at: DateTime(),
      updated_at: DateTime(),
    },
    { title: 'TelcoNumber' },
  );
  const TelcoNumberImport = Obj({
    phone_number: Type.String({ pattern: E164_PATTERN, description: 'E.164 number owned by the carrier account' }),
    // Becomes a URL path segment at the carrier: letters, digits, _ and - only (no "..", no "/").
    account_sid: Type.String({ minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9_-]+$', description: 'carrier account sid' }),
    auth_token: Type.String({ minLength: 1, maxLength: 256, writeOnly: true, description: 'carrier account auth token (write-only)' }),
    label: Type.Optional(Label('friendly name; default: the phone number')),
  });
  const TelcoNumberPatch = Obj({ label: Label('new display label') });
  const TelcoNumberDeleted = Obj(
    {
      id: Uuid('record id of the removed import'),
      deleted: Type.Boolean(),
      carrier_webhook_restored: Type.Boolean({ description: "whether the number's voice webhook at the carrier was given back what it had before import" }),
      carrier_webhook_reason: Type.Optional(Type.String({ description: 'why not, when not restored' })),
    },
    { title: 'TelcoNumberDeleted' },
  );
  return { TelcoNumberResource, TelcoNumberImport, TelcoNumberPatch, TelcoNumberDeleted };
}

/** The resource's fields only, in the document's order. */
const toResource = (n: TelcoNumber): TelcoNumber => ({
  id: n.id,
  phone_number: n.phone_number,
  phone_sid: n.phone_sid,
  label: n.label,
  account_sid: n.account_sid,
  created_at: n.created_at,
  updated_at: n.updated_at,
});

const alreadyImported = (phoneNumber: string, id?: string) =>
  conflict(`phone_number ${phoneNumber} is already imported${id ? ` (telco number ${id})` : ''}`, 'TELCO_NUMBER_EXISTS');

export const TELCO_NUMBER_PREFIXES = ['/v1/telco/numbers', '/v1/twilio/numbers'] as const;

export async function telcoRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const schemas = telcoSchemas(deps.config);
  for (const prefix of TELCO_NUMBER_PREFIXES) registerTelcoRoutes(app, deps, schemas, prefix);
}

function registerTelcoRoutes(app: FastifyInstance, deps: ApiDeps, schemas: ReturnType<typeof telcoSchemas>, prefix: (typeof TELCO_NUMBER_PREFIXES)[number]): void {
  const { store, carrier } = deps;
  const { TelcoNumberResource, TelcoNumberImport, TelcoNumberPatch, TelcoNumberDeleted } = schemas;
  const tags = ['telco'];
  const canonical = TELCO_NUMBER_PREFIXES[0];
  const alias = prefix === canonical ? {} : { description: `Alias of ${canonical}: the same handler, validation and organization scoping, under the hosted service's name.` };

  app.post(
    prefix,
    { schema: { tags, ...alias, body: TelcoNumberImport, response: { 201: TelcoNumberResource, ...errorResponses(400, 401, 409, 502, 503) } } },
    async (req, reply) => {
      const input = req.body as { phone_number: string; account_sid: string; auth_token: string; label?: string };
      const orgId = req.org.id;
      // Checked before the carrier round trip so a repeated import costs the carrier nothing.
      const existing = await store.telcoNumbers.byPhoneNumber(orgId, input.phone_number);
      if (existing) throw alreadyImported(input.phone_number, existing.id);

      const found = await carrier.lookupNumber(input.account_sid, input.auth_token, input.phone_number);
      // Calls to the number come to this daemon's voice webhook (docs/telco.md): set before the
      // record is written, so a carrier that refuses leaves nothing half imported to retry over.
      // What the number had is read first and stored with the import, for delete to give back.
      const voiceUrl = importVoiceUrl(deps.config);
      let previousWebhook: NumberWebhook | undefined;
      if (voiceUrl !== undefined) {
        previousWebhook = await pointNumber(store, carrier, input, found.phone_sid, voiceUrl);
        req.log.info({ phoneSid: found.phone_sid, voiceUrl }, "the number's voice webhook now points at this daemon");
      }

      const id = newId();
      const created = await store.tx(async (tx) => {
        try {
          await tx.telcoNumbers.insert({
            id,
            org_id: orgId,
            phone_number: input.phone_number,
            phone_sid: found.phone_sid,
            label: input.label ?? input.phone_number,
            account_sid: input.account_sid,
            auth_token: input.auth_token,
            created_at: nowIso(),
            previous_webhook: previousWebhook,
          });
        } catch (err) {
          // Two imports of one number raced past the check above while the carrier answered.
          if (isUniqueViolation(err, 'phone_number')) throw alreadyImported(input.phone_number);
          throw err;
        }
        return (await tx.telcoNumbers.get(orgId, id))!;
      });
      req.log.info({ telcoNumberId: id, phoneSid: found.phone_sid }, 'telco number imported');
      return reply.code(201).send(toResource(created));
    },
  );

  app.get(
    prefix,
    { schema: { tags, ...alias, response: { 200: Type.Array(TelcoNumberResource), ...errorResponses(401) } } },
    async (req) => (await store.telcoNumbers.list(req.org.id)).map(toResource),
  );

  app.patch(
    `${prefix}/:id`,
    { schema: { tags, ...alias, params: IdParams, body: TelcoNumberPatch, response: { 200: TelcoNumberResource, ...errorResponses(400, 401, 404) } } },
    async (req) => {
      const { id } = req.params as { id: string };
      const { label } = req.body as { label: string };
      const updated = await store.tx(async (tx) => {
        if (!(await tx.telcoNumbers.relabel(req.org.id, id, label, nowIso()))) throw notFound('telco number');
        return (await tx.telcoNumbers.get(req.org.id, id))!;
      });
      return toResource(updated);
    },
  );

  // Not in the service's document. The number's webhook at the carrier is given back first (when
  // callbridge set it and it still points here), then the import is removed whatever the carrier
  // said: the answer says what happened at the carrier (docs/telco.md).
  app.delete(
    `${prefix}/:id`,
    { schema: { tags, ...alias, params: IdParams, response: { 200: TelcoNumberDeleted, ...errorResponses(400, 401, 404) } } },
    async (req) => {
      const { id } = req.params as { id: string };
      const n = await store.telcoNumbers.get(req.org.id, id);
      if (!n) throw notFound('telco number');
      const outcome = await restoreNumber(store, carrier, deps.config, { ...n, org_id: req.org.id });
      if (!(await store.tx((tx) => tx.telcoNumbers.delete(req.org.id, id)))) throw notFound('telco number');
      req.log.info({ telcoNumberId: id, phoneSid: n.phone_sid, carrierWebhookRestored: outcome.carrier_webhook_restored, reason: outcome.carrier_webhook_reason }, 'telco number deleted');
      return { id, deleted: true, ...outcome };
    },
  );
}
