/**
 * What the outbound tests share: an agent with a SIP trunk whose outbound host is a SIPp UAS
 * playing the callees (test/interop/scenarios/uas-dialer-callee.xml: the number decides busy, no
 * answer, busy-twice-then-answered or answered), and reads of a run and of the call records.
 */
import { expect } from 'vitest';
import { startSipp, type SippProcess } from '../interop/sipp.ts';
import { untilAsync } from '../helpers/until.ts';
import type { TestDaemon } from '../helpers/daemon.ts';

/** Callee numbers by behaviour (the scenario's prefixes). */
export const busy = (i: number) => `+1555486${String(i).padStart(4, '0')}`;
export const noAnswer = (i: number) => `+1555408${String(i).padStart(4, '0')}`;
export const busyTwiceThenAnswered = (i: number) => `+1555777${String(i).padStart(4, '0')}`;
export const answered = (i: number) => `+1555100${String(i).padStart(4, '0')}`;

/** Daemon settings the outbound tests share: short ring timeout, quick dialer passes. */
export const OUTBOUND_TEST_CONFIG = { sip: { ring_timeout_secs: 1 }, outbound: { tick_ms: 50, slot_retry_secs: 0.2 }, rtp: { address: '127.0.0.1' } };

/** A SIPp UAS for the callees; answered calls last `callMs`. */
export async function startCallees(callMs = 800): Promise<SippProcess> {
  const uas = await startSipp({ scenario: 'uas-dialer-callee', rtpEcho: true, calls: 100_000, durationMs: callMs, timeoutMs: 120_000 });
  await uas.ready;
  return uas;
}

/** An agent assigned on a trunk to the callees; returns their ids. */
export async function agentOnTrunk(d: TestDaemon, calleesPort: number, key?: string): Promise<{ agentId: string; trunkId: string }> {
  const opts = key !== undefined ? { key } : undefined;
  const agent = await d.api('POST', '/v1/agents', { name: 'Dialer agent', first_message: 'Hello from the run.' }, opts);
  expect(agent.status, agent.text).toBe(201);
  const trunk = await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'callees', inbound_auth_type: 'none', outbound_host: `127.0.0.1:${calleesPort}` }, opts);
  expect(trunk.status, trunk.text).toBe(201);
  const a = await d.api('POST', `/v1/sip-trunks/${trunk.body.id}/assignments`, { agent_id: agent.body.id, number: '7000' }, opts);
  expect(a.status, a.text).toBe(201);
  return { agentId: agent.body.id, trunkId: trunk.body.id };
}

export async function createList(d: TestDaemon, agentId: string, trunkId: string, numbers: string[]): Promise<string> {
  const r = await d.api('POST', '/v1/outbound-lists', { name: 'run list', agent_id: agentId, sip_trunk_id: trunkId, caller_id: '+15550001111', contacts: numbers.map((n) => ({ phone_number: n, variables: [{ key: 'customer', value: `c${n.slice(-4)}` }] })) });
  expect(r.status, r.text).toBe(201);
  return r.body.id;
}

export async function startRun(d: TestDaemon, listId: string, settings: Record<string, unknown>): Promise<string> {
  const r = await d.api('POST', `/v1/outbound-lists/${listId}/runs`, settings);
  expect(r.status, r.text).toBe(201);
  return r.body.id;
}

export async function getRun(d: TestDaemon, listId: string, runId: string): Promise<any> {
  const r = await d.api('GET', `/v1/outbound-lists/${listId}/runs/${runId}`);
  expect(r.status, r.text).toBe(200);
  return r.body;
}

export async function untilRunStatus(d: TestDaemon, listId: string, runId: string, status: string, ms = 40_000): Promise<any> {
  let run: any;
  await untilAsync(async () => (run = await getRun(d, listId, runId)).status === status, `run ${status} (last: ${JSON.stringify(run)})`, ms);
  return run;
}

/** Every call record of a run (all pages). */
export async function runCalls(d: TestDaemon, runId: string): Promise<any[]> {
  const calls: any[] = [];
  for (let page = 1; ; page++) {
    const r = await d.api('GET', `/v1/calls?outbound_list_run_id=${runId}&page_size=100&page=${page}`);
    expect(r.status, r.text).toBe(200);
    calls.push(...r.body.calls);
    if (!r.body.pagination.has_next) return calls;
  }
}

/** How many calls each number got (from the call records). */
export function attemptsByNumber(calls: any[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const c of calls) m.set(c.to, (m.get(c.to) ?? 0) + 1);
  return m;
}
