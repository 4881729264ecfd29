/**
 * SIP trunks and the agent assignments on them: create, list, get, partial update, delete.
 *
 * The assignment routes live under the static segment /v1/sip-trunks/assignments/, which the
 * router (find-my-way) prefers to the parametric /v1/sip-trunks/:id, so both coexist.
 * Passwords are write-only: no response schema names them, and the store hands back none.
 */
import type { FastifyInstance } from 'fastify';
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { DateTime, errorResponses, IdParams, NullableString, Obj, Pagination, Uuid } from '../schemas.ts';
import {
  applyTrunkPatch,
  CALLER_ID_TRANSFORM_TYPES,
  checkAclWidth,
  checkTrunk,
  INBOUND_AUTH_TYPES,
  MAX_HEADER_VARIABLES,
  MEDIA_ENCRYPTIONS,
  PBX_TYPES,
  REGISTRATION_STATUSES,
  trunkForCreate,
  type AclWidthLimit,
  type Pbx,
  type SipTrunkInput,
} from '../../domain/sip-trunk.ts';
import { DIAL_STRING_PATTERN } from '../../domain/phone.ts';
import { conflict, notFound, validation } from '../../domain/errors.ts';
import { newId, nowIso } from '../../domain/ids.ts';
import { isUniqueViolation } from '../../store/db.ts';
import { toSipTrunkResource } from '../../store/sip-trunks.ts';
import type { Store } from '../../store/index.ts';
import type { Assignment as StoredAssignment } from '../../store/assignments.ts';
import { assignmentRoutingWarnings } from '../assignment-warnings.ts';

const StrEnum = (values: readonly string[], description?: string) => Type.Unsafe<string>({ type: 'string', enum: [...values], description });
const NullableEnum = (values: readonly string[], description?: string) =>
  Type.Unsafe<string | null>({ type: ['string', 'null'], enum: [...values, null], description });
/** The schema, or null: one JSON Schema type list, so errors name the field rather than an anyOf. */
const Nullable = <T extends TSchema>(schema: T) => Type.Unsafe<Static<T> | null>({ ...schema, type: [schema.type as string, 'null'] });
/** Write-only: a string sets the password, null clears it, absent keeps it. */
const Password = (description: string) =>
  Type.Optional(Type.Unsafe<string | null>({ type: ['string', 'null'], minLength: 1, maxLength: 256, description, writeOnly: true }));
const DialString = (description: string) =>
  Type.Optional(NullableString({ pattern: DIAL_STRING_PATTERN, description: `${description}; E.164 or digits, * and #; null = none` }));

const MEDIA_ENCRYPTION_DOC = "ours: SRTP (SDES) on the trunk's calls: none (plain RTP), allow (SRTP when the far end offers or accepts it), require (no call without it)";
const HEADER_VARIABLES_DOC =
  `ours: SIP header names (case-insensitive, at most ${MAX_HEADER_VARIABLES} after removing duplicates; not Authorization or Proxy-Authorization) ` +
  'whose values in an inbound INVITE become session variables sip_<name> (docs/sip-trunks.md)';

