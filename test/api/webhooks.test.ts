/**
 * /v1/webhooks against a real daemon, and the deliveries a real receiver on loopback gets: each
 * request verified with the npm library `standardwebhooks` (test/helpers/webhook-receiver.ts).
 * Events come from session tokens (a token writes its call record: call.started); the SIPp call
 * with all three call events is test/events/call-events.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeJwt } from 'jose';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts';
import { untilAsync } from '../helpers/until.ts';

const MISSING = '00000000-0000-4000-8000-000000000000';

/** Webhooks to loopback, short timeouts and retries: a test's seconds, not a day's. */
const FAST = { webhooks: { allow_private_destinations: true, timeout_ms: 600, retry_base_ms: 100, poll_interval_ms: 50 } };

describe('/v1/webhooks: endpoints', () => {
  let d: TestDaemon;
  beforeAll(async () => {
    d = await startTestDaemon(FAST);
  });
  afterAll(() => d.close());

  it('creates (201, the secret only there), lists, gets, patches and deletes an endpoint', async () => {
    const created = await d.api('POST', '/v1/webhooks', { url: 'https://crm.example.com/hooks', events: ['call.ended', 'call.started', 'call.ended'], description: 'CRM' });
    expect(created.status, created.text).toBe(201);
    const { secret, ...endpoint } = created.body;
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+=*$/);
    expect(endpoint).toEqual({ id: expect.any(String), url: 'https://crm.example.com/hooks', events: ['call.ended', 'call.started'], description: 'CRM', created_at: expect.any(String) });
    const id = endpoint.id as string;

    const got = await d.api('GET', `/v1/webhooks/${id}`);
    expect(got.status).toBe(200);
    expect(got.body).toEqual(endpoint);
    expect(got.text).not.toContain(secret);
    const list = await d.api('GET', '/v1/webhooks');
    expect(list.body).toContainEqual(endpoint);
    expect(list.text).not.toContain(secret);

    const patched = await d.api('PATCH', `/v1/webhooks/${id}`, { url: 'https://crm.example.com/v2', events: ['tool.call'] });
    expect(patched.status, patched.text).toBe(200);
    expect(patched.body).toEqual({ ...endpoint, url: 'https://crm.example.com/v2', events: ['tool.call'] });
    expect((await d.api('PATCH', `/v1/webhooks/${id}`, { description: '' })).body.description).toBe('');
    // The secret is kept sealed: the tool-call target reads the same one back.
    const orgId = (await d.api('GET', '/v1/organization')).body.id as string;
    expect(await d.daemon.store.webhooks.forToolCall(orgId)).toEqual({ id, url: 'https://crm.example.com/v2', secret });
    expect(await d.daemon.store.webhooks.forToolCall(orgId, id)).toEqual({ id, url: 'https://crm.example.com/v2', secret });
    expect(await d.daemon.store.webhooks.forToolCall(orgId, MISSING)).toBeUndefined();
    const row = d.daemon.store.sqlite!.prepare('SELECT secret_enc FROM webhook_endpoints WHERE id = ?').get(id) as { secret_enc: string };
    expect(row.secret_enc).not.toContain(secret.slice(6));

    expect((await d.api('GET', `/v1/webhooks/${id}/deliveries`)).body).toEqual([]);
    expect((await d.api('DELETE', `/v1/webhooks/${id}`)).status).toBe(204);
    expect((await d.api('GET', `/v1/webhooks/${id}`)).status).toBe(404);
    expect((await d.api('DELETE', `/v1/webhooks/${id}`)).status).toBe(404);
  });

  it('400 naming what is wrong: unknown event type, bad url, unknown field, malformed id', async () => {
    const bad: Array<[unknown, RegExp]> = [
      [{ url: 'https://x.example.com', events: ['call.started', 'call.exploded'] }, /unknown event type "call\.exploded"/],
      [{ url: 'https://x.example.com', events: [] }, /events/],
      [{ url: 'ftp://x.example.com', events: ['call.ended'] }, /url must be http or https/],
      [{ url: 'https://user:pw@x.example.com', events: ['call.ended'] }, /url must not carry credentials/],
      [{ url: 'not a url', events: ['call.ended'] }, /url is not an absolute URL/],
      [{ events: ['call.ended'] }, /url/],
      [{ url: 'https://x.example.com', events: ['call.ended'], secret: 'whsec_mine' }, /secret/],
    ];
    for (const [body, message] of bad) {
      const r = await d.api('POST', '/v1/webhooks', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error, JSON.stringify(body)).toMatch(message);
    }
    const id = (await d.api('POST', '/v1/webhooks', { url: 'https://x.example.com', events: ['call.ended'] })).body.id;
    const p = await d.api('PATCH', `/v1/webhooks/${id}`, { events: ['recording.done'] });
    expect(p.status).toBe(400);
    expect(p.body.error).toMatch(/recording\.done/);
    expect((await d.api('GET', '/v1/webhooks/not-a-uuid')).status).toBe(400);
    expect((await d.api('GET', `/v1/webhooks/${MISSING}`)).status).toBe(404);
    expect((await d.api('PATCH', `/v1/webhooks/${MISSING}`, { description: 'x' })).status).toBe(404);
    expect((await d.api('GET', `/v1/webhooks/${MISSING}/deliveries`)).status).toBe(404);
  });

  it("another organization's endpoint is 404 on every route, and not listed", async () => {
    const mine = (await d.api('POST', '/v1/webhooks', { url: 'https://a.example.com', events: ['call.ended'] })).body;
    const other = await d.newOrgKey('other');
    const as = { key: other };
    expect((await d.api('GET', `/v1/webhooks/${mine.id}`, undefined, as)).status).toBe(404);
    expect((await d.api('PATCH', `/v1/webhooks/${mine.id}`, { description: 'x' }, as)).status).toBe(404);
    expect((await d.api('GET', `/v1/webhooks/${mine.id}/deliveries`, undefined, as)).status).toBe(404);
    expect((await d.api('DELETE', `/v1/webhooks/${mine.id}`, undefined, as)).status).toBe(404);
    expect((await d.api('GET', '/v1/webhooks', undefined, as)).body).toEqual([]);
    expect((await d.api('GET', `/v1/webhooks/${mine.id}`)).body).toEqual({ ...mine, secret: undefined });
  });

  it('is in the served OpenAPI document, without the secret except in the create answer', async () => {
    const doc = (await d.api('GET', '/v1/openapi.json')).body;
    expect(Object.keys(doc.paths['/v1/webhooks']).sort()).toEqual(['get', 'post']);
    expect(Object.keys(doc.paths['/v1/webhooks/{id}']).sort()).toEqual(['delete', 'get', 'patch']);
    expect(Object.keys(doc.paths['/v1/webhooks/{id}/deliveries'])).toEqual(['get']);
    const props = (op: any, status: string) => Object.keys(op.responses[status].content['application/json'].schema.properties ?? op.responses[status].content['application/json'].schema.items.properties);
    expect(props(doc.paths['/v1/webhooks'].post, '201')).toContain('secret');
    expect(props(doc.paths['/v1/webhooks/{id}'].get, '200')).not.toContain('secret');
    expect(props(doc.paths['/v1/webhooks'].get, '200')).not.toContain('secret');
    expect(props(doc.paths['/v1/webhooks/{id}'].patch, '200')).not.toContain('secret');
  });
});

