/**
 * Organization isolation, as a lasting sweep: organization B never reaches organization A's data or calls,
 * through any REST route or the voice WebSocket.
 *
 * The route list is not written here: it is the daemon's own `GET /v1/openapi.json`, checked
 * against every route Fastify actually serves (so a route hidden from the document cannot skip
 * the sweep either). Each operation must have an entry in OPS (how to send it validly), each path
 * parameter must map to a resource kind (PATH_PARAM_KIND), and each query parameter or body field
 * that carries an id must be classified (ID_FIELDS): a route, parameter or field the tables do not
 * know fails the first test, naming it.
 *
 * For every operation and every non-empty subset of its id slots (path parameters and id fields),
 * B sends the request with A's ids in that subset and B's own ids elsewhere. The answer must be
 * 404 when a path names A's resource (DESIGN.md: "404 not found or owned by another organization,
 * never 403"), a 4xx otherwise (200 for filters), never contain any of A's ids, names or numbers,
 * and be byte-for-byte the answer to the same request with fresh random ids in A's place: B cannot
 * tell A's id from one that does not exist. Then each request is sent with B's ids only (the
 * control), which must succeed: proof that the probes were refused for the foreign id and not for
 * a malformed request. Every GET of the document, read with A's key before and after everything,
 * must answer the same: nothing of A changed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes, randomUUID } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import WebSocket from 'ws';
import { decodeJwt } from 'jose';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';

type Kind = 'agent' | 'version' | 'telcoNumber' | 'trunk' | 'assignment' | 'call' | 'organization' | 'webhook' | 'apiKey' | 'outboundList' | 'outboundRun' | 'outboundContact';
type Ids = Record<Kind, string>;

/**
 * The resource a path parameter names, by the collection segment before it (`id` alone names four
 * kinds). A route whose parameter is not here fails the coverage test.
 */
const PATH_PARAM_KIND: Record<string, Kind> = {
  'agents/{id}': 'agent',
  'versions/{versionId}': 'version',
  // /v1/telco/numbers and its alias /v1/twilio/numbers
  'numbers/{id}': 'telcoNumber',
  'sip-trunks/{id}': 'trunk',
  'assignments/{assignmentId}': 'assignment',
  'calls/{id}': 'call',
  'webhooks/{id}': 'webhook',
  'api-keys/{id}': 'apiKey',
  'outbound-lists/{id}': 'outboundList',
  'runs/{run_id}': 'outboundRun',
  'contacts/{contact_id}': 'outboundContact',
};

/**
 * Query parameters and top-level body fields that look like ids (by name, or a uuid pattern in
 * their schema). `refused`: naming A's resource must fail as a missing id does. `filtered`: a
 * filter or an ignored parameter, answered 200 as if the id did not exist. `notAnId`: why the
 * field names nothing of an organization.
 */
type IdField = { kind: Kind; answer: 'refused' | 'filtered' } | { notAnId: string };
const ID_FIELDS: Record<string, IdField> = {
  agent_id: { kind: 'agent', answer: 'refused' },
  version_id: { kind: 'version', answer: 'refused' },
  graph_version_id: { kind: 'version', answer: 'refused' },
  phone_number_id: { kind: 'telcoNumber', answer: 'refused' },
  sipTrunkId: { kind: 'trunk', answer: 'refused' },
  sip_trunk_id: { kind: 'trunk', answer: 'refused' },
  agent_ids: { kind: 'agent', answer: 'filtered' },
  organization_id: { kind: 'organization', answer: 'filtered' },
  outbound_list_run_id: { kind: 'outboundRun', answer: 'filtered' },
  outbound_contact_id: { kind: 'outboundContact', answer: 'filtered' },
  chat_id: { notAnId: 'an opaque client reference stored with the session; nothing is read by it (there is no chat store)' },
  callerId: { notAnId: 'a dial string shown to the callee' },
  caller_id: { notAnId: 'a dial string (dial) or the party number of a session (session-token)' },
  account_sid: { notAnId: "the carrier's account, authenticated by the carrier with auth_token, not by us" },
};
const ID_LIKE_NAME = /(^|_)(ids?|sids?)$|[a-z](Ids?|Sids?)$/;

/** The id for an id field of a request; the sweep decides whose (A's, B's, or a fresh one). */
type IdFor = (field: string) => string;
interface Variant {
  query?: (id: IdFor) => Record<string, string>;
  body?: (id: IdFor) => unknown;
}
interface Case {
  /** Valid requests (default: one with no query and no body). */
  variants?: Variant[];
  /** Status of each variant sent by B with B's own ids. */
  control: number;
  /** B's ids for the control where the defaults would collide (a number one agent already holds). */
  controlIds?: (b: OrgB) => Partial<Ids>;
  /** Status of the GET read with A's key and A's ids (the before/after snapshot); default 200. */
  ownerRead?: number;
  /** Why the route needs no API key (then the probes are the same request without one). */
  public?: string;
}

const DIAL_TO = '+15550109999';

