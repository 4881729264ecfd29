/**
 * Call limits refuse before ringing: the call-limit refusal once came after a 180 Ringing and without Retry-After,
 * though bridge.max_calls promises Retry-After. The bridge now admits a routed INVITE before the
 * UAS sends any provisional response: over bridge.max_calls, 503 with Retry-After; over
 * bridge.max_calls_per_trunk, 486 Busy Here; no 18x either way (a 100 Trying is allowed).
 *
 * A real daemon and a raw UDP socket (every response seen, exactly): the first INVITE is routed
 * and bridged (it counts against the limits from then on), the second is refused.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { startRawSipPeer, type RawSipPeer } from '../helpers/raw-sip.ts';
import type { SipResponse } from '../../src/sip/message/index.ts';

const NUMBER = '+15550408000';
const delay = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

let d: TestDaemon | undefined;
let peer: RawSipPeer | undefined;
afterEach(async () => {
  await peer?.close();
  await d?.close();
  peer = undefined;
  d = undefined;
});

async function daemonWith(bridge: Record<string, unknown>): Promise<TestDaemon> {
  const td = await startTestDaemon({ rtp: { address: '127.0.0.1', media_threads: 0 }, bridge });
  const agent = (await td.api('POST', '/v1/agents', { name: 'Desk', first_message: 'Hello.' })).body;
  const trunk = (await td.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'acl', inbound_auth_type: 'acl', inbound_acl: ['127.0.0.1/32'] })).body;
  expect((await td.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER })).status).toBe(201);
  return td;
}

async function finalOf(p: RawSipPeer, callId: string): Promise<SipResponse> {
  const end = Date.now() + 5000;
  for (;;) {
    const f = p.for(callId).find((r) => r.status >= 200);
    if (f) return f;
    if (Date.now() > end) throw new Error(`no final response for ${callId}: ${p.for(callId).map((r) => r.status).join(', ')}`);
    await delay(10);
  }
}

/** One call up (bridged, counted by the limits), then a second INVITE: its responses. */
async function secondCall(td: TestDaemon): Promise<SipResponse[]> {
  peer = await startRawSipPeer('127.0.0.1');
  const port = td.daemon.sip!.port;
  peer.invite(port, { user: NUMBER, from: '+15559990001' });
  const end = Date.now() + 5000;
  while (td.daemon.bridge.active < 1) {
    if (Date.now() > end) throw new Error('the first call was never bridged');
    await delay(10);
  }
  const second = peer.invite(port, { user: NUMBER, from: '+15559990002' });
  await finalOf(peer, second);
  await delay(100); // anything sent after the final would show up here
  return peer.for(second);
}

describe('call limits refuse before any provisional response', () => {
  it('bridge.max_calls 1: the second INVITE gets 503 with Retry-After and no 18x', async () => {
    d = await daemonWith({ max_calls: 1 });
    const responses = await secondCall(d);
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s > 100 && s < 200), `responses: ${statuses.join(', ')}`).toEqual([]);
    const final = responses.find((r) => r.status >= 200)!;
    expect(final.status).toBe(503);
    expect(final.get('Retry-After')).toMatch(/^[1-9]\d*$/);
    const metrics = (await fetch(`${d.url}/metrics`).then((r) => r.text())).split('\n');
    expect(metrics).toContain('callbridge_bridge_call_failures_total{reason="limit_global"} 1');
    expect(metrics).toContain('callbridge_sip_call_outcomes_total{outcome="over_limit"} 1');
    expect(d.daemon.bridge.active).toBe(1);
  });

  it('bridge.max_calls_per_trunk 1: the second INVITE on the trunk gets 486 and no 18x', async () => {
    d = await daemonWith({ max_calls_per_trunk: 1 });
    const responses = await secondCall(d);
    const statuses = responses.map((r) => r.status);
    expect(statuses.filter((s) => s > 100 && s < 200), `responses: ${statuses.join(', ')}`).toEqual([]);
    expect(responses.find((r) => r.status >= 200)!.status).toBe(486);
    const metrics = (await fetch(`${d.url}/metrics`).then((r) => r.text())).split('\n');
    expect(metrics).toContain('callbridge_bridge_call_failures_total{reason="limit_trunk"} 1');
  });
});