describe('webhook delivery', () => {
  let d: TestDaemon;
  let rx: WebhookReceiver;
  let agentId: string;
  const logLines: string[] = [];
  const secrets: string[] = [];
  beforeAll(async () => {
    rx = await startWebhookReceiver();
    d = await startTestDaemon(FAST, undefined, {}, logLines);
    agentId = (await d.api('POST', '/v1/agents', { name: 'Hooked' })).body.id;
  });
  afterAll(async () => {
    await d.close();
    await rx.close();
  });

  afterAll(() => {
    // Every log line of the suite (info and above: creations, deletions, failures), no secret in any.
    expect(logLines.length).toBeGreaterThan(0);
    for (const secret of secrets) expect(logLines.join('\n')).not.toContain(secret.slice('whsec_'.length));
  });

  /** The call as events carry it: GET /v1/calls/{id} without its latency field (docs/webhooks.md). */
  const withoutLatency = ({ latency: _latency, ...call }: Record<string, unknown>) => call;
  const newCall = async (): Promise<string> => decodeJwt((await d.api('POST', '/v1/session-token', { agent_id: agentId })).body.token).sub!;

  it('sends call.started signed, with the call as GET /v1/calls/{id} shows it; only to subscribers', async () => {
    const hook = (await d.api('POST', '/v1/webhooks', { url: rx.url, events: ['call.started'] })).body;
    const notSubscribed = (await d.api('POST', '/v1/webhooks', { url: rx.url, events: ['call.ended'] })).body;
    rx.secret = hook.secret;
    secrets.push(hook.secret, notSubscribed.secret);
    rx.received.length = 0;
    const callId = await newCall();
    await untilAsync(() => rx.received.length >= 1, 'the call.started webhook');
    const [got] = rx.received;
    expect(got!.verifyError).toBeUndefined();
    expect(got!.event).toEqual({ type: 'call.started', id: got!.headers['webhook-id'], created_at: expect.any(String), data: { call: withoutLatency((await d.api('GET', `/v1/calls/${callId}`)).body) } });
    await untilAsync(async () => (await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body[0]?.status === 'delivered', 'delivered in /deliveries');
    const [delivery] = (await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body;
    expect(delivery).toMatchObject({ event_id: got!.headers['webhook-id'], event_type: 'call.started', call_id: callId, status: 'delivered', attempts: 1, response_status: 200 });
    expect((await d.api('GET', `/v1/webhooks/${notSubscribed.id}/deliveries`)).body).toEqual([]);
    await d.api('DELETE', `/v1/webhooks/${hook.id}`);
    await d.api('DELETE', `/v1/webhooks/${notSubscribed.id}`);
  });

  it('retries a 500 and a timeout, then delivers once: attempts 3, the same webhook-id each time', async () => {
    const hook = (await d.api('POST', '/v1/webhooks', { url: rx.url, events: ['call.started'] })).body;
    rx.secret = hook.secret;
    secrets.push(hook.secret);
    rx.received.length = 0;
    rx.script.push(500, 'hang');
    const callId = await newCall();
    await untilAsync(async () => (await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body[0]?.status === 'delivered', 'the delivery after two failures', 15_000);
    expect(rx.received.map((r) => r.answer)).toEqual([500, 'hang', 200]);
    expect(rx.received.every((r) => r.verifyError === undefined)).toBe(true);
    expect(new Set(rx.received.map((r) => r.headers['webhook-id'])).size).toBe(1);
    expect(rx.accepted()).toHaveLength(1);
    const deliveries = (await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body;
    expect(deliveries).toEqual([
      { id: expect.any(String), event_id: rx.received[0]!.headers['webhook-id'], event_type: 'call.started', call_id: callId, status: 'delivered', attempts: 3, response_status: 200, created_at: expect.any(String), finished_at: expect.any(String) },
    ]);
    const metrics = (await d.api('GET', '/metrics')).text;
    expect(metrics).toMatch(/callbridge_webhook_failed_attempts_total\{event_type="call.started",reason="status"\} [1-9]/);
    expect(metrics).toMatch(/callbridge_webhook_failed_attempts_total\{event_type="call.started",reason="timeout"\} [1-9]/);
    expect(metrics).toMatch(/callbridge_webhook_deliveries_total\{event_type="call.started"\} [1-9]/);
    expect(metrics).toMatch(/callbridge_webhook_deliveries_pending 0/);
    expect(metrics).toMatch(/callbridge_webhook_delivery_latency_seconds_count [1-9]/);
    await d.api('DELETE', `/v1/webhooks/${hook.id}`);
  });

  it('records a failing attempt in /deliveries with its error and next retry', async () => {
    const hook = (await d.api('POST', '/v1/webhooks', { url: rx.url, events: ['call.started'] })).body;
    rx.secret = hook.secret;
    rx.fallback = 503;
    try {
      await newCall();
      await untilAsync(async () => ((await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body[0]?.attempts ?? 0) >= 1, 'a failed attempt');
      const [delivery] = (await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body;
      expect(delivery).toMatchObject({ status: 'pending', response_status: 503, error: 'HTTP 503', next_attempt_at: expect.any(String) });
    } finally {
      rx.fallback = 200;
      await d.api('DELETE', `/v1/webhooks/${hook.id}`);
    }
  });
});

describe('webhook delivery: giving up, stopping', () => {
  it('gives a delivery up once its next attempt would come after webhooks.retry_max_hours', async () => {
    const rx = await startWebhookReceiver();
    // 0.0005 h = 1.8 s of retries 100, 200, 400, 800 ms (with jitter) apart.
    const d = await startTestDaemon({ webhooks: { ...FAST.webhooks, retry_max_hours: 0.0005 } });
    try {
      rx.fallback = 500;
      const agentId = (await d.api('POST', '/v1/agents', { name: 'Hooked' })).body.id;
      const hook = (await d.api('POST', '/v1/webhooks', { url: rx.url, events: ['call.started'] })).body;
      rx.secret = hook.secret;
      await d.api('POST', '/v1/session-token', { agent_id: agentId });
      await untilAsync(async () => (await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body[0]?.status === 'failed', 'the delivery given up', 10_000);
      const [delivery] = (await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body;
      expect(delivery).toMatchObject({ status: 'failed', response_status: 500, error: 'HTTP 500', finished_at: expect.any(String) });
      expect(delivery.next_attempt_at).toBeUndefined();
      expect(delivery.attempts).toBeGreaterThanOrEqual(2);
      expect(rx.received).toHaveLength(delivery.attempts);
      expect((await d.api('GET', '/metrics')).text).toMatch(/callbridge_webhook_given_up_total\{event_type="call.started"\} 1/);
    } finally {
      await d.close();
      await rx.close();
    }
  });

  it('a stopped daemon leaves its undelivered events in the store; restarted, it delivers them', async () => {
    const rx = await startWebhookReceiver();
    let d = await startTestDaemon(FAST);
    try {
      rx.fallback = 503;
      const agentId = (await d.api('POST', '/v1/agents', { name: 'Hooked' })).body.id;
      const hook = (await d.api('POST', '/v1/webhooks', { url: rx.url, events: ['call.started'] })).body;
      rx.secret = hook.secret;
      const callId = decodeJwt((await d.api('POST', '/v1/session-token', { agent_id: agentId })).body.token).sub!;
      await untilAsync(async () => ((await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body[0]?.attempts ?? 0) >= 1, 'a failed attempt');
      d = await d.restart();
      rx.fallback = 200;
      await untilAsync(() => rx.accepted().length === 1, 'the delivery after the restart');
      expect(rx.accepted()[0]!.event.data.call.id).toBe(callId);
      expect((await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body[0]).toMatchObject({ status: 'delivered', response_status: 200 });
    } finally {
      await d.close();
      await rx.close();
    }
  });
});

describe('webhook delivery under the default destination policy', () => {
  it('refuses a loopback url at delivery: an error in /deliveries, nothing sent', async () => {
    const rx = await startWebhookReceiver();
    const d = await startTestDaemon({ webhooks: { timeout_ms: 600, retry_base_ms: 100, poll_interval_ms: 50 } });
    try {
      const agentId = (await d.api('POST', '/v1/agents', { name: 'Hooked' })).body.id;
      const hook = (await d.api('POST', '/v1/webhooks', { url: rx.url, events: ['call.started'] })).body;
      rx.secret = hook.secret;
      expect((await d.api('POST', '/v1/session-token', { agent_id: agentId })).status).toBe(200);
      await untilAsync(async () => ((await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body[0]?.attempts ?? 0) >= 2, 'two refused attempts');
      const [delivery] = (await d.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body;
      expect(delivery.status).toBe('pending');
      expect(delivery.error).toMatch(/^destination: .*not a public address/);
      expect(delivery.response_status).toBeUndefined();
      expect(rx.received).toEqual([]);
    } finally {
      await d.close();
      await rx.close();
    }
  });
});
