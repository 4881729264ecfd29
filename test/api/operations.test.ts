import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

describe('health, readiness, metrics, OpenAPI, catalogs', () => {
  let d: TestDaemon;
  beforeAll(async () => {
    d = await startTestDaemon({
      llm: {
        providers: [
          { name: 'zeta', type: 'openai', base_url: 'http://127.0.0.1:9', models: ['m2', 'm1'] },
          { name: 'local', type: 'echo', models: ['echo'] },
          { name: 'anthro', type: 'anthropic', base_url: 'http://127.0.0.1:9', models: ['c'] },
        ],
      },
    });
  });
  afterAll(() => d.close());

  it('healthz and readyz answer without a key', async () => {
    expect((await d.api('GET', '/healthz', undefined, { key: null })).body).toEqual({ status: 'ok' });
    // With no recognizer configured, the ready body says so plainly (docs/configuration.md "Speech and model providers").
    expect((await d.api('GET', '/readyz', undefined, { key: null })).body).toEqual({ status: 'ready', detail: expect.stringContaining('the built-in local one marks utterances but recognizes no words') });
  });

  it('GET /v1/llms lists the configured provider/model identifiers, sorted', async () => {
    const r = await d.api('GET', '/v1/llms');
    expect(r.body).toEqual({ llms: ['anthro/c', 'local/echo', 'zeta/m1', 'zeta/m2'] });
    expect((await d.api('GET', '/v1/llms', undefined, { key: null })).status).toBe(401);
  });

  it('GET /v1/voices and /v1/organization', async () => {
    const v = await d.api('GET', '/v1/voices');
    expect(v.status).toBe(200);
    expect(v.body.voices.length).toBeGreaterThan(0);
    for (const voice of v.body.voices) expect(Object.keys(voice)).toEqual(expect.arrayContaining(['id', 'name', 'provider', 'languages']));
    const o = await d.api('GET', '/v1/organization');
    expect(Object.keys(o.body).sort()).toEqual(['created_at', 'id', 'name']);
    expect(o.body.name).toBe('default');
  });

  it('counts requests and latencies in Prometheus format by route template', async () => {
    await d.api('GET', '/v1/llms');
    const r = await d.api('GET', '/metrics', undefined, { key: null });
    expect(r.status).toBe(200);
    expect(r.text).toMatch(/callbridge_http_requests_total\{method="GET",route="\/v1\/llms",status="200"\} [1-9]/);
    expect(r.text).toMatch(/callbridge_http_request_duration_seconds_bucket\{le="0.005",method="GET",route="\/v1\/llms"\}/);
    expect(r.text).toContain('callbridge_process_cpu_seconds_total');
    // One node on SQLite runs every once-per-cluster job.
    for (const role of ['carrier_registration', 'sip_registration_sweep', 'session_token_sweep']) expect(r.text).toContain(`callbridge_cluster_role{role="${role}"} 1`);
  });

  it('serves an OpenAPI 3.1 document built from the validation schemas', async () => {
    const r = await d.api('GET', '/v1/openapi.json', undefined, { key: null });
    expect(r.status).toBe(200);
    const doc = r.body;
    expect(doc.openapi).toBe('3.1.0');
    const expected: Array<[string, string]> = [
      ['/v1/agents', 'post'],
      ['/v1/agents', 'get'],
      ['/v1/agents/{id}', 'get'],
      ['/v1/agents/{id}', 'patch'],
      ['/v1/agents/{id}', 'delete'],
      ['/v1/agents/{id}/duplicate', 'post'],
      ['/v1/agents/{id}/dial', 'post'],
      ['/v1/agents/{id}/versions/{versionId}/publish', 'post'],
      ['/v1/session-token', 'post'],
      ['/v1/llms', 'get'],
      ['/v1/voices', 'get'],
      ['/v1/calls', 'get'],
      ['/v1/organization', 'get'],
    ];
    for (const [path, method] of expected) expect(doc.paths[path]?.[method], `${method} ${path}`).toBeDefined();
    // Limits from the schemas the routes validate with appear in the document.
    const create = doc.paths['/v1/agents'].post.requestBody.content['application/json'].schema;
    expect(create.properties.noise_cancel_settings.properties.level).toMatchObject({ minimum: 0, maximum: 100 });
    expect(create.properties.voice_settings.properties.speed).toMatchObject({ minimum: 0, maximum: 2 });
    expect(create.properties.llm.enum).toEqual(['anthro/c', 'local/echo', 'zeta/m1', 'zeta/m2']);
    expect(create.required).toEqual(['name']);
    expect(create.additionalProperties).toBe(false);
    expect(doc.paths['/v1/agents/{id}/duplicate'].post.responses['409']).toBeDefined();
  });

  it('readyz turns 503 while the daemon drains', async () => {
    const d2 = await startTestDaemon();
    const closing = d2.daemon.close();
    // Once close() starts the server refuses new connections or answers 503; never "ready".
    const r = await fetch(d2.url + '/readyz').then(
      (res) => res.status,
      () => 'refused',
    );
    expect([503, 'refused']).toContain(r);
    await closing;
  });
});