/** Every operation of /v1/openapi.json, keyed "METHOD path". A missing one fails the coverage test. */
const OPS: Record<string, Case> = {
  'GET /healthz': { control: 200, public: 'liveness probe' },
  'GET /readyz': { control: 200, public: 'readiness probe' },
  'POST /v1/agents': {
    variants: [{ body: (id) => ({ name: 'Bravo created agent', phone_number_id: id('phone_number_id') }) }],
    control: 201,
    controlIds: (b) => ({ telcoNumber: b.spareNumbers[0] }),
  },
  'GET /v1/agents': { control: 200 },
  'GET /v1/agents/{id}': { control: 200 },
  'PATCH /v1/agents/{id}': {
    variants: [{ body: (id) => ({ prompt: 'changed by Bravo', phone_number_id: id('phone_number_id') }) }],
    control: 200,
    controlIds: (b) => ({ telcoNumber: b.spareNumbers[1] }),
  },
  'DELETE /v1/agents/{id}': { control: 204 },
  'GET /v1/agents/{id}/draft': { control: 200 },
  'PUT /v1/agents/{id}/draft': { variants: [{ body: () => ({ nodes: [{ id: 'bravo-overwrite', type: 'conversation' }] }) }], control: 200 },
  'GET /v1/agents/{id}/versions': { control: 200 },
  'POST /v1/agents/{id}/versions': { variants: [{ body: () => ({ tag: 'bravo-snapshot' }) }], control: 201 },
  'GET /v1/agents/{id}/versions/{versionId}': { control: 200 },
  // The probes' version of A is unpublished: a publish that slipped through would answer 200, not 409.
  'POST /v1/agents/{id}/versions/{versionId}/publish': { control: 200 },
  'POST /v1/agents/{id}/duplicate': {
    variants: [{ body: (id) => ({ graph_version_id: id('graph_version_id'), name: 'Bravo duplicate', publish: true }) }],
    control: 201,
  },
  'GET /v1/llms': { control: 200 },
  'GET /v1/voices': { control: 200 },
  'GET /v1/organization': { control: 200 },
  'POST /v1/telco/numbers': { variants: [{ body: () => importBody(0) }], control: 201 },
  'GET /v1/telco/numbers': { control: 200 },
  'PATCH /v1/telco/numbers/{id}': { variants: [{ body: () => ({ label: 'relabelled by Bravo' }) }], control: 200 },
  'DELETE /v1/telco/numbers/{id}': { control: 200 },
  'POST /v1/twilio/numbers': { variants: [{ body: () => importBody(1) }], control: 201 },
  'GET /v1/twilio/numbers': { control: 200 },
  'PATCH /v1/twilio/numbers/{id}': { variants: [{ body: () => ({ label: 'relabelled by Bravo (alias)' }) }], control: 200 },
  // The canonical route's control deletes B's first number; the alias's deletes another one of B's.
  'DELETE /v1/twilio/numbers/{id}': { control: 200, controlIds: (b) => ({ telcoNumber: b.spareNumbers[1] }) },
  'POST /v1/sip-trunks': { variants: [{ body: () => ({ pbx: 'generic', name: 'Bravo second trunk', inbound_auth_type: 'none' }) }], control: 201 },
  'GET /v1/sip-trunks': { control: 200 },
  'GET /v1/sip-trunks/assignments/{assignmentId}': { control: 200 },
  'PATCH /v1/sip-trunks/assignments/{assignmentId}': { variants: [{ body: () => ({ number: '#83029*' }) }], control: 200 },
  'DELETE /v1/sip-trunks/assignments/{assignmentId}': { control: 204 },
  'GET /v1/sip-trunks/{id}': { control: 200 },
  'PATCH /v1/sip-trunks/{id}': { variants: [{ body: () => ({ name: 'renamed by Bravo' }) }], control: 200 },
  'DELETE /v1/sip-trunks/{id}': { control: 204 },
  'POST /v1/sip-trunks/{id}/assignments': { variants: [{ body: (id) => ({ agent_id: id('agent_id'), number: '#83039*' }) }], control: 201 },
  'GET /v1/sip-trunks/{id}/assignments': { control: 200 },
  'GET /v1/calls': {
    variants: [
      {},
      { query: (id) => ({ agent_ids: id('agent_ids') }) },
      { query: (id) => ({ organization_id: id('organization_id') }) },
      { query: (id) => ({ outbound_list_run_id: id('outbound_list_run_id') }) },
      { query: (id) => ({ outbound_contact_id: id('outbound_contact_id') }) },
    ],
    control: 200,
  },
  'GET /v1/calls/{id}': { control: 200 },
  // No call is bridged during the sweep (the list is empty for everyone); a live call of one
  // organization unseen by another's key: test/console/console.test.ts.
  'GET /v1/calls/live': { control: 200 },
  // Recording is off, so B's own call has no recording either: its 404 says so ("call has no
  // recording"), where the probes' 404 is "call not found", the same as for a missing call.
  'GET /v1/calls/{id}/recording': { control: 404, ownerRead: 404 },
  'POST /v1/webhooks': { variants: [{ body: () => ({ url: 'https://hooks.example.com/bravo-second', events: ['call.ended'] }) }], control: 201 },
  'GET /v1/webhooks': { control: 200 },
  'GET /v1/webhooks/{id}': { control: 200 },
  'PATCH /v1/webhooks/{id}': { variants: [{ body: () => ({ description: 'changed by Bravo' }) }], control: 200 },
  'DELETE /v1/webhooks/{id}': { control: 204 },
  'GET /v1/webhooks/{id}/deliveries': { control: 200 },
  'POST /v1/api-keys': { variants: [{ body: () => ({ name: 'Bravo second key' }) }], control: 201 },
  'GET /v1/api-keys': { control: 200 },
  // B revokes its second key (it keeps B.key): A's key id is as unknown to B as a random one.
  'DELETE /v1/api-keys/{id}': { control: 204 },
  'POST /v1/agents/{id}/dial': {
    variants: [
      { query: (id) => ({ number: DIAL_TO, sipTrunkId: id('sipTrunkId') }) },
      { query: (id) => ({ number: DIAL_TO, sip_trunk_id: id('sip_trunk_id') }) },
    ],
    control: 200,
  },
  'POST /v1/session-token': {
    variants: [{ body: (id) => ({ agent_id: id('agent_id'), version_id: id('version_id') }) }],
    control: 200,
  },
  'POST /v1/outbound-lists': {
    variants: [{ body: (id) => ({ name: 'Bravo second list', agent_id: id('agent_id'), sip_trunk_id: id('sip_trunk_id'), contacts: [{ phone_number: '+15558300401' }] }) }],
    control: 201,
  },
  'GET /v1/outbound-lists': { control: 200 },
  'GET /v1/outbound-lists/{id}': { control: 200 },
  'POST /v1/outbound-lists/{id}/contacts': { variants: [{ body: () => ({ contacts: [{ phone_number: '+15558300402' }] }) }], control: 201 },
  'GET /v1/outbound-lists/{id}/contacts': { control: 200 },
  'DELETE /v1/outbound-lists/{id}/contacts/{contact_id}': { control: 204 },
  // B's list has its open run (a second one is a 409): the control starts one on B's spare list.
  'POST /v1/outbound-lists/{id}/runs': { variants: [{ body: () => PARKED_RUN }], control: 201, controlIds: (b) => ({ outboundList: b.spareList }) },
  'GET /v1/outbound-lists/{id}/runs': { control: 200 },
  'GET /v1/outbound-lists/{id}/runs/{run_id}': { control: 200 },
  'GET /v1/outbound-lists/{id}/runs/{run_id}/contacts': { control: 200 },
  // The controls run in the document's order: B's scheduled run is paused (200), the paused run
  // resumed (200, scheduled again), then canceled (200). The probes change no run of B's: each
  // names A's list or A's run, so B's run is still scheduled when its controls come.
  'POST /v1/outbound-lists/{id}/runs/{run_id}/pause': { control: 200 },
  'POST /v1/outbound-lists/{id}/runs/{run_id}/resume': { control: 200 },
  'POST /v1/outbound-lists/{id}/runs/{run_id}/cancel': { control: 200 },
};