function trunkSchemas(maxNameLength: number, acl: AclWidthLimit) {
  const Transform = Obj(
    {
      type: StrEnum(CALLER_ID_TRANSFORM_TYPES),
      value: Type.Optional(Type.String({ maxLength: 32, description: 'add_prefix, add_suffix: text added; replace: text searched for' })),
      value2: Type.Optional(Type.String({ maxLength: 32, description: 'replace: the replacement' })),
      number: Type.Optional(Type.Integer({ minimum: 1, maximum: 32, description: 'strip_digits_start, strip_digits_end: characters removed' })),
    },
    { title: 'CallerIdTransform' },
  );
  // Every field but pbx may be null, as the service's document allows: on create null is the
  // same as leaving the field out; on PATCH it resets the field to what a create would give it
  // (text "", lists [], the PBX preset's value for the rest). domain/sip-trunk.ts applies it.
  const fields = {
    name: Type.Optional(NullableString({ maxLength: maxNameLength, description: 'display name; null = none' })),
    inbound_auth_type: Type.Optional(NullableEnum(INBOUND_AUTH_TYPES, 'digest: username/password; acl: source address; none: no inbound calls; null = the PBX preset')),
    inbound_host: Type.Optional(NullableString({ maxLength: 253, description: 'host name or IP the PBX sends from (acl); null = none' })),
    inbound_acl: Type.Optional(
      Nullable(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 100, description: `CIDRs allowed to send calls (acl), each at most /${acl.v4} (IPv4) or /${acl.v6} (IPv6) wide; null = none` })),
    ),
    inbound_sip_username: Type.Optional(NullableString({ maxLength: 128, description: 'digest username; unique across all trunks; null = none' })),
    inbound_sip_password: Password('digest password the PBX authenticates with'),
    outbound_host: Type.Optional(NullableString({ maxLength: 300, description: '[sips:]host[:port][;transport=udp|tcp|tls] (sips: = TLS only, sips: URIs); null = none' })),
    outbound_sip_username: Type.Optional(NullableString({ maxLength: 128, description: 'null = none' })),
    outbound_sip_password: Password('password callbridge authenticates with toward outbound_host'),
    register: Type.Optional(Nullable(Type.Boolean({ description: 'REGISTER with outbound_host and keep it refreshed; null = the PBX preset' }))),
    remain_in_dialog: Type.Optional(Nullable(Type.Boolean({ description: 'on transfer, stay in the dialog until the PBX reports the outcome; null = the PBX preset' }))),
    caller_id_transforms: Type.Optional(Nullable(Type.Array(Transform, { maxItems: 20, description: 'null or [] = none' }))),
    // Ours (not in the service's document), like outbound_registration_error: docs/sip-trunks.md.
    media_encryption: Type.Optional(NullableEnum(MEDIA_ENCRYPTIONS, MEDIA_ENCRYPTION_DOC + '; null = none')),
    // maxItems is checked after deduplication by the domain, so a list with repeats still fits;
    // the schema bounds what is parsed at all.
    header_variables: Type.Optional(
      Nullable(Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 100, description: HEADER_VARIABLES_DOC + '; null or [] = none' })),
    ),
  };
  const SipTrunkCreate = Obj({ pbx: StrEnum(PBX_TYPES), ...fields }, { title: 'SipTrunkCreate' });
  const SipTrunkPatch = Obj({ pbx: Type.Optional(StrEnum(PBX_TYPES)), ...fields }, { title: 'SipTrunkPatch' });
  const SipTrunk = Type.Object(
    {
      id: Uuid(),
      pbx: StrEnum(PBX_TYPES),
      name: Type.String(),
      inbound_auth_type: StrEnum(INBOUND_AUTH_TYPES),
      inbound_host: Type.String(),
      inbound_acl: Type.Array(Type.String()),
      inbound_sip_username: Type.String(),
      outbound_host: Type.String(),
      outbound_sip_username: Type.String(),
      register: Type.Boolean(),
      remain_in_dialog: Type.Boolean(),
      caller_id_transforms: Type.Array(Transform),
      media_encryption: StrEnum(MEDIA_ENCRYPTIONS, MEDIA_ENCRYPTION_DOC),
      header_variables: Type.Array(Type.String(), { description: HEADER_VARIABLES_DOC }),
      inbound_registration_status: StrEnum(REGISTRATION_STATUSES),
      outbound_registration_status: StrEnum(REGISTRATION_STATUSES),
      outbound_registration_error: Type.String({ description: "ours: why callbridge's last REGISTER to outbound_host failed; '' when it did not" }),
      outbound_registration_expires_at: Nullable(DateTime()),
      created_at: DateTime(),
      updated_at: DateTime(),
    },
    { title: 'SipTrunk' },
  );
  return { SipTrunkCreate, SipTrunkPatch, SipTrunk };
}

const ROUTING_WARNINGS_DOC =
  "ours: why calls to one of the assignment's numbers will not reach it, found when the assignment is read: the number is a carrier number another organization imported, " +
  "or another organization routes it through an ACL trunk admitting some of the same source addresses (such calls are refused as ambiguous), " +
  'or through a digest trunk (such calls are challenged). Never names the other organization. Empty when the numbers route as configured';

