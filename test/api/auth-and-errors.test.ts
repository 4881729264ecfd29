import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

describe('authentication, bad input, organization isolation', () => {
  let d: TestDaemon;
  let agent: any;
  let version: any;
  beforeAll(async () => {
    d = await startTestDaemon();
    agent = (await d.api('POST', '/v1/agents', { name: 'Mine' })).body;
    await d.api('PUT', `/v1/agents/${agent.id}/draft`, { nodes: [{ id: 'n', type: 'say' }] });
    version = (await d.api('POST', `/v1/agents/${agent.id}/versions`, { tag: 't' })).body;
  });
  afterAll(() => d.close());

  it('401 with an error body for a missing, malformed or unknown key', async () => {
    for (const headers of [{}, { authorization: 'Basic abc' }, { authorization: 'Bearer' }] as Record<string, string>[]) {
      const r = await d.api('GET', '/v1/agents', undefined, { key: null, headers });
      expect(r.status).toBe(401);
      expect(r.body.error).toMatch(/API key/);
      expect(r.headers.get('www-authenticate')).toBe('Bearer');
    }
    const wrong = await d.api('GET', '/v1/agents', undefined, { key: 'cbk_not-a-real-key' });
    expect(wrong.status).toBe(401);
    expect(wrong.body).toEqual({ error: 'invalid API key' });
  });

  it('a second organization gets 404 on everything of the first', async () => {
    const other = await d.newOrgKey('Other Inc');
    const paths: Array<[string, string, unknown?]> = [
      ['GET', `/v1/agents/${agent.id}`],
      ['PATCH', `/v1/agents/${agent.id}`, { name: 'stolen' }],
      ['DELETE', `/v1/agents/${agent.id}`],
      ['GET', `/v1/agents/${agent.id}/draft`],
      ['PUT', `/v1/agents/${agent.id}/draft`, { nodes: [] }],
      ['GET', `/v1/agents/${agent.id}/versions`],
      ['POST', `/v1/agents/${agent.id}/versions`, { tag: 'x' }],
      ['GET', `/v1/agents/${agent.id}/versions/${version.id}`],
      ['POST', `/v1/agents/${agent.id}/versions/${version.id}/publish`],
      ['POST', `/v1/agents/${agent.id}/duplicate`, { graph_version_id: version.id }],
      ['POST', `/v1/agents/${agent.id}/dial?number=%2B15551234567`],
      ['POST', '/v1/session-token', { agent_id: agent.id }],
    ];
    for (const [method, path, body] of paths) {
      const r = await d.api(method, path, body, { key: other });
      expect(r.status, `${method} ${path}`).toBe(404);
    }
    expect((await d.api('GET', '/v1/agents', undefined, { key: other })).body).toEqual([]);
    // Nothing of the first organization changed.
    const mine = await d.api('GET', `/v1/agents/${agent.id}`);
    expect(mine.body.name).toBe('Mine');
    expect((await d.api('GET', `/v1/agents/${agent.id}/versions/${version.id}`)).body.version.published_at).toBeNull();
    expect((await d.api('GET', '/v1/organization', undefined, { key: other })).body.name).toBe('Other Inc');
  });

  it('413 for a body over 1 MiB, and nothing is stored', async () => {
    const before = (await d.api('GET', '/v1/agents')).body.length;
    const r = await d.api('POST', '/v1/agents', { name: 'big', prompt: 'x'.repeat(1024 * 1024) });
    expect(r.status).toBe(413);
    expect(r.body.error).toMatch(/larger/);
    expect((await d.api('GET', '/v1/agents')).body.length).toBe(before);
  });

  it('400 for malformed JSON, 415 for a non-JSON body, each with an error body', async () => {
    const bad = await d.api('POST', '/v1/agents', undefined, { rawBody: '{"name": "x",' });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/JSON/);
    const text = await d.api('POST', '/v1/agents', undefined, { rawBody: 'name=x', headers: { 'content-type': 'text/plain' } });
    expect(text.status).toBe(415);
    expect(typeof text.body.error).toBe('string');
    const arr = await d.api('POST', '/v1/agents', [{ name: 'x' }]);
    expect(arr.status).toBe(400);
  });

  // The service's official SDK sends content-type: application/json on every request, bodies or
  // not: an empty body is no body, whatever the header says.
  it('an empty body with content-type application/json is no body; a present body is still validated', async () => {
    const json = { 'content-type': 'application/json' };
    const agent = (await d.api('POST', '/v1/agents', { name: 'empty-body' })).body;
    expect((await d.api('PUT', `/v1/agents/${agent.id}/draft`, { nodes: [{ id: 'start', type: 'conversation' }] })).status).toBe(200);
    const version = (await d.api('POST', `/v1/agents/${agent.id}/versions`, { tag: 'v1' })).body;
    const publish = await d.api('POST', `/v1/agents/${agent.id}/versions/${version.id}/publish`, undefined, { headers: json, rawBody: '' });
    expect(publish.status, publish.text).toBe(200);
    expect(publish.body.published_at).toMatch(/^\d{4}-/);
    const gone = await d.api('DELETE', `/v1/agents/${agent.id}`, undefined, { headers: json, rawBody: '' });
    expect(gone.status, gone.text).toBe(204);
    expect((await d.api('GET', `/v1/agents/${agent.id}`)).status).toBe(404);
    // A route that needs a body says so, as it would for a body-less request.
    const create = await d.api('POST', '/v1/agents', undefined, { headers: json, rawBody: '' });
    expect(create.status).toBe(400);
    expect(create.body.error).toBe('body must be a JSON object (it is missing or of another type)');
    // Whitespace is not empty: it is malformed JSON, as before.
    const blank = await d.api('POST', '/v1/agents', undefined, { headers: json, rawBody: '  ' });
    expect(blank.status).toBe(400);
    expect(blank.body.error).toMatch(/JSON/);
    // A present body keeps every check (prototype poisoning too).
    const poisoned = await d.api('POST', '/v1/agents', undefined, { headers: json, rawBody: '{"name":"x","__proto__":{"admin":true}}' });
    expect(poisoned.status).toBe(400);
  });

  it('404 with an error body for an unknown route', async () => {
    const r = await d.api('GET', '/v1/nothing-here');
    expect(r.status).toBe(404);
    expect(r.body.error).toMatch(/no route/);
  });

  it('echoes a request id', async () => {
    const r = await d.api('GET', '/v1/agents', undefined, { headers: { 'x-request-id': 'req-abc-123' } });
    expect(r.headers.get('x-request-id')).toBe('req-abc-123');
    const gen = await d.api('GET', '/v1/agents');
    expect(gen.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });
});

describe('500', () => {
  it('an internal failure answers 500 { error } with no stack trace, also on duplicate', async () => {
    const d = await startTestDaemon();
    try {
      const a = (await d.api('POST', '/v1/agents', { name: 'x' })).body;
      await d.api('PUT', `/v1/agents/${a.id}/draft`, { nodes: [{ id: 'n', type: 't' }] });
      const v = (await d.api('POST', `/v1/agents/${a.id}/versions`, { tag: 't' })).body;
      // Break the store underneath the running API: auth still works (cached org lookups do
      // not exist, so use a trigger that fails only the agent insert).
      d.daemon.store.sqlite!.exec(`CREATE TRIGGER fail_insert BEFORE INSERT ON agents BEGIN SELECT RAISE(ABORT, 'disk on fire'); END;`);
      const r = await d.api('POST', `/v1/agents/${a.id}/duplicate`, { graph_version_id: v.id });
      expect(r.status).toBe(500);
      expect(r.body).toEqual({ error: 'internal server error' });
      expect(r.text).not.toMatch(/disk on fire|at .*\.ts/);
      const c = await d.api('POST', '/v1/agents', { name: 'y' });
      expect(c.status).toBe(500);
    } finally {
      await d.close();
    }
  });
});
