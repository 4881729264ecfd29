/**
 * Outbound lists and runs (docs/outbound.md): a list of contacts to call for one agent, through
 * one SIP trunk or from the agent's carrier number, and runs that call them with pacing, retries
 * and a calling window (the dialer of src/outbound/ places the calls). Ours, in the service's
 * style: snake_case, organization-scoped, `{ "error" }` with 400, 404 and 409.
 */
import type { FastifyInstance } from 'fastify';
import { Type } from '@sinclair/typebox';
import type { ApiDeps } from '../context.ts';
import { DateTime, errorResponses, IdParams, Obj, Uuid, Variable } from '../schemas.ts';
import { conflict, notFound, validation } from '../../domain/errors.ts';
import { newId, nowIso } from '../../domain/ids.ts';
import { DIAL_STRING_PATTERN, E164_PATTERN, isDialString, normalizeDialString } from '../../domain/phone.ts';
import {
  checkWindow,
  CONTACT_STATES,
  isTimeZone,
  MAX_CONTACT_VARIABLES,
  MAX_CONTACTS_PER_REQUEST,
  parseContactsCsv,
  RETRYABLE_OUTCOMES,
  RUN_STATUSES,
  WEEKDAYS,
  type ContactVariables,
  type RunSettings,
} from '../../domain/outbound.ts';
import type { OutboundList } from '../../store/outbound-lists.ts';
import type { OutboundRun } from '../../store/outbound-runs.ts';

const Enum = (values: readonly string[], description?: string) => Type.Unsafe<string>({ type: 'string', enum: [...values], ...(description ? { description } : {}) });
const MAX_PAGE = 1000;
const Paging = Obj({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_PAGE, default: 100 })), offset: Type.Optional(Type.Integer({ minimum: 0, default: 0 })) });

const ContactIn = Obj({
  phone_number: Type.String({ maxLength: 40, description: 'E.164, or a dial string of digits, * and # the trunk accepts' }),
  variables: Type.Optional(Type.Array(Variable, { maxItems: MAX_CONTACT_VARIABLES, description: 'reach the agent exactly as a dial\'s variables' })),
  timezone: Type.Optional(Type.String({ maxLength: 64, description: 'the contact\'s IANA time zone: a run\'s window applies in it (default: the window\'s)' })),
});
const ContactsIn = Type.Array(ContactIn, { maxItems: MAX_CONTACTS_PER_REQUEST, description: `at most ${MAX_CONTACTS_PER_REQUEST} per request` });
const ContactTimezone = Type.Optional(Type.String({ description: 'the contact\'s IANA time zone, when it has one' }));
const Contact = Type.Object({ id: Uuid(), phone_number: Type.String(), variables: Type.Array(Variable), timezone: ContactTimezone, created_at: DateTime() }, { title: 'OutboundContact' });
const listFields = {
  id: Uuid(),
  name: Type.String(),
  agent_id: Uuid(),
  sip_trunk_id: Type.Optional(Uuid()),
  from_number: Type.Optional(Type.String()),
  caller_id: Type.Optional(Type.String()),
  contact_count: Type.Integer(),
  created_at: DateTime(),
};
const List = Type.Object(listFields, { title: 'OutboundList' });
const CreatedList = Type.Object({ ...listFields, duplicates: Type.Array(Type.String(), { description: 'phone numbers sent more than once: added once' }) }, { title: 'CreatedOutboundList' });
const AddedContacts = Type.Object(
  { added: Type.Integer(), duplicates: Type.Array(Type.String(), { description: 'phone numbers the list had already, or sent twice: not added again' }), contact_count: Type.Integer() },
  { title: 'AddedOutboundContacts' },
);

