/**
 * Drop-in for the service's official client: every operation of the service's own
 * OpenAPI document (../shared/spec/service-openapi.json), sent to a real daemon the way the
 * official SDK sends it (Bearer key and `Content-Type: application/json` on every request, no
 * body at all when there is nothing to send, dial options as the SDK's query names), with each
 * answer checked against the document: the status must be one it lists for the operation, and
 * the body must validate against its schema for that status (ajv), success and error paths
 * alike. The only departures allowed are those in DEVIATIONS below, which mirror
 * docs/decisions.md. A final test fails naming any operation of the document not exercised on
 * its success status and on one of its error statuses, so a newer document cannot pass unseen.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSocket } from 'node:dgram';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import { decodeJwt } from 'jose';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier, type FakeCarrier } from '../helpers/fake-carrier.ts';
import { loadServiceDocument, sdkRequest, ServiceContract, type OpenApiOperation, type Schema, type SdkRequestOptions, type SdkResponse } from '../helpers/openapi.ts';

const MISSING = '00000000-0000-4000-8000-000000000000';
/** A malformed id in a path is 400 naming it as not a uuid (DESIGN.md). */
const BAD_ID = /uuid/i;
const NEUTRAL_PROVIDERS = ['provider_1', 'provider_2', 'provider_3', 'provider_4', 'provider_5', 'provider_6'];

/**
 * What callbridge answers differently from the document, on purpose. Keep it in step with
 * docs/decisions.md; anything not here that differs from the document fails the test.
 */
const DEVIATIONS = {
  /** (a) applied to response schemas: TTSStrategy also takes provider_1..provider_6. */
  neutralProviderNames: {
    reason: 'responses name voice vendors provider_1..provider_6, the API document\'s neutral names (vendor names are accepted as input aliases)',
    schema: 'TTSStrategy',
    add: NEUTRAL_PROVIDERS,
  },
  /** (b) applied to response schemas: additionalProperties:false is dropped (the document's REST objects have none anyway). */
  extraFields: {
    reason: 'resources carry fields of ours beyond the document (e.g. a trunk\'s name and inbound_acl); clients ignore unknown fields',
  },
  /** (c) a condition, not a status: the status is documented, the case the document gives 403 for is answered 404. */
  sessionTokenOtherOrganization: {
    operationId: 'generateSessionToken',
    status: 404,
    reason: 'an agent of another organization is "not found", not 403 (DESIGN.md: never reveal that another organization has the id)',
  },
  /** (d) statuses the document does not list for an operation, only those this test produces. */
  extraStatuses: [
    { operationId: 'createAgent', status: 413, reason: 'a body over http.body_limit (1 MiB) is 413 (DESIGN.md error table, docs/decisions.md "JSON only")' },
  ],
} as const;

/** The allowed statuses of an operation: the document's, plus DEVIATIONS.extraStatuses. */
function allowedStatuses(contract: ServiceContract, op: OpenApiOperation): number[] {
  return [...contract.statuses(op), ...DEVIATIONS.extraStatuses.filter((x) => x.operationId === op.operationId).map((x) => x.status)];
}

/** A loopback UDP port with nothing listening (bound, then released): a SIP peer that never answers. */
async function closedUdpPort(): Promise<number> {
  const s = createSocket('udp4');
  await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', resolve));
  const { port } = s.address();
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** A small valid PCM16 mono WAV (silence). */
function wav(samples: number, rate = 8000): Buffer {
  const data = samples * 2;
  const b = Buffer.alloc(44 + data);
  b.write('RIFF', 0, 'ascii');
  b.writeUInt32LE(36 + data, 4);
  b.write('WAVEfmt ', 8, 'ascii');
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24);
  b.writeUInt32LE(rate * 2, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36, 'ascii');
  b.writeUInt32LE(data, 40);
  return b;
}