const AssignmentCreate = Obj(
  {
    agent_id: Uuid('agent of this organization'),
    number: DialString('dialed number routed to the agent on a digest trunk; unique within the trunk'),
    alternate_number: DialString('dialed number routed to the agent on an ACL trunk; unique within the organization'),
  },
  { title: 'SipTrunkAssignmentCreate' },
);
const AssignmentPatch = Obj(
  {
    number: DialString('new number'),
    alternate_number: DialString('new alternate number'),
  },
  { title: 'SipTrunkAssignmentPatch' },
);
const Assignment = Type.Object(
  {
    id: Uuid(),
    agent_id: Uuid(),
    sip_trunk_id: Uuid(),
    number: Type.String({ description: 'empty when unset' }),
    alternate_number: Type.String({ description: 'empty when unset' }),
    created_at: DateTime(),
    routing_warnings: Type.Array(Type.String(), { description: ROUTING_WARNINGS_DOC }),
  },
  { title: 'SipTrunkAssignment' },
);
const AssignmentParams = Obj({ assignmentId: Uuid('id of the assignment') });

/**
 * Runs a write, turning a UNIQUE failure that slipped past the checks (a concurrent writer) into
 * the same 409 the checks give.
 */
async function withConflicts<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (isUniqueViolation(err, 'inbound_sip_username')) throw usernameTaken();
    if (isUniqueViolation(err, 'alternate_number')) throw alternateTaken();
    if (isUniqueViolation(err, 'sip_trunk_assignments.number')) throw numberTaken();
    throw err;
  }
}

// The messages name no other trunk or organization: usernames are unique across organizations
// (a digest login names its trunk), numbers only within one (another's claim is not our business).
const usernameTaken = () => conflict('inbound_sip_username is already used by another SIP trunk', 'SIP_USERNAME_TAKEN');
const numberTaken = () => conflict('number is already assigned on this SIP trunk', 'SIP_NUMBER_TAKEN');
const alternateTaken = () => conflict('alternate_number is already assigned in this organization', 'SIP_ALTERNATE_NUMBER_TAKEN');

async function checkUsernameFree(store: Store, username: string, trunkId: string): Promise<void> {
  if (!username) return;
  const holder = await store.sipTrunks.byInboundUsername(username);
  if (holder && holder.id !== trunkId) throw usernameTaken();
}

async function checkNumbersFree(store: Store, orgId: string, trunkId: string, assignmentId: string, number: string | null, alternate: string | null): Promise<void> {
  if (number !== null) {
    const holder = await store.assignments.byTrunkNumber(trunkId, number);
    if (holder && holder.id !== assignmentId) throw numberTaken();
  }
  if (alternate !== null) {
    const holder = await store.assignments.byOrgAlternateNumber(orgId, alternate);
    if (holder && holder.id !== assignmentId) throw alternateTaken();
  }
}

/** The assignment as the API shows it: with its routing_warnings (assignment-warnings.ts). */
async function withWarnings(store: Store, orgId: string, a: StoredAssignment): Promise<StoredAssignment & { routing_warnings: string[] }> {
  return { ...a, routing_warnings: await assignmentRoutingWarnings(store, orgId, a) };
}

/** An assignment that routes nothing would be dead weight: one of the two numbers must stay. */
function checkHasNumber(number: string | null, alternate: string | null): void {
  if (number === null && alternate === null) throw validation('body.number or body.alternate_number is required (an assignment must keep at least one)');
}