const Retry = Obj({
  max_attempts: Type.Integer({ minimum: 1, maximum: 20, description: 'calls to one contact at most, the first included' }),
  backoff_secs: Type.Integer({ minimum: 0, maximum: 7 * 86400, description: 'wait after an attempt before the next' }),
  on: Type.Array(Enum(RETRYABLE_OUTCOMES), { maxItems: RETRYABLE_OUTCOMES.length, uniqueItems: true, description: 'outcomes that are retried; a completed call never is' }),
});
const Window = Obj({
  timezone: Type.String({ maxLength: 64, description: 'IANA time zone, e.g. Europe/Berlin' }),
  days: Type.Array(Enum(WEEKDAYS), { minItems: 1, maxItems: 7, uniqueItems: true }),
  start: Type.String({ pattern: '^([01][0-9]|2[0-3]):[0-5][0-9]$', description: 'HH:MM local time' }),
  end: Type.String({ pattern: '^([01][0-9]|2[0-3]):[0-5][0-9]$', description: 'HH:MM local time; before start: the window runs past midnight' }),
});
const MachineDetection = Obj({ mode: Enum(['off', 'hangup', 'leave_message']), message: Type.Optional(Type.String({ maxLength: 10_000 })) });
const runSettingsFields = {
  max_concurrent: Type.Integer({ minimum: 1, maximum: 1000, description: 'calls of this run up at once, at most' }),
  calls_per_minute: Type.Optional(Type.Integer({ minimum: 1, maximum: 600, description: 'new calls per minute, spread evenly' })),
  retry: Retry,
  window: Type.Optional(Window),
  machine_detection: Type.Optional(MachineDetection),
};
const Run = Type.Object(
  {
    id: Uuid(),
    list_id: Uuid(),
    status: Enum(RUN_STATUSES),
    ...runSettingsFields,
    counts: Type.Object(Object.fromEntries(CONTACT_STATES.map((s) => [s, Type.Integer()])), { description: 'contacts per state' }),
    created_at: DateTime(),
    updated_at: DateTime(),
    finished_at: Type.Optional(DateTime()),
  },
  { title: 'OutboundRun' },
);
const RunContact = Type.Object(
  { contact_id: Uuid(), phone_number: Type.String(), timezone: ContactTimezone, state: Enum(CONTACT_STATES), attempts: Type.Integer(), last_outcome: Type.Optional(Type.String()), last_call_id: Type.Optional(Uuid()) },
  { title: 'OutboundRunContact' },
);
const RunParams = Obj({ id: Uuid('the list'), run_id: Uuid('the run') });
const ContactParams = Obj({ id: Uuid('the list'), contact_id: Uuid('the contact') });

interface ContactBody {
  phone_number: string;
  variables?: ContactVariables;
  timezone?: string;
}

const showList = (l: OutboundList, contactCount: number) => ({
  id: l.id,
  name: l.name,
  agent_id: l.agent_id,
  ...(l.sip_trunk_id !== null ? { sip_trunk_id: l.sip_trunk_id } : {}),
  ...(l.from_number !== null ? { from_number: l.from_number } : {}),
  ...(l.caller_id !== null ? { caller_id: l.caller_id } : {}),
  contact_count: contactCount,
  created_at: l.created_at,
});

const showRun = (r: OutboundRun) => ({
  id: r.id,
  list_id: r.list_id,
  status: r.status,
  ...r.settings,
  counts: r.counts,
  created_at: r.created_at,
  updated_at: r.updated_at,
  ...(r.finished_at !== null ? { finished_at: r.finished_at } : {}),
});

/** Checked and normalized contacts; @throws validation naming the first bad one. */
function checkedContacts(contacts: ContactBody[], field: string): Array<{ id: string; phone_number: string; variables: ContactVariables; timezone: string | null }> {
  if (contacts.length > MAX_CONTACTS_PER_REQUEST) throw validation(`${field}: at most ${MAX_CONTACTS_PER_REQUEST} contacts per request`);
  return contacts.map((c, i) => {
    if (!isDialString(c.phone_number)) throw validation(`${field}[${i}].phone_number must be an E.164 number or a dial string of digits, * and #`);
    const variables = c.variables ?? [];
    if (variables.length > MAX_CONTACT_VARIABLES) throw validation(`${field}[${i}].variables: at most ${MAX_CONTACT_VARIABLES}`);
    if (c.timezone !== undefined && (c.timezone.length > 64 || !isTimeZone(c.timezone))) throw validation(`${field}[${i}].timezone: "${c.timezone.slice(0, 64)}" is not an IANA time zone`);
    return { id: newId(), phone_number: normalizeDialString(c.phone_number), variables, timezone: c.timezone ?? null };
  });
}

