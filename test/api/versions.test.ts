import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { duplicateAgent } from '../../src/api/routes/versions.ts';
import { DomainError } from '../../src/domain/errors.ts';

const NODES = [
  { id: 'start', type: 'conversation', prompt: 'Greet', position: { x: 1, y: 2 } },
  { id: 'lookup', type: 'tool', name: 'lookup_order', description: 'Find an order', parameters: [{ name: 'order_id', type: 'string' }] },
];
const MISSING = '00000000-0000-4000-8000-000000000000';

describe('drafts, versions, publish', () => {
  let d: TestDaemon;
  let agent: any;
  beforeAll(async () => {
    d = await startTestDaemon();
    agent = (await d.api('POST', '/v1/agents', { name: 'Flow' })).body;
  });
  afterAll(() => d.close());

  it('starts with an empty draft and keeps nodes as sent', async () => {
    expect((await d.api('GET', `/v1/agents/${agent.id}/draft`)).body).toEqual({ nodes: [], updated_at: null });
    const put = await d.api('PUT', `/v1/agents/${agent.id}/draft`, { nodes: NODES });
    expect(put.status).toBe(200);
    expect(put.body.nodes).toEqual(NODES);
    expect((await d.api('GET', `/v1/agents/${agent.id}/draft`)).body.nodes).toEqual(NODES);
  });

  it('rejects nodes without id or type, duplicate node ids, and unknown top-level fields', async () => {
    for (const body of [{ nodes: [{ type: 'x' }] }, { nodes: [{ id: 'a' }] }, { nodes: [{ id: 'a', type: 'x' }, { id: 'a', type: 'y' }] }, { nodes: [], graph: {} }, {}]) {
      const r = await d.api('PUT', `/v1/agents/${agent.id}/draft`, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
    }
    expect((await d.api('GET', `/v1/agents/${agent.id}/draft`)).body.nodes).toEqual(NODES);
  });

  it('snapshots the draft into a version, then publishes it once', async () => {
    const v = await d.api('POST', `/v1/agents/${agent.id}/versions`, { tag: 'v1' });
    expect(v.status).toBe(201);
    expect(Object.keys(v.body).sort()).toEqual(['agent_id', 'created_at', 'id', 'published_at', 'tag']);
    expect(v.body).toMatchObject({ agent_id: agent.id, tag: 'v1', published_at: null });
    // Changing the draft afterwards does not change the snapshot.
    await d.api('PUT', `/v1/agents/${agent.id}/draft`, { nodes: [{ id: 'other', type: 'end' }] });
    const got = await d.api('GET', `/v1/agents/${agent.id}/versions/${v.body.id}`);
    expect(got.body).toEqual({ version: v.body, nodes: NODES });

    const pub = await d.api('POST', `/v1/agents/${agent.id}/versions/${v.body.id}/publish`);
    expect(pub.status).toBe(200);
    expect(pub.body.id).toBe(v.body.id);
    expect(new Date(pub.body.published_at).toISOString()).toBe(pub.body.published_at);

    const again = await d.api('POST', `/v1/agents/${agent.id}/versions/${v.body.id}/publish`);
    expect(again.status).toBe(409);
    expect(again.body.error).toMatch(/already published/);
    // The 409 changed nothing.
    expect((await d.api('GET', `/v1/agents/${agent.id}/versions/${v.body.id}`)).body.version.published_at).toBe(pub.body.published_at);
  });

  it('makes the last published version the active one', async () => {
    const v2 = (await d.api('POST', `/v1/agents/${agent.id}/versions`, { tag: 'v2' })).body;
    await d.api('POST', `/v1/agents/${agent.id}/versions/${v2.id}/publish`);
    const row = (await d.daemon.store.agents.get((await d.daemon.store.organizations.byApiKey(d.key))!.id, agent.id))!;
    expect(row.active_version_id).toBe(v2.id);
    const list = await d.api('GET', `/v1/agents/${agent.id}/versions`);
    expect(list.body.map((v: any) => v.tag)).toEqual(['v1', 'v2']);
  });

  it('publish: 404 for a version of another agent or missing, 400 for malformed ids', async () => {
    const other = (await d.api('POST', '/v1/agents', { name: 'Other' })).body;
    const ov = (await d.api('POST', `/v1/agents/${other.id}/versions`, { tag: 'o' })).body;
    expect((await d.api('POST', `/v1/agents/${agent.id}/versions/${ov.id}/publish`)).status).toBe(404);
    expect((await d.api('POST', `/v1/agents/${agent.id}/versions/${MISSING}/publish`)).status).toBe(404);
    expect((await d.api('POST', `/v1/agents/${MISSING}/versions/${ov.id}/publish`)).status).toBe(404);
    expect((await d.api('POST', `/v1/agents/${agent.id}/versions/xyz/publish`)).status).toBe(400);
    expect((await d.api('POST', `/v1/agents/${agent.id}/versions`, { tag: '' })).status).toBe(400);
  });
});

describe('duplicate', () => {
  let d: TestDaemon;
  let source: any;
  let version: any;
  let emptyVersion: any;
  beforeAll(async () => {
    d = await startTestDaemon();
    source = (await d.api('POST', '/v1/agents', { name: 'Source', prompt: 'Be kind', keyterms: ['k'], vad_settings: { stop_secs: 1.1 } })).body;
    emptyVersion = (await d.api('POST', `/v1/agents/${source.id}/versions`, { tag: 'empty' })).body;
    await d.api('PUT', `/v1/agents/${source.id}/draft`, { nodes: NODES });
    version = (await d.api('POST', `/v1/agents/${source.id}/versions`, { tag: 'release-1' })).body;
  });
  afterAll(() => d.close());

  const dup = (body: unknown, opts: { key?: string | null; id?: string } = {}) =>
    d.api('POST', `/v1/agents/${opts.id ?? source.id}/duplicate`, body, { key: opts.key });

  it('201: copies the agent and the version into a new agent, named "<source> (Copy)"', async () => {
    const r = await dup({ graph_version_id: version.id });
    expect(r.status).toBe(201);
    expect(r.body.id).not.toBe(source.id);
    expect(r.body.name).toBe('Source (Copy)');
    expect(r.body.phone_number_id).toBe('');
    const { id: _a, name: _b, created_at: _c, updated_at: _d, phone_number_id: _e, ...settings } = source;
    expect(r.body).toMatchObject(settings);
    // The version's nodes are carried over into the copy's draft; no version is active.
    expect((await d.api('GET', `/v1/agents/${r.body.id}/draft`)).body.nodes).toEqual(NODES);
    expect((await d.api('GET', `/v1/agents/${r.body.id}/versions`)).body).toEqual([]);
  });

  it('201 with name and publish: true creates and publishes a version from the carried-over draft', async () => {
    const r = await dup({ graph_version_id: version.id, name: 'Clone', publish: true });
    expect(r.status).toBe(201);
    expect(r.body.name).toBe('Clone');
    const versions = (await d.api('GET', `/v1/agents/${r.body.id}/versions`)).body;
    expect(versions).toHaveLength(1);
    expect(versions[0].published_at).not.toBeNull();
    expect((await d.api('GET', `/v1/agents/${r.body.id}/versions/${versions[0].id}`)).body.nodes).toEqual(NODES);
    const orgId = (await d.daemon.store.organizations.byApiKey(d.key))!.id;
    expect((await d.daemon.store.agents.get(orgId, r.body.id))!.active_version_id).toBe(versions[0].id);
  });

  it('400: invalid ids, missing graph_version_id, a version with no nodes', async () => {
    const cases: Array<[unknown, string | undefined]> = [
      [{ graph_version_id: version.id }, 'not-a-uuid'],
      [{ graph_version_id: 'nope' }, undefined],
      [{}, undefined],
      [undefined, undefined],
      [{ graph_version_id: emptyVersion.id }, undefined],
      [{ graph_version_id: version.id, publish: 'yes' }, undefined],
    ];
    for (const [body, id] of cases) {
      const r = await dup(body, { id });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(typeof r.body.error).toBe('string');
    }
    const noNodes = await dup({ graph_version_id: emptyVersion.id });
    expect(noNodes.body.error).toMatch(/no nodes/);
  });

  it('401 without a body, for a missing or a bad key', async () => {
    for (const key of [null, 'cbk_wrong']) {
      const r = await dup({ graph_version_id: version.id }, { key });
      expect(r.status).toBe(401);
      expect(r.text).toBe('');
    }
  });

  it('404: agent or graph version not found (including a version of another agent)', async () => {
    expect((await dup({ graph_version_id: version.id }, { id: MISSING })).status).toBe(404);
    expect((await dup({ graph_version_id: MISSING })).status).toBe(404);
    const other = (await d.api('POST', '/v1/agents', { name: 'Other' })).body;
    await d.api('PUT', `/v1/agents/${other.id}/draft`, { nodes: NODES });
    const ov = (await d.api('POST', `/v1/agents/${other.id}/versions`, { tag: 'x' })).body;
    expect((await dup({ graph_version_id: ov.id })).status).toBe(404);
  });

  it('409: the destination already has a draft (and nothing is created)', async () => {
    // A fresh uuid never has a draft, so this branch is reached here through the store with a
    // destination that exists and has one.
    const store = d.daemon.store;
    const orgId = (await store.organizations.byApiKey(d.key))!.id;
    const count = (await store.agents.list(orgId, 1000, 0)).length;
    let err: unknown;
    try {
      await duplicateAgent(store, orgId, source.id, { graph_version_id: version.id }, source.id);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DomainError);
    expect((err as DomainError).kind).toBe('conflict');
    expect((await store.agents.list(orgId, 1000, 0)).length).toBe(count);
  });

  it('another organization sees 404', async () => {
    const other = await d.newOrgKey('other-org');
    expect((await dup({ graph_version_id: version.id }, { key: other })).status).toBe(404);
  });
});
