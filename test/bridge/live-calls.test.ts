/**
 * GET /v1/calls/live (docs/calls.md), with the media on the main thread (rtp.media_threads 0;
 * test/console/console.test.ts covers the media worker's snapshot): a SIPp call on an ACL trunk
 * is listed while it runs, as its call record plus the bridge's media figures so far, for its
 * organization only, and is gone once it ends. (On the code before the route, /v1/calls/live was
 * read as a call id: 400.)
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { runSipp, sippAvailable } from '../interop/sipp.ts';

const NUMBER = '+15550008101';
const CALLER = '+15559998101';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.skipIf(sippAvailable().skip)('GET /v1/calls/live (SIPp, media on the main thread)', () => {
  let d: TestDaemon;
  let agentId: string;
  let trunkId: string;
  beforeAll(async () => {
    d = await startTestDaemon({ rtp: { address: '127.0.0.1', media_threads: 0 } });
    agentId = (await d.api('POST', '/v1/agents', { name: 'Live desk', first_message: 'Hello.' })).body.id;
    trunkId = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body.id;
    expect((await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, alternate_number: NUMBER })).status).toBe(201);
  });
  afterAll(async () => {
    await d?.close();
  });

  it('lists the call while it runs with its packets, loss, jitter and late frames; not for another organization; not once it ended', async () => {
    const other = await d.newOrgKey('someone else');
    expect((await d.api('GET', '/v1/calls/live')).body).toEqual({ calls: [] });
    const call = runSipp({ scenario: 'inbound-acl', remote: `127.0.0.1:${d.daemon.sip!.port}`, service: NUMBER, keys: { caller: CALLER }, durationMs: 3000 });
    // Listed once its media runs; figures once the caller's packets arrived.
    let live = await d.api('GET', '/v1/calls/live');
    for (const until = Date.now() + 8000; !(live.body.calls[0]?.live.packets_received > 0) && Date.now() < until; await sleep(100)) {
      live = await d.api('GET', '/v1/calls/live');
    }
    expect(live.status, live.text).toBe(200);
    expect(live.body.calls).toHaveLength(1);
    const c = live.body.calls[0];
    expect(c).toMatchObject({ agent_id: agentId, sip_trunk_id: trunkId, from: CALLER, to: NUMBER, direction: 'inbound', source: 'sip' });
    expect(c.ended_at).toBeUndefined();
    expect(c.live.packets_received).toBeGreaterThan(0);
    expect(c.live.packets_lost).toBe(0);
    expect(c.live.loss_ratio).toBe(0);
    expect(c.live.jitter_ms).toBeGreaterThanOrEqual(0);
    expect(c.live.late_frames).toEqual(expect.any(Number));
    expect((await d.api('GET', '/v1/calls/live', undefined, { key: other })).body).toEqual({ calls: [] });

    const r = await call;
    expect(r.code, r.describe()).toBe(0);
    // The bridge forgets the call as it ends (the record's end is written beside it).
    for (const until = Date.now() + 5000; d.daemon.bridge.active > 0 && Date.now() < until; await sleep(50));
    expect((await d.api('GET', '/v1/calls/live')).body).toEqual({ calls: [] });
  });
});