export async function sipTrunkRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { store, config } = deps;
  // The widest inbound_acl entries accepted (docs/sip-trunks.md): an ACL admits without a password.
  const aclLimit: AclWidthLimit = { v4: config.sip.acl_min_prefix_v4, v6: config.sip.acl_min_prefix_v6 };
  const { SipTrunkCreate, SipTrunkPatch, SipTrunk } = trunkSchemas(config.limits.max_name_length, aclLimit);
  const tags = ['sip-trunks'];

  app.post(
    '/v1/sip-trunks',
    { schema: { tags, summary: 'Create a SIP trunk', body: SipTrunkCreate, response: { 201: SipTrunk, ...errorResponses(400, 401, 409) } } },
    async (req, reply) => {
      const input = req.body as SipTrunkInput & { pbx: Pbx };
      const settings = trunkForCreate(input);
      checkAclWidth(settings.inbound_acl, aclLimit);
      checkTrunk(settings, { inbound: Boolean(input.inbound_sip_password), outbound: Boolean(input.outbound_sip_password) });
      const id = newId();
      const trunk = await withConflicts(() =>
        store.tx(async (tx) => {
          await checkUsernameFree(tx, settings.inbound_sip_username, id);
          await tx.sipTrunks.insert({
            id,
            org_id: req.org.id,
            settings,
            passwords: { inbound_sip_password: input.inbound_sip_password, outbound_sip_password: input.outbound_sip_password },
            created_at: nowIso(),
          });
          return (await tx.sipTrunks.get(req.org.id, id))!;
        }),
      );
      req.log.info({ sipTrunkId: id, pbx: settings.pbx }, 'sip trunk created');
      return reply.code(201).send(toSipTrunkResource(trunk));
    },
  );

  app.get(
    '/v1/sip-trunks',
    {
      schema: {
        tags,
        summary: 'List the SIP trunks',
        querystring: Pagination(config.limits.max_page_size),
        response: { 200: Type.Array(SipTrunk), ...errorResponses(400, 401) },
      },
    },
    async (req) => {
      const q = req.query as { limit?: number; offset?: number };
      return (await store.sipTrunks.list(req.org.id, q.limit ?? 100, q.offset ?? 0)).map(toSipTrunkResource);
    },
  );

  // Static segment: registered alongside /v1/sip-trunks/:id, preferred by the router for this path.
  app.get(
    '/v1/sip-trunks/assignments/:assignmentId',
    { schema: { tags, summary: 'Get an assignment', params: AssignmentParams, response: { 200: Assignment, ...errorResponses(400, 401, 404) } } },
    async (req) => {
      const { assignmentId } = req.params as { assignmentId: string };
      const assignment = await store.assignments.get(req.org.id, assignmentId);
      if (!assignment) throw notFound('assignment');
      return withWarnings(store, req.org.id, assignment);
    },
  );

  app.patch(
    '/v1/sip-trunks/assignments/:assignmentId',
    {
      schema: {
        tags,
        summary: 'Change the numbers of an assignment (null clears one)',
        params: AssignmentParams,
        body: AssignmentPatch,
        response: { 200: Assignment, ...errorResponses(400, 401, 404, 409) },
      },
    },
    async (req) => {
      const { assignmentId } = req.params as { assignmentId: string };
      const input = req.body as { number?: string | null; alternate_number?: string | null };
      const updated = await withConflicts(() =>
        store.tx(async (tx) => {
          const current = await tx.assignments.get(req.org.id, assignmentId);
          if (!current) throw notFound('assignment');
          const number = input.number === undefined ? current.number || null : input.number;
          const alternate = input.alternate_number === undefined ? current.alternate_number || null : input.alternate_number;
          checkHasNumber(number, alternate);
          await checkNumbersFree(tx, req.org.id, current.sip_trunk_id, assignmentId, number, alternate);
          await tx.assignments.update(assignmentId, { number, alternate_number: alternate });
          return (await tx.assignments.get(req.org.id, assignmentId))!;
        }),
      );
      return withWarnings(store, req.org.id, updated);
    },
  );

  app.delete(
    '/v1/sip-trunks/assignments/:assignmentId',
    { schema: { tags, summary: 'Delete an assignment', params: AssignmentParams, response: { 204: Type.Null(), ...errorResponses(400, 401, 404) } } },
    async (req, reply) => {
      const { assignmentId } = req.params as { assignmentId: string };
      if (!(await store.tx((tx) => tx.assignments.delete(req.org.id, assignmentId)))) throw notFound('assignment');
      req.log.info({ assignmentId }, 'sip trunk assignment deleted');
      return reply.code(204).send();
    },
  );

  app.get(
    '/v1/sip-trunks/:id',
    { schema: { tags, summary: 'Get a SIP trunk', params: IdParams, response: { 200: SipTrunk, ...errorResponses(400, 401, 404) } } },
    async (req) => {
      const { id } = req.params as { id: string };
      const trunk = await store.sipTrunks.get(req.org.id, id);
      if (!trunk) throw notFound('sip trunk');
      return toSipTrunkResource(trunk);
    },
  );

  app.patch(
    '/v1/sip-trunks/:id',
    {
      schema: {
        tags,
        summary: 'Change a SIP trunk (only the sent fields)',
        params: IdParams,
        body: SipTrunkPatch,
        response: { 200: SipTrunk, ...errorResponses(400, 401, 404, 409) },
      },
    },
    async (req) => {
      const { id } = req.params as { id: string };
      const input = req.body as SipTrunkInput;
      // The service's document: "400 Validation error or no fields to update".
      if (Object.keys(input).length === 0) throw validation('body has no fields to update');
      const updated = await withConflicts(() =>
        store.tx(async (tx) => {
          const current = await tx.sipTrunks.get(req.org.id, id);
          if (!current) throw notFound('sip trunk');
          const settings = applyTrunkPatch(current, input);
          // Only a sent list is checked: a PATCH of another field leaves an older, wider ACL as it
          // is (it still routes; the daemon warns about it at start).
          if (input.inbound_acl) checkAclWidth(settings.inbound_acl, aclLimit);
          checkTrunk(settings, {
            inbound: input.inbound_sip_password === undefined ? current.has_inbound_sip_password : Boolean(input.inbound_sip_password),
            outbound: input.outbound_sip_password === undefined ? current.has_outbound_sip_password : Boolean(input.outbound_sip_password),
          });
          await checkUsernameFree(tx, settings.inbound_sip_username, id);
          await tx.sipTrunks.update({
            id,
            org_id: req.org.id,
            settings,
            passwords: { inbound_sip_password: input.inbound_sip_password, outbound_sip_password: input.outbound_sip_password },
            updated_at: nowIso(),
            // The registration with the carrier starts over (docs/sip-registration-client.md).
            outboundChanged:
              settings.register !== current.register ||
              settings.outbound_host !== current.outbound_host ||
              settings.outbound_sip_username !== current.outbound_sip_username ||
              settings.pbx !== current.pbx ||
              input.outbound_sip_password !== undefined,
          });
          return (await tx.sipTrunks.get(req.org.id, id))!;
        }),
      );
      req.log.info({ sipTrunkId: id }, 'sip trunk updated');
      return toSipTrunkResource(updated);
    },
  );

  app.delete(
    '/v1/sip-trunks/:id',
    {
      schema: { tags, summary: 'Delete a SIP trunk and its assignments', params: IdParams, response: { 204: Type.Null(), ...errorResponses(400, 401, 404) } },
    },
    async (req, reply) => {
      const { id } = req.params as { id: string };
      if (!(await store.tx((tx) => tx.sipTrunks.delete(req.org.id, id)))) throw notFound('sip trunk');
      req.log.info({ sipTrunkId: id }, 'sip trunk deleted');
      return reply.code(204).send();
    },
  );

  app.post(
    '/v1/sip-trunks/:id/assignments',
    {
      schema: {
        tags,
        summary: 'Assign an agent to numbers on the trunk',
        params: IdParams,
        body: AssignmentCreate,
        response: { 201: Assignment, ...errorResponses(400, 401, 404, 409) },
      },
    },
    async (req, reply) => {
      const { id } = req.params as { id: string };
      const input = req.body as { agent_id: string; number?: string | null; alternate_number?: string | null };
      const number = input.number ?? null;
      const alternate = input.alternate_number ?? null;
      checkHasNumber(number, alternate);
      const assignmentId = newId();
      const assignment = await withConflicts(() =>
        store.tx(async (tx) => {
          if (!(await tx.sipTrunks.get(req.org.id, id))) throw notFound('sip trunk');
          if (!(await tx.agents.get(req.org.id, input.agent_id))) throw validation('body.agent_id does not name an agent of this organization');
          await checkNumbersFree(tx, req.org.id, id, assignmentId, number, alternate);
          await tx.assignments.insert({ id: assignmentId, sip_trunk_id: id, agent_id: input.agent_id, number, alternate_number: alternate, created_at: nowIso() });
          return (await tx.assignments.get(req.org.id, assignmentId))!;
        }),
      );
      req.log.info({ sipTrunkId: id, assignmentId, agentId: input.agent_id }, 'sip trunk assignment created');
      return reply.code(201).send(await withWarnings(store, req.org.id, assignment));
    },
  );

  app.get(
    '/v1/sip-trunks/:id/assignments',
    { schema: { tags, summary: 'List the assignments of a trunk', params: IdParams, response: { 200: Type.Array(Assignment), ...errorResponses(400, 401, 404) } } },
    async (req) => {
      const { id } = req.params as { id: string };
      if (!(await store.sipTrunks.get(req.org.id, id))) throw notFound('sip trunk');
      return Promise.all((await store.assignments.listByTrunk(id)).map((a) => withWarnings(store, req.org.id, a)));
    },
  );
}