export async function outboundListRoutes(app: FastifyInstance, deps: ApiDeps): Promise<void> {
  const { store } = deps;
  const tags = ['outbound'];
  // A CSV of contacts (POST .../contacts): read as text, parsed by the route.
  app.addContentTypeParser('text/csv', { parseAs: 'string' }, (_req, body, done) => done(null, body));

  const listOf = async (orgId: string, id: string): Promise<OutboundList> => {
    const l = await store.outboundLists.get(orgId, id);
    if (!l) throw notFound('outbound list');
    return l;
  };

  app.post(
    '/v1/outbound-lists',
    {
      schema: {
        tags,
        summary: 'Create an outbound list (with its first contacts)',
        body: Obj({
          name: Type.String({ minLength: 1, maxLength: 256 }),
          agent_id: Uuid('the agent the calls are for'),
          sip_trunk_id: Type.Optional(Uuid('call through this SIP trunk (the agent must be assigned on it)')),
          from_number: Type.Optional(Type.String({ pattern: E164_PATTERN, description: 'call from the agent\'s imported carrier number (this one)' })),
          caller_id: Type.Optional(Type.String({ pattern: DIAL_STRING_PATTERN, description: 'caller ID of trunk calls (as the dial\'s callerId)' })),
          contacts: Type.Optional(ContactsIn),
        }),
        response: { 201: CreatedList, ...errorResponses(400, 401, 404) },
      },
    },
    async (req, reply) => {
      const b = req.body as { name: string; agent_id: string; sip_trunk_id?: string; from_number?: string; caller_id?: string; contacts?: ContactBody[] };
      if ((b.sip_trunk_id === undefined) === (b.from_number === undefined)) throw validation('body: send exactly one of sip_trunk_id and from_number');
      const contacts = checkedContacts(b.contacts ?? [], 'body.contacts');
      const agent = await store.agents.get(req.org.id, b.agent_id);
      if (!agent) throw notFound('agent');
      if (b.sip_trunk_id !== undefined) {
        if (!(await store.sipTrunks.get(req.org.id, b.sip_trunk_id))) throw notFound('sip trunk');
        if (!(await store.assignments.listByTrunk(b.sip_trunk_id)).some((a) => a.agent_id === agent.id)) throw validation('body.sip_trunk_id: the agent has no assignment on that SIP trunk');
      } else {
        const number = agent.phone_number_id ? await store.telcoNumbers.get(req.org.id, agent.phone_number_id) : undefined;
        if (number === undefined || number.phone_number !== b.from_number) throw validation('body.from_number must be the agent\'s carrier number (its phone_number_id)');
        if (b.caller_id !== undefined && b.caller_id !== b.from_number) throw validation('body.caller_id applies to SIP trunk lists: carrier-number calls are from from_number');
      }
      const list: OutboundList = {
        id: newId(),
        org_id: req.org.id,
        name: b.name,
        agent_id: agent.id,
        sip_trunk_id: b.sip_trunk_id ?? null,
        from_number: b.from_number ?? null,
        caller_id: b.caller_id ?? null,
        created_at: nowIso(),
      };
      const { added, duplicates } = await store.tx(async (tx) => {
        await tx.outboundLists.insert(list);
        return tx.outboundLists.addContacts(list.id, contacts, list.created_at);
      });
      return reply.code(201).send({ ...showList(list, added.length), duplicates });
    },
  );

  app.get('/v1/outbound-lists', { schema: { tags, summary: 'The organization\'s outbound lists, newest first', querystring: Paging, response: { 200: Type.Array(List), ...errorResponses(400, 401) } } }, async (req) => {
    const q = req.query as { limit?: number; offset?: number };
    return (await store.outboundLists.list(req.org.id, q.limit ?? 100, q.offset ?? 0)).map((l) => showList(l, l.contact_count));
  });

  app.get('/v1/outbound-lists/:id', { schema: { tags, params: IdParams, response: { 200: List, ...errorResponses(400, 401, 404) } } }, async (req) => {
    const l = await listOf(req.org.id, (req.params as { id: string }).id);
    return showList(l, await store.outboundLists.contactCount(l.id));
  });

  app.post(
    '/v1/outbound-lists/:id/contacts',
    {
      schema: {
        tags,
        summary: 'Add contacts: JSON { contacts }, or text/csv with a header row (phone_number, an optional timezone, and one column per variable)',
        params: IdParams,
        body: Type.Union([Obj({ contacts: ContactsIn }), Type.String({ description: 'text/csv' })]),
        response: { 201: AddedContacts, ...errorResponses(400, 401, 404, 413) },
      },
    },
    async (req, reply) => {
      const l = await listOf(req.org.id, (req.params as { id: string }).id);
      const body = req.body as { contacts: ContactBody[] } | string;
      const raw = typeof body === 'string' ? parseContactsCsv(body) : body.contacts;
      const contacts = checkedContacts(raw, typeof body === 'string' ? 'body (CSV) contacts' : 'body.contacts');
      const { added, duplicates } = await store.outboundLists.addContacts(l.id, contacts, nowIso());
      return reply.code(201).send({ added: added.length, duplicates, contact_count: await store.outboundLists.contactCount(l.id) });
    },
  );

  app.get('/v1/outbound-lists/:id/contacts', { schema: { tags, params: IdParams, querystring: Paging, response: { 200: Type.Array(Contact), ...errorResponses(400, 401, 404) } } }, async (req) => {
    const l = await listOf(req.org.id, (req.params as { id: string }).id);
    const q = req.query as { limit?: number; offset?: number };
    return (await store.outboundLists.contacts(l.id, q.limit ?? 100, q.offset ?? 0)).map((c) => ({ id: c.id, phone_number: c.phone_number, variables: c.variables, ...(c.timezone !== null ? { timezone: c.timezone } : {}), created_at: c.created_at }));
  });

  app.delete('/v1/outbound-lists/:id/contacts/:contact_id', { schema: { tags, params: ContactParams, response: { 204: Type.Null(), ...errorResponses(400, 401, 404) } } }, async (req, reply) => {
    const p = req.params as { id: string; contact_id: string };
    const l = await listOf(req.org.id, p.id);
    if (!(await store.outboundLists.deleteContact(l.id, p.contact_id))) throw notFound('contact');
    return reply.code(204).send();
  });

  app.post(
    '/v1/outbound-lists/:id/runs',
    {
      schema: {
        tags,
        summary: 'Start a run over the list\'s contacts (one open run per list)',
        params: IdParams,
        body: Obj(runSettingsFields),
        response: { 201: Run, ...errorResponses(400, 401, 404, 409) },
      },
    },
    async (req, reply) => {
      const l = await listOf(req.org.id, (req.params as { id: string }).id);
      const settings = req.body as RunSettings;
      if (settings.window !== undefined) checkWindow(settings.window);
      const id = newId();
      await store.tx(async (tx) => {
        // One open run per list: two would call its contacts twice.
        if ((await tx.client.get('SELECT 1 AS x FROM outbound_runs WHERE list_id = ? AND finished_at IS NULL', [l.id])) !== undefined) throw conflict('the list has an open run: cancel it or let it complete first');
        await tx.outboundRuns.create({ id, org_id: req.org.id, list_id: l.id, settings, created_at: nowIso() });
      });
      const run = await store.outboundRuns.get(req.org.id, l.id, id);
      return reply.code(201).send(showRun(run!));
    },
  );

  app.get('/v1/outbound-lists/:id/runs', { schema: { tags, params: IdParams, querystring: Paging, response: { 200: Type.Array(Run), ...errorResponses(400, 401, 404) } } }, async (req) => {
    const l = await listOf(req.org.id, (req.params as { id: string }).id);
    const q = req.query as { limit?: number; offset?: number };
    const runs = await Promise.all((await store.outboundRuns.listOf(req.org.id, l.id, q.limit ?? 100, q.offset ?? 0)).map((id) => store.outboundRuns.get(req.org.id, l.id, id)));
    return runs.flatMap((r) => (r ? [showRun(r)] : []));
  });

  app.get('/v1/outbound-lists/:id/runs/:run_id', { schema: { tags, params: RunParams, response: { 200: Run, ...errorResponses(400, 401, 404) } } }, async (req) => {
    const p = req.params as { id: string; run_id: string };
    const run = await store.outboundRuns.get(req.org.id, p.id, p.run_id);
    if (!run) throw notFound('outbound run');
    return showRun(run);
  });

  app.get('/v1/outbound-lists/:id/runs/:run_id/contacts', { schema: { tags, summary: 'The run\'s contacts with their state and attempts', params: RunParams, querystring: Paging, response: { 200: Type.Array(RunContact), ...errorResponses(400, 401, 404) } } }, async (req) => {
    const p = req.params as { id: string; run_id: string };
    if (!(await store.outboundRuns.get(req.org.id, p.id, p.run_id))) throw notFound('outbound run');
    const q = req.query as { limit?: number; offset?: number };
    return (await store.outboundRuns.contacts(p.run_id, q.limit ?? 100, q.offset ?? 0)).map((c) => ({
      contact_id: c.contact_id,
      phone_number: c.phone_number,
      ...(c.timezone !== null ? { timezone: c.timezone } : {}),
      state: c.state,
      attempts: Number(c.attempts),
      ...(c.last_outcome !== null ? { last_outcome: c.last_outcome } : {}),
      ...(c.call_id !== null ? { last_call_id: c.call_id } : {}),
    }));
  });

  for (const action of ['pause', 'resume', 'cancel'] as const) {
    app.post(`/v1/outbound-lists/:id/runs/:run_id/${action}`, { schema: { tags, params: RunParams, response: { 200: Run, ...errorResponses(400, 401, 404, 409) } } }, async (req) => {
      const p = req.params as { id: string; run_id: string };
      const before = await store.outboundRuns.get(req.org.id, p.id, p.run_id);
      if (!before) throw notFound('outbound run');
      if (!(await store.outboundRuns.transition(req.org.id, p.id, p.run_id, action, nowIso()))) throw conflict(`a ${before.status} run cannot be ${action === 'cancel' ? 'canceled' : action === 'pause' ? 'paused' : 'resumed'}`);
      return showRun((await store.outboundRuns.get(req.org.id, p.id, p.run_id))!);
    });
  }
}