/** The calling window of every run in the sweep, an hour from now to two (UTC, every day), so that
 * no run dials or changes while A's reads are compared: each stays `scheduled`. (Past midnight,
 * e.g. 23:30 -> 00:30-01:30 or 22:30 -> 23:30-00:30, the window still excludes now.) */
const hhmm = (hoursFromNow: number) => new Date(Date.now() + hoursFromNow * 3_600_000).toISOString().slice(11, 16);
const PARKED_RUN = {
  max_concurrent: 1,
  retry: { max_attempts: 1, backoff_secs: 60, on: [] },
  window: { timezone: 'UTC', days: ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'], start: hhmm(1), end: hhmm(2) },
};

/**
 * Routes Fastify serves that /v1/openapi.json hides, and why the REST sweep does without them.
 * Each is still read by B (or, for the socket, swept below) for A's data.
 */
const HIDDEN_ROUTES: Record<string, string> = {
  'GET /v1/openapi.json': 'public: the API description, no organization data',
  'GET /metrics': 'public: process and traffic totals, no organization data (checked below)',
  'GET /console': 'public: the operator console\'s static front end (docs/console.md), no organization data',
  'GET /console*': 'public: the operator console\'s static files and its libraries, no organization data',
  'GET /v1/connection': 'the voice WebSocket, authenticated by a session token: swept in its own test',
  'POST /v1/telco/twilio/voice': "the carrier's voice webhook, authenticated by X-Twilio-Signature with the number's own import's token: isolation in test/telco/twilio-inbound.test.ts",
  'GET /v1/telco/twilio/stream': "the carrier's media stream, authenticated by the webhook's one-time token: isolation in test/telco/twilio-inbound.test.ts",
  'POST /v1/telco/twilio/status': "the carrier's call status callbacks, authenticated by X-Twilio-Signature and applied only to calls of the signing account: test/telco/twilio-outbound.test.ts",
};

// Carrier accounts of the fake carrier: A's and B's are different accounts.
const B_ACCOUNT = `ACbravo${randomBytes(8).toString('hex')}`;
const B_TOKEN = 'bravo-carrier-token';
const B_IMPORTS = ['+15558300101', '+15558300102'];
const importBody = (i: number) => ({ phone_number: B_IMPORTS[i], account_sid: B_ACCOUNT, auth_token: B_TOKEN, label: `Bravo import ${i}` });

interface OrgB {
  key: string;
  ids: Ids;
  /** Imported, held by no agent: for the controls that assign a number. */
  spareNumbers: [string, string];
  /** An outbound list without a run: for the control that starts one. */
  spareList: string;
}

/** A UDP socket standing in for a trunk's far end: counts the INVITEs it gets, answers nothing. */
async function startInviteSink(): Promise<{ port: number; invites: () => number; close(): Promise<void> }> {
  const socket: Socket = createSocket('udp4');
  const callIds = new Set<string>();
  socket.on('message', (buf) => {
    const text = buf.toString('utf8');
    const callId = /^Call-ID:\s*(.+)$/im.exec(text)?.[1];
    if (text.startsWith('INVITE ') && callId) callIds.add(callId.trim());
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  return {
    port: (socket.address() as AddressInfo).port,
    invites: () => callIds.size,
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}

/** "METHOD /path/{param}" of every route Fastify serves (HEAD left out: Fastify derives it from GET). */
function servedRoutes(app: FastifyInstance): string[] {
  const stack: string[] = [];
  const out: string[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    if (line.trim() === '') continue;
    const m = /^((?:│ {3}| {4})*)(?:├── |└── )(\S+)(?: \(([^)]*)\))?$/.exec(line);
    // Fail loudly rather than sweep a partial list if Fastify changes its tree format.
    if (!m) throw new Error(`cannot read this line of Fastify's route tree: ${JSON.stringify(line)}`);
    stack.length = m[1]!.length / 4;
    stack.push(m[2]!);
    for (const method of m[3]?.split(', ') ?? []) {
      if (method !== 'HEAD') out.push(`${method} ${stack.join('').replace(/:(\w+)/g, '{$1}')}`);
    }
  }
  return out;
}

interface DocOperation {
  key: string;
  method: string;
  path: string;
  /** Names of the query parameters and top-level body fields that look like ids. */
  idFields: string[];
  /** Every query parameter and top-level body field name. */
  fields: Set<string>;
}

/** The operations of the daemon's own OpenAPI document (fastify-swagger: inline schemas). */
function documentOperations(doc: any): DocOperation[] {
  const ops: DocOperation[] = [];
  const looksLikeId = (name: string, schema: any) => ID_LIKE_NAME.test(name) || schema?.format === 'uuid' || /\[0-9a-fA-F\]\{8\}-/.test(String(schema?.pattern ?? ''));
  for (const [path, item] of Object.entries<any>(doc.paths)) {
    for (const [method, op] of Object.entries<any>(item)) {
      if (!['get', 'put', 'post', 'patch', 'delete'].includes(method)) continue;
      const fields = new Map<string, any>();
      for (const p of op.parameters ?? []) if (p.in === 'query') fields.set(p.name, p.schema);
      const addProps = (schema: any) => {
        if (!schema || typeof schema !== 'object') return;
        for (const [name, s] of Object.entries<any>(schema.properties ?? {})) fields.set(name, s);
        for (const sub of [...(schema.allOf ?? []), ...(schema.anyOf ?? []), ...(schema.oneOf ?? [])]) addProps(sub);
      };
      addProps(op.requestBody?.content?.['application/json']?.schema);
      ops.push({
        key: `${method.toUpperCase()} ${path}`,
        method: method.toUpperCase(),
        path,
        idFields: [...fields].filter(([name, s]) => looksLikeId(name, s)).map(([name]) => name),
        fields: new Set(fields.keys()),
      });
    }
  }
  return ops;
}

/** The path parameters of a template with the kind each names (undefined: unknown to the table). */
function pathParams(path: string): Array<{ param: string; kind: Kind | undefined; where: string }> {
  const segs = path.split('/');
  const out: Array<{ param: string; kind: Kind | undefined; where: string }> = [];
  segs.forEach((seg, i) => {
    const m = /^\{(\w+)\}$/.exec(seg);
    if (m) out.push({ param: m[1]!, kind: PATH_PARAM_KIND[`${segs[i - 1]}/${seg}`], where: `${segs[i - 1]}/${seg}` });
  });
  return out;
}

/** The id fields a variant's builders ask for (by calling them with a recorder). */
function slotsOf(v: Variant): string[] {
  const asked: string[] = [];
  const rec: IdFor = (field) => {
    asked.push(field);
    return randomUUID();
  };
  v.query?.(rec);
  v.body?.(rec);
  return asked;
}

/** Every non-empty subset of `xs`. */
function subsets<T>(xs: T[]): T[][] {
  const out: T[][] = [];
  for (let mask = 1; mask < 1 << xs.length; mask++) out.push(xs.filter((_, i) => mask & (1 << i)));
  return out;
}

describe('organization isolation, every route of /v1/openapi.json and the voice WebSocket', () => {
  let d: TestDaemon;
  let carrier: FakeCarrier;
  let sinkA: Awaited<ReturnType<typeof startInviteSink>>;
  let sinkB: Awaited<ReturnType<typeof startInviteSink>>;
  let ops: DocOperation[];
  const tag = randomBytes(4).toString('hex');
  const A = { key: '', ids: {} as Ids, versions: [] as string[], tokens: {} as { ws: string } };
  const B: OrgB = { key: '', ids: {} as Ids, spareNumbers: ['', ''], spareList: '' };
  /** Strings of A's that B must never see: ids, names, numbers, tokens. */
  const secrets: string[] = [];
  let before: Map<string, { op: string; status: number; text: string }>;

  const call = (key: string | null, method: string, path: string, body?: unknown) => d.api(method, path, body, { key });
  const must = async (key: string, method: string, path: string, body: unknown, status: number) => {
    const r = await call(key, method, path, body);
    if (r.status !== status) throw new Error(`setup: ${method} ${path} answered ${r.status}, expected ${status}: ${r.text}`);
    return r.body;
  };
  const leaked = (text: string) => secrets.filter((s) => text.includes(s));

  /** Every GET of the document, read with A's key and A's ids: "GET path" -> what A sees. */
  async function readA(): Promise<Map<string, { op: string; status: number; text: string }>> {
    const out = new Map<string, { op: string; status: number; text: string }>();
    // A route the tables do not know is left to the coverage test, which names it.
    for (const op of ops.filter((o) => o.method === 'GET' && pathParams(o.path).every((p) => p.kind))) {
      const { path } = build(op, {}, () => 'A', B.ids);
      const r = await call(A.key, 'GET', path);
      // A's own reads move its key's last_used_at (once a minute): that is A's doing, not B's.
      const text = op.key === 'GET /v1/api-keys' ? r.text.replace(/"last_used_at":(null|"[^"]*")/g, '"last_used_at":"-"') : r.text;
      out.set(`GET ${path}`, { op: op.key, status: r.status, text });
    }
    return out;
  }

  beforeAll(async () => {
    carrier = await startFakeCarrier();
    [sinkA, sinkB] = await Promise.all([startInviteSink(), startInviteSink()]);
    // No voice runtime: an admitted session says session_started and closes 1011, which is all
    // the socket test needs; a short ring timeout ends the control dials quickly.
    d = await startTestDaemon({ telco: { api_base_url: carrier.url }, sip: { ring_timeout_secs: 2 } }, undefined, { runtimeFactory: null });
    ops = documentOperations((await call(null, 'GET', '/v1/openapi.json')).body);

    // Organization A: the daemon's first organization, one of every resource.
    A.key = d.key;
    A.ids.organization = (await must(A.key, 'GET', '/v1/organization', undefined, 200)).id;
    const aAccount = `ACalpha${randomBytes(8).toString('hex')}`;
    const aPhone = '+15557301999';
    const aPhoneSid = carrier.addNumber(aAccount, 'alpha-carrier-token', aPhone);
    const number = await must(A.key, 'POST', '/v1/telco/numbers', { phone_number: aPhone, account_sid: aAccount, auth_token: 'alpha-carrier-token', label: `Alpha line ${tag}` }, 201);
    A.ids.telcoNumber = number.id;
    const agent = await must(A.key, 'POST', '/v1/agents', { name: `Alpha agent ${tag}`, prompt: `Alpha prompt ${tag}`, phone_number_id: number.id }, 201);
    A.ids.agent = agent.id;
    await must(A.key, 'PUT', `/v1/agents/${agent.id}/draft`, { nodes: [{ id: `alpha-node-${tag}`, type: 'conversation' }] }, 200);
    const v1 = await must(A.key, 'POST', `/v1/agents/${agent.id}/versions`, { tag: `alpha-v1-${tag}` }, 201);
    await must(A.key, 'POST', `/v1/agents/${agent.id}/versions/${v1.id}/publish`, undefined, 200);
    const v2 = await must(A.key, 'POST', `/v1/agents/${agent.id}/versions`, { tag: `alpha-v2-${tag}` }, 201);
    A.ids.version = v2.id; // unpublished: see the publish entry of OPS
    A.versions = [v1.id, v2.id];
    const trunk = await must(
      A.key,
      'POST',
      '/v1/sip-trunks',
      { pbx: 'generic', name: `Alpha PBX ${tag}`, inbound_sip_username: `alpha-${tag}`, inbound_sip_password: 'alpha-pass-1', outbound_host: `127.0.0.1:${sinkA.port}` },
      201,
    );
    A.ids.trunk = trunk.id;
    A.ids.assignment = (await must(A.key, 'POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, number: '#73019*' }, 201)).id;
    // The call record: a session token writes one (a web session, pending until it connects).
    // A phone call would need a peer answering on the trunk; its record is the same table.
    const callToken = (await must(A.key, 'POST', '/v1/session-token', { agent_id: agent.id, caller_id: `alpha-caller-${tag}` }, 200)).token as string;
    A.ids.call = decodeJwt(callToken).sub!;
    await must(A.key, 'GET', `/v1/calls/${A.ids.call}`, undefined, 200);
    // A webhook endpoint, subscribed to an event nothing in this test causes: its deliveries
    // (read before and after) stay the same.
    const hook = await must(A.key, 'POST', '/v1/webhooks', { url: `https://hooks.example.com/alpha-${tag}`, events: ['recording.ready'], description: `Alpha hook ${tag}` }, 201);
    A.ids.webhook = hook.id;
    const aKey = await must(A.key, 'POST', '/v1/api-keys', { name: `Alpha key ${tag}` }, 201);
    A.ids.apiKey = aKey.id;
    // A second token, for the socket test (an A token trying B's agent); left unused otherwise.
    A.tokens.ws = (await must(A.key, 'POST', '/v1/session-token', { agent_id: agent.id }, 200)).token;
    // An outbound list through A's trunk, with one contact, and a run parked outside its window.
    const aList = await must(
      A.key,
      'POST',
      '/v1/outbound-lists',
      { name: `Alpha list ${tag}`, agent_id: agent.id, sip_trunk_id: trunk.id, contacts: [{ phone_number: '+15557302999', variables: [{ key: `alpha_var_${tag}`, value: `Alpha value ${tag}` }] }] },
      201,
    );
    A.ids.outboundList = aList.id;
    A.ids.outboundContact = (await must(A.key, 'GET', `/v1/outbound-lists/${aList.id}/contacts`, undefined, 200))[0].id;
    A.ids.outboundRun = (await must(A.key, 'POST', `/v1/outbound-lists/${aList.id}/runs`, PARKED_RUN, 201)).id;
    // A's call record names A's run and contact, as the dialer marks a call it placed (the contact
    // was never claimed, so the run's contact stays pending): B's filters by A's run or contact
    // then have a call of A's they must not find.
    await d.daemon.store.outboundRuns.placed(A.ids.outboundRun, A.ids.outboundContact, 'sweep-setup', A.ids.call);
    for (const filter of [`outbound_list_run_id=${A.ids.outboundRun}`, `outbound_contact_id=${A.ids.outboundContact}`]) {
      const found = await must(A.key, 'GET', `/v1/calls?${filter}`, undefined, 200);
      if (found.calls?.[0]?.id !== A.ids.call) throw new Error(`setup: A's call is not found by ${filter}: ${JSON.stringify(found)}`);
    }
    secrets.push(
      ...Object.values(A.ids),
      ...A.versions,
      `Alpha agent ${tag}`,
      `Alpha prompt ${tag}`,
      `alpha-node-${tag}`,
      `alpha-v1-${tag}`,
      `alpha-v2-${tag}`,
      `Alpha line ${tag}`,
      aPhone,
      aPhoneSid,
      aAccount,
      `Alpha PBX ${tag}`,
      `alpha-${tag}`,
      '#73019*',
      `alpha-caller-${tag}`,
      `Alpha hook ${tag}`,
      hook.secret as string,
      `Alpha key ${tag}`,
      aKey.key as string,
      aKey.prefix as string,
      callToken,
      A.tokens.ws,
      `Alpha list ${tag}`,
      '+15557302999',
      `alpha_var_${tag}`,
      `Alpha value ${tag}`,
    );

    // Organization B: the same set, with its own carrier account and trunk far end.
    B.key = await d.newOrgKey(`Bravo org ${tag}`);
    B.ids.organization = (await must(B.key, 'GET', '/v1/organization', undefined, 200)).id;
    for (const [i, phone] of ['+15558300001', '+15558300002', '+15558300003', ...B_IMPORTS].entries()) {
      carrier.addNumber(B_ACCOUNT, B_TOKEN, phone);
      if (i > 2) continue; // B_IMPORTS are imported by the controls
      const n = await must(B.key, 'POST', '/v1/telco/numbers', { phone_number: phone, account_sid: B_ACCOUNT, auth_token: B_TOKEN }, 201);
      if (i === 0) B.ids.telcoNumber = n.id;
      else B.spareNumbers[i - 1] = n.id;
    }
    const bAgent = await must(B.key, 'POST', '/v1/agents', { name: 'Bravo agent' }, 201);
    B.ids.agent = bAgent.id;
    await must(B.key, 'PUT', `/v1/agents/${bAgent.id}/draft`, { nodes: [{ id: 'bravo-node', type: 'conversation' }] }, 200);
    const bv1 = await must(B.key, 'POST', `/v1/agents/${bAgent.id}/versions`, { tag: 'bravo-v1' }, 201);
    await must(B.key, 'POST', `/v1/agents/${bAgent.id}/versions/${bv1.id}/publish`, undefined, 200);
    B.ids.version = (await must(B.key, 'POST', `/v1/agents/${bAgent.id}/versions`, { tag: 'bravo-v2' }, 201)).id;
    const bTrunk = await must(B.key, 'POST', '/v1/sip-trunks', { pbx: 'generic', name: 'Bravo PBX', inbound_sip_username: `bravo-${tag}`, inbound_sip_password: 'bravo-pass-1', outbound_host: `127.0.0.1:${sinkB.port}` }, 201);
    B.ids.trunk = bTrunk.id;
    B.ids.assignment = (await must(B.key, 'POST', `/v1/sip-trunks/${bTrunk.id}/assignments`, { agent_id: bAgent.id, number: '#83019*' }, 201)).id;
    B.ids.call = decodeJwt((await must(B.key, 'POST', '/v1/session-token', { agent_id: bAgent.id }, 200)).token).sub!;
    B.ids.webhook = (await must(B.key, 'POST', '/v1/webhooks', { url: 'https://hooks.example.com/bravo', events: ['recording.ready'] }, 201)).id;
    B.ids.apiKey = (await must(B.key, 'POST', '/v1/api-keys', { name: 'Bravo key' }, 201)).id;
    const bList = { name: 'Bravo list', agent_id: bAgent.id, sip_trunk_id: bTrunk.id, contacts: [{ phone_number: '+15558300301', variables: [{ key: 'name', value: 'Bravo contact' }] }] };
    B.ids.outboundList = (await must(B.key, 'POST', '/v1/outbound-lists', bList, 201)).id;
    B.ids.outboundContact = (await must(B.key, 'GET', `/v1/outbound-lists/${B.ids.outboundList}/contacts`, undefined, 200))[0].id;
    B.ids.outboundRun = (await must(B.key, 'POST', `/v1/outbound-lists/${B.ids.outboundList}/runs`, PARKED_RUN, 201)).id;
    B.spareList = (await must(B.key, 'POST', '/v1/outbound-lists', { ...bList, name: 'Bravo spare list' }, 201)).id;

    before = await readA();
  });

  afterAll(async () => {
    await d?.close();
    await carrier?.close();
    await sinkA?.close();
    await sinkB?.close();
  });

  it('knows every route the daemon serves, every path parameter and every id field (a new one fails here)', () => {
    const problems: string[] = [];
    const documented = new Set(ops.map((o) => o.key));
    for (const route of servedRoutes(d.daemon.app)) {
      if (!documented.has(route) && !HIDDEN_ROUTES[route]) problems.push(`${route} is served but neither in /v1/openapi.json nor in HIDDEN_ROUTES`);
    }
    for (const route of Object.keys(HIDDEN_ROUTES)) if (!servedRoutes(d.daemon.app).includes(route)) problems.push(`HIDDEN_ROUTES names ${route}, which is not served`);
    for (const key of Object.keys(OPS)) if (!documented.has(key)) problems.push(`OPS names ${key}, which /v1/openapi.json does not have`);
    for (const op of ops) {
      const c = OPS[op.key];
      if (!c) {
        problems.push(`${op.key}: no entry in OPS (add how to send it, so the isolation sweep covers it)`);
        continue;
      }
      for (const p of pathParams(op.path)) if (!p.kind) problems.push(`${op.key}: path parameter ${p.where} has no kind in PATH_PARAM_KIND`);
      const asked = new Set((c.variants ?? [{}]).flatMap(slotsOf));
      for (const field of asked) {
        if (!op.fields.has(field)) problems.push(`${op.key}: OPS fills "${field}", which the operation does not have`);
        const f = ID_FIELDS[field];
        if (!f || 'notAnId' in f) problems.push(`${op.key}: OPS fills "${field}" as an id, but ID_FIELDS does not give it a kind`);
      }
      for (const field of op.idFields) {
        const f = ID_FIELDS[field];
        if (!f) problems.push(`${op.key}: "${field}" looks like an id: classify it in ID_FIELDS`);
        else if (!('notAnId' in f) && !asked.has(field)) problems.push(`${op.key}: id field "${field}" is never filled with A's id (add a variant in OPS)`);
      }
    }
    expect(problems).toEqual([]);
    // The sweep below is only as wide as this list: say how wide it is.
    expect(ops.length).toBeGreaterThanOrEqual(63);
  });

  /**
   * One request of a variant. `whose(slot)`: 'A', 'B' or 'fresh' (a random uuid, the same for a
   * slot within the request). Path slots are "path:{param}", field slots the field name.
   */
  function build(op: DocOperation, v: Variant, whose: (slot: string) => 'A' | 'B' | 'fresh', bIds: Ids) {
    const fresh = new Map<string, string>();
    const idOf = (slot: string, kind: Kind) => {
      const w = whose(slot);
      if (w === 'A') return A.ids[kind];
      if (w === 'B') return bIds[kind];
      if (!fresh.has(slot)) fresh.set(slot, randomUUID());
      return fresh.get(slot)!;
    };
    let path = op.path;
    for (const p of pathParams(op.path)) {
      if (!p.kind) throw new Error(`${op.key}: ${p.where} has no kind in PATH_PARAM_KIND (see the coverage test)`);
      path = path.replace(`{${p.param}}`, idOf(`path:${p.param}`, p.kind));
    }
    const field: IdFor = (name) => {
      const f = ID_FIELDS[name];
      if (!f || !('kind' in f)) throw new Error(`${op.key}: "${name}" has no kind in ID_FIELDS (see the coverage test)`);
      return idOf(name, f.kind);
    };
    const query = v.query?.(field);
    if (query) path += `?${new URLSearchParams(query)}`;
    return { path, body: v.body?.(field) };
  }

  it('B, naming A\'s resources in any path parameter, query or body id: refused as if they did not exist, nothing of A in the answer', async () => {
    const failures: string[] = [];
    let probes = 0;
    for (const op of ops) {
      const c = OPS[op.key];
      if (!c) continue; // named by the coverage test
      const key = c.public ? null : B.key;
      for (const v of c.variants ?? [{}]) {
        const slots = [...pathParams(op.path).map((p) => `path:${p.param}`), ...slotsOf(v)];
        for (const foreign of subsets(slots)) {
          const probe = build(op, v, (s) => (foreign.includes(s) ? 'A' : 'B'), B.ids);
          const twin = build(op, v, (s) => (foreign.includes(s) ? 'fresh' : 'B'), B.ids);
          const r = await call(key, op.method, probe.path, probe.body);
          const t = await call(key, op.method, twin.path, twin.body);
          probes++;
          const what = `${op.method} ${probe.path} ${probe.body === undefined ? '' : JSON.stringify(probe.body)} (A's: ${foreign.join(', ')})`;
          const filteredOnly = foreign.every((s) => {
            const f = ID_FIELDS[s];
            return f !== undefined && 'answer' in f && f.answer === 'filtered';
          });
          const expected = foreign.some((s) => s.startsWith('path:')) ? 'a 404' : filteredOnly ? 'a 200' : 'a 4xx';
          const ok = expected === 'a 404' ? r.status === 404 : expected === 'a 200' ? r.status === 200 : r.status >= 400 && r.status < 500;
          if (!ok) failures.push(`${what}: ${r.status}, expected ${expected}: ${r.text.slice(0, 300)}`);
          if (leaked(r.text).length > 0) failures.push(`${what}: the answer shows A's ${leaked(r.text).join(', ')}`);
          if (r.status !== t.status || r.text !== t.text) failures.push(`${what}: answered ${r.status} ${r.text.slice(0, 200)}, but ${t.status} ${t.text.slice(0, 200)} for ids that do not exist`);
        }
      }
    }
    expect(failures).toEqual([]);
    expect(probes).toBeGreaterThan(40);
  });

  it('voice WebSocket: neither B\'s key nor B\'s token opens a session of A\'s agent, and A\'s token opens none of B\'s', async () => {
    const wsUrl = (query: Record<string, string>) => `${d.url.replace(/^http/, 'ws')}/v1/connection?${new URLSearchParams(query)}`;
    /** 101 and the first message, or the status and body of the refused upgrade. */
    const open = (url: string, headers: Record<string, string> = {}) =>
      new Promise<{ status: number; body: string; first?: any }>((resolve) => {
        const ws = new WebSocket(url, { headers });
        ws.on('error', () => {});
        ws.once('message', (data) => {
          ws.terminate();
          resolve({ status: 101, body: data.toString(), first: JSON.parse(data.toString()) });
        });
        // Never hang the run: an upgrade that neither opens with a message nor is refused is a failure.
        setTimeout(() => {
          ws.terminate();
          resolve({ status: 0, body: 'no message and no refusal within 5 s' });
        }, 5000).unref();
        ws.once('unexpected-response', (_req, res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
      });
    const bToken = async () => (await must(B.key, 'POST', '/v1/session-token', { agent_id: B.ids.agent }, 200)).token as string;
    /** B's token with its claims rewritten to A's session, agent and organization (signature kept). */
    const forged = (token: string) => {
      const [h, , s] = token.split('.');
      const claims = { ...decodeJwt(token), sub: A.ids.call, org: A.ids.organization, agent: A.ids.agent, version: A.versions[0] };
      return `${h}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${s}`;
    };

    // B cannot even mint a token for A's agent (the documented 404 of another organization's agent).
    const mint = await call(B.key, 'POST', '/v1/session-token', { agent_id: A.ids.agent });
    expect(mint.status).toBe(404);
    expect(leaked(mint.text)).toEqual([]);

    const cases: Array<[string, string, Record<string, string>?]> = [
      ['B\'s API key as the token, for A\'s agent', wsUrl({ token: B.key, agentId: A.ids.agent })],
      ['B\'s API key as a bearer header, no token', wsUrl({ agentId: A.ids.agent }), { authorization: `Bearer ${B.key}` }],
      ['B\'s token with agentId = A\'s agent', wsUrl({ token: await bToken(), agentId: A.ids.agent })],
      ['B\'s token with versionId = A\'s version', wsUrl({ token: await bToken(), versionId: A.versions[0]! })],
      ['B\'s token rewritten to A\'s session and agent', wsUrl({ token: forged(await bToken()) })],
      ['A\'s token with agentId = B\'s agent', wsUrl({ token: A.tokens.ws, agentId: B.ids.agent })],
      ['A\'s token with versionId = B\'s version', wsUrl({ token: A.tokens.ws, versionId: B.ids.version })],
    ];
    for (const [what, url, headers] of cases) {
      const r = await open(url, headers);
      // docs/voice-sessions.md: these are refused before the upgrade with 401.
      expect.soft(r.status, `${what}: ${r.body}`).toBe(401);
      expect.soft(leaked(r.body), what).toEqual([]);
    }

    // The control: B's own token alone opens B's own session, so the refusals above were for the
    // mismatch. (A's second token was never admitted: the snapshot test sees its call unchanged.)
    const token = await bToken();
    const ok = await open(wsUrl({ token, agentId: B.ids.agent }));
    expect(ok.status, ok.body).toBe(101);
    expect(ok.first).toMatchObject({ type: 'session_started', data: { id: decodeJwt(token).sub } });
  });

  it('B\'s agent dialling through A\'s trunk fails and places no call', async () => {
    const callsOfB = async () => (await must(B.key, 'GET', '/v1/calls', undefined, 200)).pagination.total as number;
    const bBefore = await callsOfB();
    const dial = (trunk: string) => call(B.key, 'POST', `/v1/agents/${B.ids.agent}/dial?${new URLSearchParams({ number: DIAL_TO, sipTrunkId: trunk })}`);
    const r = await dial(A.ids.trunk);
    const twin = await dial(randomUUID());
    // 404 as for a trunk that does not exist, not the 403 of "no assignment on that trunk", which
    // would tell B the trunk exists.
    expect(r.status, r.text).toBe(404);
    expect(r.body.error).toMatch(/trunk/i); // B's agent exists: it is the trunk that is not found
    expect(r.text).toBe(twin.text);
    expect(leaked(r.text)).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await callsOfB()).toBe(bBefore);
    // Nothing ever reached A's trunk, in this test or in the whole sweep.
    expect(sinkA.invites()).toBe(0);
  });

  it('the same requests with B\'s own ids succeed (the probes were refused for the foreign id, not for a bad request), and show nothing of A', async () => {
    const failures: string[] = [];
    const run = async (op: DocOperation) => {
      const c = OPS[op.key];
      if (!c) return; // named by the coverage test
      const ids = { ...B.ids, ...c.controlIds?.(B) };
      for (const v of c.variants ?? [{}]) {
        const req = build(op, v, () => 'B', ids);
        const r = await call(c.public ? null : B.key, op.method, req.path, req.body);
        if (r.status !== c.control) failures.push(`${op.method} ${req.path}: ${r.status}, expected ${c.control}: ${r.text.slice(0, 300)}`);
        if (leaked(r.text).length > 0) failures.push(`${op.method} ${req.path}: the answer shows A's ${leaked(r.text).join(', ')}`);
      }
    };
    // Deletes last, the assignment before its trunk, so every other control finds B's resources.
    const deletes = ops.filter((o) => o.method === 'DELETE').sort((x, y) => y.path.split('/').length - x.path.split('/').length);
    for (const op of ops.filter((o) => o.method !== 'DELETE')) await run(op);
    for (const op of deletes) await run(op);
    // The two control dials went out through B's trunk: a dial that got through would be seen.
    for (let i = 0; i < 50 && sinkB.invites() < 2; i++) await new Promise((r) => setTimeout(r, 50));
    expect(sinkB.invites(), 'INVITEs of the control dials at B\'s trunk').toBe(2);
    for (const path of ['/metrics', '/v1/openapi.json']) {
      const r = await call(null, 'GET', path);
      expect(r.status).toBe(200);
      expect(leaked(r.text), path).toEqual([]);
    }
    expect(failures).toEqual([]);
  });

  it('A\'s resources read the same with A\'s key after everything B tried', async () => {
    const after = await readA();
    // The reads themselves must have found A's resources, or "unchanged" would prove nothing.
    for (const [path, read] of before) expect.soft(read.status, `${path} read by A: ${read.text.slice(0, 200)}`).toBe(OPS[read.op]?.ownerRead ?? 200);
    expect(after.size).toBe(before.size);
    for (const [path, read] of before) expect.soft(after.get(path), path).toEqual(read);
  });
});
