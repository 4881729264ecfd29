import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

describe('region pinning (x-service-region)', () => {
  let us: TestDaemon;
  let ca: TestDaemon;
  let lonely: TestDaemon;
  beforeAll(async () => {
    ca = await startTestDaemon({ region: { self: 'northamerica-northeast1' } });
    us = await startTestDaemon({ region: { self: 'us-central1', peer_northamerica_northeast1: ca.url } });
    lonely = await startTestDaemon({ region: { self: 'us-central1' } });
  });
  afterAll(async () => {
    await us.close();
    await ca.close();
    await lonely.close();
  });

  it('serves requests without the header or naming its own region', async () => {
    expect((await us.api('GET', '/v1/agents')).status).toBe(200);
    expect((await us.api('GET', '/v1/agents', undefined, { headers: { 'x-service-region': 'us-central1' } })).status).toBe(200);
  });

  it('proxies requests naming the other region to its base URL, body and key included', async () => {
    // The key exists only in the Canadian store: a 201 proves the request was served there.
    const r = await us.api('POST', '/v1/agents', { name: 'Made in Canada' }, { key: ca.key, headers: { 'x-service-region': 'northamerica-northeast1' } });
    expect(r.status).toBe(201);
    expect(r.headers.get('x-served-by-region')).toBe('northamerica-northeast1');
    expect((await ca.api('GET', `/v1/agents/${r.body.id}`)).body.name).toBe('Made in Canada');
    expect((await us.api('GET', `/v1/agents/${r.body.id}`)).status).toBe(404);
    // Errors of the other region come back as they are.
    const bad = await us.api('POST', '/v1/agents', { name: 'x', nope: 1 }, { key: ca.key, headers: { 'x-service-region': 'northamerica-northeast1' } });
    expect(bad.status).toBe(400);
    expect(bad.body.error).toContain('nope');
  });

  it('503 when the named region has no configured base URL', async () => {
    const r = await lonely.api('GET', '/v1/agents', undefined, { headers: { 'x-service-region': 'northamerica-northeast1' } });
    expect(r.status).toBe(503);
    expect(r.body.error).toMatch(/not configured/);
  });

  it('400 for any other value, before authentication', async () => {
    for (const v of ['europe-west1', 'US-CENTRAL1', '']) {
      const r = await us.api('GET', '/v1/agents', undefined, { key: null, headers: { 'x-service-region': v } });
      expect(r.status, v).toBe(400);
      expect(r.body.error).toMatch(/us-central1, northamerica-northeast1/);
    }
  });

  it('502 when the other region does not answer', async () => {
    const dead = await startTestDaemon({ region: { self: 'northamerica-northeast1' } });
    const url = dead.url;
    await dead.close();
    const d = await startTestDaemon({ region: { self: 'us-central1', peer_northamerica_northeast1: url } });
    try {
      const r = await d.api('GET', '/v1/agents', undefined, { headers: { 'x-service-region': 'northamerica-northeast1' } });
      expect(r.status).toBe(502);
      expect(r.body.error).toMatch(/did not answer/);
    } finally {
      await d.close();
    }
  });
});
