/**
 * Call events end to end, each request verified by a real receiver with the npm library
 * `standardwebhooks` (test/helpers/webhook-receiver.ts):
 * - a SIPp call to an ACL trunk gives call.started, call.answered and call.ended in that order,
 *   call.ended's data.call equal to GET /v1/calls/{id} once the call is over;
 * - a daemon process killed (SIGKILL) with events pending (the receiver down) delivers them after
 *   its restart;
 * - two daemons on one PostgreSQL store deliver each pending event exactly once.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeJwt } from 'jose';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startWebhookReceiver, type WebhookReceiver } from '../helpers/webhook-receiver.ts';
import { untilAsync } from '../helpers/until.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { runSipp, sippAvailable } from '../interop/sipp.ts';
import { startCallbridgeNode, type CallbridgeNode } from '../cluster/callbridge-node.ts';

const NUMBER = '+15550007101';
const CALLER = '+15559997101';
const FAST = { allow_private_destinations: true, timeout_ms: 1000, retry_base_ms: 100, poll_interval_ms: 50 };

describe.skipIf(sippAvailable().skip)('call events of a SIPp call', () => {
  let d: TestDaemon | undefined;
  let rx: WebhookReceiver | undefined;
  afterAll(async () => {
    await d?.close();
    await rx?.close();
  });

  it('call.started, call.answered, call.ended in order, signed; call.ended carries the call as GET /v1/calls/{id} shows it', async () => {
    rx = await startWebhookReceiver();
    d = await startTestDaemon({ rtp: { address: '127.0.0.1' }, webhooks: FAST });
    const agentId = (await d.api('POST', '/v1/agents', { name: 'Front desk', first_message: 'Hello from the bridge.' })).body.id;
    const trunkId = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
    const hook = (await d.api('POST', '/v1/webhooks', { url: rx.url, events: ['call.started', 'call.answered', 'call.ended'] })).body;
    rx.secret = hook.secret;

    const r = await runSipp({ scenario: 'inbound-acl', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: NUMBER, keys: { caller: CALLER }, durationMs: 1000 });
    expect(r.code, r.describe()).toBe(0);
    await untilAsync(() => rx!.accepted().length >= 3, 'three call events', 10_000);
    const events = rx.received.map((x) => {
      expect(x.verifyError).toBeUndefined();
      expect(x.event.id).toBe(x.headers['webhook-id']);
      return x.event;
    });
    expect(events.map((e) => e.type)).toEqual(['call.started', 'call.answered', 'call.ended']);
    const callId = events[0].data.call.id as string;
    expect(events.every((e) => e.data.call.id === callId)).toBe(true);
    expect(events[0].data.call).toMatchObject({ status: 'started', direction: 'inbound', from: CALLER, to: NUMBER, sip_trunk_id: trunkId });
    expect(events[1].data.call).toMatchObject({ status: 'in_progress', started_at: expect.any(String) });
    const final = (await d.api('GET', `/v1/calls/${callId}`)).body;
    // The event carries the call as GET shows it, less the latency field (docs/webhooks.md).
    const { latency, ...finalWithoutLatency } = final;
    expect(latency).toBeDefined();
    expect(events[2].data.call).toEqual(finalWithoutLatency);
    expect(final).toMatchObject({ status: 'ended', end_status: 'completed', termination_reason: 'client_closed' });
    expect(final.transcript.entries[0]).toMatchObject({ role: 'assistant', message: expect.stringContaining('Hello') });
  });
});

describe('webhook delivery across a crash', () => {
  let node: CallbridgeNode | undefined;
  let rx: WebhookReceiver | undefined;
  afterAll(async () => {
    await node?.close();
    await rx?.close();
  });

  it('events pending when the daemon is SIGKILLed are delivered after its restart', async () => {
    // The receiver's port, then the receiver down: every attempt before the crash is refused.
    const probe = await startWebhookReceiver();
    const port = probe.port;
    await probe.close();
    node = await startCallbridgeNode({
      name: 'hooks',
      env: {
        CALLBRIDGE_WEBHOOKS_ALLOW_PRIVATE_DESTINATIONS: 'true',
        CALLBRIDGE_WEBHOOKS_TIMEOUT_MS: '1000',
        CALLBRIDGE_WEBHOOKS_RETRY_BASE_MS: '100',
        CALLBRIDGE_WEBHOOKS_POLL_INTERVAL_MS: '50',
      },
    });
    const agentId = (await node.api('POST', '/v1/agents', { name: 'Crashy' })).body.id;
    const hook = (await node.api('POST', '/v1/webhooks', { url: `http://127.0.0.1:${port}/hooks`, events: ['call.started'] })).body;
    const calls: string[] = [];
    for (let i = 0; i < 3; i++) calls.push(decodeJwt((await node.api('POST', '/v1/session-token', { agent_id: agentId })).body.token).sub!);
    let seen = '';
    await untilAsync(async () => {
      const r = await node!.api('GET', `/v1/webhooks/${hook.id}/deliveries`);
      seen = r.text;
      const deliveries = r.body as Array<{ attempts: number; error?: string }>;
      // Refused (ECONNREFUSED), or a timeout on a loaded machine: a failed attempt either way.
      return deliveries.length === 3 && deliveries.every((x) => x.attempts >= 1 && x.error !== undefined);
    }, 'three failed attempts', 20_000).catch((err: Error) => {
      throw new Error(`${err.message}: ${seen}\n${node!.output().slice(-3000)}`);
    });
    await node.kill9();

    rx = await startWebhookReceiver(port);
    rx.secret = hook.secret;
    await node.start();
    await untilAsync(() => rx!.accepted().length >= 3, 'the three events after the restart', 15_000);
    expect(rx.received.every((x) => x.verifyError === undefined)).toBe(true);
    expect(rx.accepted().map((x) => x.event.data.call.id).sort()).toEqual([...calls].sort());
    await untilAsync(async () => ((await node!.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body as Array<{ status: string }>).every((x) => x.status === 'delivered'), 'all delivered');
  });
});

const pg = postgresAvailability();

describe.skipIf(pg.skip)(`two daemons on one PostgreSQL store${pg.skip ? `: skipped, ${pg.reason}` : ''}`, () => {
  let server: PostgresServer | undefined;
  const daemons: TestDaemon[] = [];
  let rx: WebhookReceiver | undefined;
  afterAll(async () => {
    for (const d of daemons) await d.close().catch(() => {});
    await rx?.close();
    await server?.stop();
  });

  it('deliver each pending event exactly once', async () => {
    server = await startPostgres();
    const url = await server.createDatabase('webhook_nodes');
    const overrides = {
      store: { url, pool_size: 4 },
      security: { encryption_key: Buffer.alloc(32, 0x3c).toString('base64'), token_secret: Buffer.alloc(32, 0x4d).toString('base64') },
      sip: { enabled: false },
      webhooks: FAST,
    };
    rx = await startWebhookReceiver();
    // The receiver refuses everything until both nodes hold pending events.
    rx.fallback = 503;
    const a = await startTestDaemon(overrides);
    daemons.push(a);
    const b = await startTestDaemon(overrides, join(mkdtempSync(join(tmpdir(), 'callbridge-hooks-b-')), 'data'));
    daemons.push(b);
    const agentId = (await a.api('POST', '/v1/agents', { name: 'Shared' })).body.id;
    const hook = (await a.api('POST', '/v1/webhooks', { url: rx.url, events: ['call.started'] })).body;
    rx.secret = hook.secret;
    const calls: string[] = [];
    for (let i = 0; i < 20; i++) {
      const node = i % 2 === 0 ? a : b;
      calls.push(decodeJwt((await node.api('POST', '/v1/session-token', { agent_id: agentId }, { key: a.key })).body.token).sub!);
    }
    await untilAsync(async () => ((await a.api('GET', `/v1/webhooks/${hook.id}/deliveries`)).body as Array<{ attempts: number }>).every((x) => x.attempts >= 1), 'an attempt of each', 10_000);
    rx.fallback = 200;
    await untilAsync(async () => ((await b.api('GET', `/v1/webhooks/${hook.id}/deliveries`, undefined, { key: a.key })).body as Array<{ status: string }>).every((x) => x.status === 'delivered'), 'all delivered', 15_000);
    const delivered = rx.accepted().map((x) => x.event.data.call.id as string);
    expect(delivered.sort()).toEqual([...calls].sort());
    expect(new Set(rx.accepted().map((x) => x.headers['webhook-id'])).size).toBe(20);
  });
});