describe('conformance to the service OpenAPI document, requests sent as its official SDK sends them', () => {
  // Loaded outside a hook so a missing document fails the run loudly instead of skipping it.
  const doc = loadServiceDocument();
  const contract = new ServiceContract(doc, {
    patchResponseSchemas(defs) {
      const { schema, add } = DEVIATIONS.neutralProviderNames;
      const target = defs[schema] as Schema | undefined;
      if (!target || !Array.isArray(target.enum)) throw new Error(`DEVIATIONS: the document has no enum ${schema} to widen`);
      target.enum = [...(target.enum as unknown[]), ...add];
    },
  });
  /** operationId -> the statuses this file sent a request expecting. */
  const coverage = new Map<string, Set<number>>();
  const note = (operationId: string, status: number) => {
    const set = coverage.get(operationId) ?? new Set<number>();
    set.add(status);
    coverage.set(operationId, set);
  };

  let d: TestDaemon;
  let carrier: FakeCarrier;

  beforeAll(async () => {
    carrier = await startFakeCarrier();
    // No voice runtime: sessions open, send session_started, then end (1011). The socket's
    // contract is what is checked here; the conversation is tested in test/agent/.
    d = await startTestDaemon({ telco: { api_base_url: carrier.url } }, undefined, { runtimeFactory: null });
  });
  afterAll(async () => {
    await d?.close();
    await carrier?.close();
  });

  /**
   * Sends one request as the SDK does and checks the answer against the document:
   * - the status is the one this step expects, and one the operation documents (or a deviation);
   * - the JSON body validates against the document's schema for that status (ajv, every error
   *   named by its instancePath);
   * - every error is `{ error: string }` (DESIGN.md; the document's body-less 401s allow it);
   * - a body this step expects to succeed validates against the document's request schema,
   *   so the test only sends what the SDK's own types allow.
   * Checks are soft (expect.soft): one run lists every departure, not just the first.
   */
  async function check(method: string, path: string, expected: number, opts: SdkRequestOptions & { error?: RegExp } = {}): Promise<SdkResponse> {
    const op = contract.operationFor(method, path);
    if (!op) throw new Error(`test bug: ${method} ${path} is no operation of the document`);
    const allowed = allowedStatuses(contract, op);
    if (!allowed.includes(expected)) throw new Error(`test bug: ${op.operationId} documents ${allowed.join(', ')}, not ${expected}`);
    if (expected < 300 && opts.body !== undefined) {
      expect(contract.validateRequest(op, opts.body), `test bug: ${op.operationId} request body is not one the document allows`).toEqual([]);
    }
    note(op.operationId, expected);
    const query = new URLSearchParams(Object.entries(opts.query ?? {}).filter((e): e is [string, string] => e[1] !== undefined)).toString();
    const label = `${op.operationId} ${method} ${path}${query ? `?${query}` : ''}${opts.body === undefined ? ' (no body)' : ''}`;
    const res = await sdkRequest(d.url, d.key, method, path, opts);
    const said = `${res.status} ${res.text.slice(0, 300)}`;
    expect.soft(res.status, `${label}: status (answered ${said})`).toBe(expected);
    expect.soft(allowed, `${label}: status ${res.status} is not documented for ${op.operationId}`).toContain(res.status);
    if (!allowed.includes(res.status)) return res;
    const media = contract.mediaTypes(op, res.status);
    if (media.includes('application/json')) {
      expect.soft(res.contentType, `${label}: content type`).toMatch(/^application\/json/);
      expect.soft(res.body === undefined ? ['(no JSON body)'] : contract.validateResponse(op, res.status, res.body), `${label}: ${res.status} body against the document's schema (${said})`).toEqual([]);
    } else if (media.length > 0) {
      expect.soft(media.some((m) => res.contentType.startsWith(m)), `${label}: content type ${res.contentType}, document: ${media.join(', ')}`).toBe(true);
    }
    if (res.status === 204) expect.soft(res.bytes.length, `${label}: 204 has no body`).toBe(0);
    if (res.status >= 400) expect.soft(typeof res.body?.error, `${label}: error body ${said}`).toBe('string');
    // A 400 names what is wrong (DESIGN.md): so a 400 for another reason (an empty body, say)
    // does not pass for the one this step provokes.
    if (opts.error && res.status === expected) expect.soft(String(res.body?.error), `${label}: the error names the problem`).toMatch(opts.error);
    return res;
  }

  /** A step whose result later steps need: stop here (hard) when it did not succeed. */
  function need<T>(value: T | undefined, what: string): T {
    if (value === undefined || value === null) throw new Error(`cannot go on without ${what}`);
    return value;
  }

  let agentId: string;
  let voices: any[] = [];

  it('organization, models and the voice catalog', async () => {
    await check('GET', '/v1/organization', 200);
    const llms = await check('GET', '/v1/llms', 200);
    expect(llms.body.llms).toContain('local/echo');
    const v = await check('GET', '/v1/voices', 200);
    voices = v.body?.voices ?? [];
    expect(voices.length).toBeGreaterThan(0);
  });

  it('agents: create, list, get, patch, delete, and a vendor provider name on input', async () => {
    const created = await check('POST', '/v1/agents', 201, { body: { name: 'Conformance agent', prompt: 'Be brief.' } });
    agentId = need(created.body?.id, 'an agent');
    await check('POST', '/v1/agents', 400, { body: {}, error: /name/ });
    await check('POST', '/v1/agents', 400, { body: { name: 'Bad', vad_settings: { stop_secs: 'slow' } }, error: /stop_secs/ });
    await check('POST', '/v1/agents', 413, { body: { name: 'Huge', prompt: 'x'.repeat(1_100_000) } });

    const list = await check('GET', '/v1/agents', 200);
    expect.soft((list.body ?? []).map((a: any) => a.id)).toContain(agentId);
    await check('GET', `/v1/agents/${agentId}`, 200);
    await check('GET', '/v1/agents/not-a-uuid', 400, { error: BAD_ID });
    await check('GET', `/v1/agents/${MISSING}`, 404);

    const patched = await check('PATCH', `/v1/agents/${agentId}`, 200, { body: { vad_settings: { stop_secs: 0.6 }, keyterms: ['callbridge'] } });
    expect.soft(patched.body?.vad_settings?.stop_secs).toBe(0.6);
    expect.soft(patched.body?.keyterms).toEqual(['callbridge']);
    await check('PATCH', `/v1/agents/${agentId}`, 400, { body: { status: 'sleeping' }, error: /status/ });
    await check('PATCH', `/v1/agents/${MISSING}`, 404, { body: { name: 'Nobody' } });

    // The SDK's types name vendors (TTSStrategy: elevenlabs, ...); responses keep provider_N.
    const voice = voices.find((x) => x.provider === 'provider_1' || x.provider === 'elevenlabs');
    const vendor = await check('POST', '/v1/agents', 201, { body: { name: 'Vendor voice', voice_settings: { id: need(voice?.id, 'a provider_1 voice'), provider: 'elevenlabs' } } });
    expect.soft(vendor.body?.voice_settings?.provider, 'elevenlabs is provider_1 in responses').toBe('provider_1');

    const doomed = need((await check('POST', '/v1/agents', 201, { body: { name: 'Doomed' } })).body?.id, 'an agent to delete');
    await check('DELETE', `/v1/agents/${doomed}`, 204);
    await check('DELETE', `/v1/agents/${doomed}`, 404);
    await check('DELETE', '/v1/agents/not-a-uuid', 400, { error: BAD_ID });
  });

  it('agent versions: list, get, publish (no body; again 409)', async () => {
    const id = need(agentId, 'the agent');
    // The draft and version create are not in the document: set up with the plain client.
    expect((await d.api('PUT', `/v1/agents/${id}/draft`, { nodes: [{ id: 'start', type: 'conversation' }] })).status).toBe(200);
    const version = await d.api('POST', `/v1/agents/${id}/versions`, { tag: 'v1' });
    expect(version.status, version.text).toBe(201);
    const versionId = version.body.id as string;

    const list = await check('GET', `/v1/agents/${id}/versions`, 200);
    expect.soft((list.body ?? []).map((v: any) => v.id)).toContain(versionId);
    await check('GET', '/v1/agents/not-a-uuid/versions', 400, { error: BAD_ID });
    await check('GET', `/v1/agents/${MISSING}/versions`, 404);

    const detail = await check('GET', `/v1/agents/${id}/versions/${versionId}`, 200);
    expect.soft(detail.body?.nodes).toEqual([{ id: 'start', type: 'conversation' }]);
    await check('GET', `/v1/agents/${id}/versions/not-a-uuid`, 400, { error: BAD_ID });
    await check('GET', `/v1/agents/${id}/versions/${MISSING}`, 404);

    const published = await check('POST', `/v1/agents/${id}/versions/${versionId}/publish`, 200);
    expect.soft(published.body?.published_at, 'published_at is set').toEqual(expect.any(String));
    await check('POST', `/v1/agents/${id}/versions/${versionId}/publish`, 409);
    await check('POST', `/v1/agents/${id}/versions/${MISSING}/publish`, 404);
    await check('POST', `/v1/agents/${id}/versions/not-a-uuid/publish`, 400, { error: BAD_ID });
  });

  let dialTrunkId: string;

  it('dial: the SDK\'s query names (sipTrunkId, callerId, firstMessage, prompt), no body', async () => {
    const id = need(agentId, 'the agent');
    // An ACL trunk whose outbound host never answers: the dial is accepted, the call then fails
    // in the background (its progress is GET /v1/calls' business, not dial's).
    const trunk = await check('POST', '/v1/sip-trunks', 201, {
      body: { pbx: 'generic', name: 'Dial trunk', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.0/8'], outbound_host: `127.0.0.1:${await closedUdpPort()}` },
    });
    dialTrunkId = need(trunk.body?.id, 'a trunk');
    const number = '+15551234567';
    await check('POST', `/v1/agents/${id}/dial`, 403, { query: { number, sipTrunkId: dialTrunkId } });
    await check('POST', `/v1/sip-trunks/${dialTrunkId}/assignments`, 201, { body: { agent_id: id, alternate_number: '4100' } });

    // A 200 (and the 403 above) proves sipTrunkId was read: without a trunk the route is the
    // agent's carrier number, which this agent does not have (400).
    const ok = await check('POST', `/v1/agents/${id}/dial`, 200, { query: { number, sipTrunkId: dialTrunkId } });
    expect.soft(ok.body).toEqual({ success: true });
    await check('POST', `/v1/agents/${id}/dial`, 200, {
      query: { destination: number, sipTrunkId: dialTrunkId, callerId: '+15550000000', firstMessage: 'Hello from the SDK', prompt: 'Be brief.' },
    });
    await check('POST', `/v1/agents/${id}/dial`, 400, { query: { sipTrunkId: dialTrunkId }, error: /number|destination/ });
    // The camelCase name and its snake_case alias naming different trunks: ambiguous.
    await check('POST', `/v1/agents/${id}/dial`, 400, { query: { number, sipTrunkId: dialTrunkId, sip_trunk_id: MISSING }, error: /trunk/i });
    await check('POST', `/v1/agents/${MISSING}/dial`, 404, { query: { number, sipTrunkId: dialTrunkId } });
  });

  let callId: string;

  it('call history: the paginated list, one call, its recording', async () => {
    const id = need(agentId, 'the agent');
    const token = await check('POST', '/v1/session-token', 200, { body: { agent_id: id } });
    // The session's call record is named by the token's subject (docs/voice-sessions.md).
    callId = decodeJwt(need(token.body?.token, 'a session token')).sub as string;

    const all = await check('GET', '/v1/calls', 200);
    expect.soft((all.body?.calls ?? []).map((c: any) => c.id), 'the session is a call').toContain(callId);
    const page = await check('GET', '/v1/calls', 200, { query: { page: '1', page_size: '1' } });
    expect.soft(page.body?.calls?.length).toBe(1);
    expect.soft(page.body?.pagination).toMatchObject({ page: 1, page_size: 1, has_prev: false });
    await check('GET', '/v1/calls', 200, { query: { agent_ids: id, status: 'started', source: 'api', outbound: 'false' } });
    await check('GET', '/v1/calls', 400, { query: { page_size: '101' }, error: /page_size/ });
    await check('GET', '/v1/calls', 400, { query: { status: 'bogus' }, error: /status/ });

    await check('GET', `/v1/calls/${callId}`, 200);
    await check('GET', `/v1/calls/${MISSING}`, 404);
    await check('GET', '/v1/calls/not-a-uuid', 400, { error: BAD_ID });

    await check('GET', `/v1/calls/${callId}/recording`, 404);
    await check('GET', '/v1/calls/not-a-uuid/recording', 400, { error: BAD_ID });
    // A real recording needs a bridged phone call (test/bridge/recording.test.ts); here only the
    // HTTP answer matters, so the call is given a WAV the way the bridge registers one.
    const dir = join(d.dataDir, 'recordings');
    mkdirSync(dir, { recursive: true });
    const file = join(dir, `${callId}.wav`);
    writeFileSync(file, wav(800));
    expect(await d.daemon.store.calls.setRecording(callId, file)).toBe(true);
    const rec = await check('GET', `/v1/calls/${callId}/recording`, 200);
    expect.soft(rec.bytes.subarray(0, 4).toString('ascii')).toBe('RIFF');
  });

  it('twilio numbers (the document\'s path for telco numbers): list, import, relabel', async () => {
    const account = 'AC00000000000000000000000000000019';
    carrier.addNumber(account, 'carrier-token', '+15557654321');
    await check('GET', '/v1/twilio/numbers', 200);
    const imported = await check('POST', '/v1/twilio/numbers', 201, { body: { phone_number: '+15557654321', account_sid: account, auth_token: 'carrier-token', label: 'Main line' } });
    await check('POST', '/v1/twilio/numbers', 409, { body: { phone_number: '+15557654321', account_sid: account, auth_token: 'carrier-token' } });
    await check('POST', '/v1/twilio/numbers', 400, { body: { phone_number: '+15557654321' }, error: /account_sid|auth_token/ });
    carrier.failNext(500);
    await check('POST', '/v1/twilio/numbers', 502, { body: { phone_number: '+15557654322', account_sid: account, auth_token: 'carrier-token' } });
    const list = await check('GET', '/v1/twilio/numbers', 200);
    expect.soft((list.body ?? []).map((n: any) => n.phone_number)).toContain('+15557654321');

    const numberId = need(imported.body?.id, 'an imported number');
    const relabelled = await check('PATCH', `/v1/twilio/numbers/${numberId}`, 200, { body: { label: 'Front desk' } });
    expect.soft(relabelled.body?.label).toBe('Front desk');
    await check('PATCH', `/v1/twilio/numbers/${numberId}`, 400, { body: {}, error: /label/ });
    await check('PATCH', `/v1/twilio/numbers/${MISSING}`, 404, { body: { label: 'Nobody' } });
  });

  let digestTrunkId: string;

  it('SIP trunks: create, list, get, patch (nullable fields as null), delete', async () => {
    const body = { pbx: 'generic', name: 'Digest trunk', inbound_auth_type: 'digest', inbound_sip_username: 'conformance', inbound_sip_password: 's3cret' };
    const created = await check('POST', '/v1/sip-trunks', 201, { body });
    digestTrunkId = need(created.body?.id, 'a digest trunk');
    await check('POST', '/v1/sip-trunks', 409, { body: { ...body, name: 'Same username' } });
    await check('POST', '/v1/sip-trunks', 400, { body: { pbx: 'nope' }, error: /pbx/ });

    const list = await check('GET', '/v1/sip-trunks', 200);
    expect.soft((list.body ?? []).map((t: any) => t.id)).toContain(digestTrunkId);
    await check('GET', `/v1/sip-trunks/${digestTrunkId}`, 200);
    await check('GET', `/v1/sip-trunks/${MISSING}`, 404);
    await check('GET', '/v1/sip-trunks/not-a-uuid', 400, { error: BAD_ID });

    await check('PATCH', `/v1/sip-trunks/${digestTrunkId}`, 200, { body: { remain_in_dialog: true } });
    // SipTrunkUpdateInput: every field but pbx is nullable.
    const nulled = await check('PATCH', `/v1/sip-trunks/${digestTrunkId}`, 200, { body: { outbound_host: null, register: null, outbound_sip_username: null } });
    expect.soft(nulled.body?.register ?? false, 'register null = off').toBe(false);
    await check('PATCH', `/v1/sip-trunks/${digestTrunkId}`, 400, { body: { pbx: 'nope' }, error: /pbx/ });
    await check('PATCH', `/v1/sip-trunks/${MISSING}`, 404, { body: { remain_in_dialog: false } });

    const doomed = need((await check('POST', '/v1/sip-trunks', 201, { body: { pbx: 'generic', name: 'Doomed', inbound_auth_type: 'none' } })).body?.id, 'a trunk to delete');
    await check('DELETE', `/v1/sip-trunks/${doomed}`, 204);
    await check('DELETE', `/v1/sip-trunks/${doomed}`, 404);
    await check('DELETE', '/v1/sip-trunks/not-a-uuid', 400, { error: BAD_ID });
  });

  it('SIP trunk assignments: create, list, get, patch (null clears), delete', async () => {
    const agent = need(agentId, 'the agent');
    const trunk = need(digestTrunkId, 'the digest trunk');
    const created = await check('POST', `/v1/sip-trunks/${trunk}/assignments`, 201, { body: { agent_id: agent, number: '100', alternate_number: '+15559990019' } });
    const assignmentId = need(created.body?.id, 'an assignment');
    await check('POST', `/v1/sip-trunks/${trunk}/assignments`, 409, { body: { agent_id: agent, number: '100' } });
    await check('POST', `/v1/sip-trunks/${trunk}/assignments`, 400, { body: { agent_id: 'not-a-uuid', number: '101' }, error: /agent_id/ });
    await check('POST', `/v1/sip-trunks/${MISSING}/assignments`, 404, { body: { agent_id: agent, number: '102' } });

    const list = await check('GET', `/v1/sip-trunks/${trunk}/assignments`, 200);
    expect.soft((list.body ?? []).map((a: any) => a.id)).toContain(assignmentId);
    await check('GET', `/v1/sip-trunks/${MISSING}/assignments`, 404);
    await check('GET', '/v1/sip-trunks/not-a-uuid/assignments', 400, { error: BAD_ID });

    await check('GET', `/v1/sip-trunks/assignments/${assignmentId}`, 200);
    await check('GET', `/v1/sip-trunks/assignments/${MISSING}`, 404);
    await check('GET', '/v1/sip-trunks/assignments/not-a-uuid', 400, { error: BAD_ID });

    const cleared = await check('PATCH', `/v1/sip-trunks/assignments/${assignmentId}`, 200, { body: { alternate_number: null } });
    expect.soft(cleared.body?.alternate_number ?? '', 'null cleared alternate_number').toBe('');
    expect.soft(cleared.body?.number).toBe('100');
    // Alternate numbers are globally unique: 4100 is the dial trunk's.
    await check('PATCH', `/v1/sip-trunks/assignments/${assignmentId}`, 409, { body: { alternate_number: '4100' } });
    await check('PATCH', `/v1/sip-trunks/assignments/${MISSING}`, 404, { body: { number: '103' } });

    await check('DELETE', `/v1/sip-trunks/assignments/${assignmentId}`, 204);
    await check('DELETE', `/v1/sip-trunks/assignments/${assignmentId}`, 404);
    await check('DELETE', '/v1/sip-trunks/assignments/not-a-uuid', 400, { error: BAD_ID });
  });

  it('session tokens: 200, 400, 404 (also for another organization\'s agent), 503 for webrtc unconfigured', async () => {
    const agent = need(agentId, 'the agent');
    const ok = await check('POST', '/v1/session-token', 200, { body: { agent_id: agent, first_message: 'Hi', prompt: 'Be brief.' } });
    expect.soft(ok.body?.token).toEqual(expect.any(String));
    await check('POST', '/v1/session-token', 400, { body: {}, error: /agent_id/ });
    await check('POST', '/v1/session-token', 400, { body: { agent_id: agent, transport: 'carrier-pigeon' }, error: /transport/ });
    await check('POST', '/v1/session-token', 404, { body: { agent_id: MISSING } });
    await check('POST', '/v1/session-token', 503, { body: { agent_id: agent, transport: 'webrtc' } });

    const otherKey = await d.newOrgKey('other organization');
    const theirs = await check('POST', '/v1/agents', 201, { key: otherKey, body: { name: 'Not yours' } });
    const dev = DEVIATIONS.sessionTokenOtherOrganization;
    await check('POST', '/v1/session-token', dev.status, { body: { agent_id: need(theirs.body?.id, 'another organization\'s agent') } });
  });

  it('GET /v1/connection: 101 upgrade with the token alone (no agentId, as the SDK connects), session_started first; 401 and 404 before the upgrade', async () => {
    const op = contract.byId('voiceSessionWebSocket');
    const agent = need(agentId, 'the agent');
    const token = (await sdkRequest(d.url, d.key, 'POST', '/v1/session-token', { body: { agent_id: agent } })).body?.token as string;
    const wsUrl = (t: string) => new URL(`/v1/connection?token=${encodeURIComponent(t)}`, d.url.replace(/^http/, 'ws')).toString();

    note(op.operationId, 101);
    const ws = new WebSocket(wsUrl(need(token, 'a session token')));
    ws.on('error', () => {});
    const first = await new Promise<{ status: number; message?: any }>((resolve) => {
      ws.once('message', (data) => resolve({ status: 101, message: JSON.parse(data.toString()) }));
      ws.once('unexpected-response', (_req, res) => resolve({ status: res.statusCode ?? 0 }));
      ws.once('close', () => resolve({ status: 101 }));
    });
    expect.soft(first.status, 'the upgrade').toBe(101);
    expect.soft(first.message?.type, 'the first message').toBe('session_started');
    expect.soft(contract.validateComponent('VoiceSessionServerMessage', first.message), 'session_started against VoiceSessionServerMessage').toEqual([]);
    expect.soft(first.message?.data?.id).toBe(decodeJwt(token).sub);
    ws.terminate();

    /** The status of a refused upgrade (101 if it was not refused). */
    const refused = (url: string) =>
      new Promise<{ status: number; body: string }>((resolve) => {
        const c = new WebSocket(url);
        c.on('error', () => {});
        c.once('open', () => {
          c.terminate();
          resolve({ status: 101, body: '' });
        });
        c.once('unexpected-response', (_req, res) => {
          let body = '';
          res.on('data', (chunk: Buffer) => (body += chunk.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
      });
    for (const [what, url, status] of [
      ['a bad token', wsUrl('not-a-token'), 401],
      ['an agent deleted after the token was issued', '', 404],
    ] as Array<[string, string, number]>) {
      let target = url;
      if (!target) {
        const gone = (await d.api('POST', '/v1/agents', { name: 'Gone' })).body.id as string;
        const t = (await d.api('POST', '/v1/session-token', { agent_id: gone })).body.token as string;
        expect((await d.api('DELETE', `/v1/agents/${gone}`)).status).toBe(204);
        target = wsUrl(t);
      }
      note(op.operationId, status);
      expect(contract.statuses(op)).toContain(status);
      const r = await refused(target);
      expect.soft(r.status, `voiceSessionWebSocket with ${what}: ${r.body}`).toBe(status);
      if (r.status >= 400 && r.body) expect.soft(typeof JSON.parse(r.body).error, `${what}: error body`).toBe('string');
    }
  });

  it('every operation refuses a wrong API key with 401', async () => {
    for (const op of contract.operations) {
      if (op.operationId === 'voiceSessionWebSocket') continue; // a session token, not a key (above)
      const path = op.path.replace(/\{[^}]+\}/g, MISSING);
      await check(op.method, path, 401, { key: 'not-a-key', body: op.requestBody ? {} : undefined });
    }
  });

  it('covers every operation of the document on its success status and on an error status', () => {
    const missing: string[] = [];
    for (const op of contract.operations) {
      const sent = coverage.get(op.operationId) ?? new Set<number>();
      const documented = contract.statuses(op);
      const success = documented.filter((s) => s < 300);
      // An error the operation documents besides auth and server failures (401, 405, 5xx), when
      // it has one; only 401 otherwise (list endpoints document nothing else).
      const errors = documented.filter((s) => s >= 400 && s < 500 && s !== 401 && s !== 405);
      const wanted = errors.length > 0 ? errors : [401];
      if (!success.some((s) => sent.has(s))) missing.push(`${op.operationId}: success ${success.join('/')} not exercised`);
      if (!wanted.some((s) => sent.has(s))) missing.push(`${op.operationId}: none of the errors ${wanted.join('/')} exercised`);
    }
    expect(missing, `document v${contract.version}`).toEqual([]);
    expect(coverage.size).toBe(contract.operations.length);
  });
});
