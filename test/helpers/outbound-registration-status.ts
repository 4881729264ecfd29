/**
 * Reading a trunk's outbound registration through the REST API, for the tests of callbridge
 * registering with a carrier: GET the trunk, or poll it until its status is the one expected.
 */
import { expect } from 'vitest';
import type { TestDaemon } from './daemon.ts';

export async function getTrunk(d: TestDaemon, id: string): Promise<Record<string, any>> {
  const r = await d.api('GET', `/v1/sip-trunks/${id}`);
  expect(r.status, r.text).toBe(200);
  return r.body;
}

/** Polls GET /v1/sip-trunks/{id} every 100 ms; fails with the trunk (and `diagnostics()`) when the status does not come. */
export async function waitOutboundStatus(d: TestDaemon, id: string, status: string, timeoutMs: number, diagnostics: () => string = () => ''): Promise<Record<string, any>> {
  const until = Date.now() + timeoutMs;
  let t = await getTrunk(d, id);
  while (t.outbound_registration_status !== status && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 100));
    t = await getTrunk(d, id);
  }
  expect(t.outbound_registration_status, `${JSON.stringify(t)}\n${diagnostics()}`).toBe(status);
  return t;
}
