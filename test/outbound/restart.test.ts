/**
 * A daemon killed (SIGKILL) in the middle of an outbound run, then started again on its data
 * directory, completes the run: contacts it had claimed but not placed come back after the lease,
 * calls that were up when it died are settled from their records (an answered call is never
 * repeated), and every contact is called exactly as often as its outcomes require. The daemon is
 * the real `callbridge start` in a child process (test/cluster/callbridge-node.ts); the callees a
 * SIPp UAS (test/outbound/harness.ts).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { startCallbridgeNode, type CallbridgeNode } from '../cluster/callbridge-node.ts';
import { untilAsync } from '../helpers/until.ts';
import { sippAvailable, type SippProcess } from '../interop/sipp.ts';
import { answered, busy, startCallees } from './harness.ts';

describe.skipIf(sippAvailable().skip)('an outbound run across a crash', () => {
  let node: CallbridgeNode | undefined;
  let callees: SippProcess | undefined;
  afterAll(async () => {
    callees?.kill();
    await node?.close();
  });

  it('completes after a SIGKILL and restart, no contact called more often than its outcomes require', async () => {
    callees = await startCallees(1500);
    node = await startCallbridgeNode({
      name: 'dialer',
      env: { CALLBRIDGE_SIP_RING_TIMEOUT_SECS: '1', CALLBRIDGE_OUTBOUND_TICK_MS: '50', CALLBRIDGE_OUTBOUND_LEASE_SECS: '2', CALLBRIDGE_LOG_LEVEL: 'warn' },
    });
    const n = node;
    const agentId = (await n.api('POST', '/v1/agents', { name: 'Crashy dialer', first_message: 'Hello.' })).body.id;
    const trunkId = (await n.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'callees', inbound_auth_type: 'none', outbound_host: `127.0.0.1:${callees.localPort}` })).body.id;
    expect((await n.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, number: '7000' })).status).toBe(201);
    const numbers = [busy(11), ...Array.from({ length: 7 }, (_, i) => answered(300 + i))];
    const list = await n.api('POST', '/v1/outbound-lists', { name: 'crash', agent_id: agentId, sip_trunk_id: trunkId, contacts: numbers.map((phone_number) => ({ phone_number })) });
    expect(list.status, list.text).toBe(201);
    const listId = list.body.id;
    const run = await n.api('POST', `/v1/outbound-lists/${listId}/runs`, { max_concurrent: 3, retry: { max_attempts: 2, backoff_secs: 1, on: ['busy', 'failed'] } });
    expect(run.status, run.text).toBe(201);
    const runId = run.body.id;
    const calls = async () => (await n.api('GET', `/v1/calls?outbound_list_run_id=${runId}&page_size=100`)).body.calls as any[];

    // Killed while calls of the run are up (answered, not ended) and contacts are still pending.
    await untilAsync(async () => (await calls()).some((c) => c.started_at !== undefined && c.ended_at === undefined), 'an answered call of the run', 20_000);
    await n.kill9();
    await n.start();
    let last: any;
    await untilAsync(async () => (last = (await n.api('GET', `/v1/outbound-lists/${listId}/runs/${runId}`)).body).status === 'completed', 'the run to complete after the restart', 40_000).catch((err: Error) => {
      throw new Error(`${err.message}: ${JSON.stringify(last)}\n${n.output().slice(-3000)}`);
    });

    const records = await calls();
    const contacts = (await n.api('GET', `/v1/outbound-lists/${listId}/runs/${runId}/contacts`)).body as any[];
    expect(contacts).toHaveLength(numbers.length);
    for (const c of contacts) {
      const mine = records.filter((r) => r.outbound_contact_id === c.contact_id);
      // Every call placed is one the run counted (a lost claim was not dialled twice) ...
      expect(mine.length, `${c.phone_number}: ${JSON.stringify(c)}`).toBe(c.attempts);
      // ... and none followed an answered one.
      const answeredAt = mine.filter((r) => r.started_at !== undefined).map((r) => Date.parse(r.created_at));
      expect(answeredAt.length, c.phone_number).toBeLessThanOrEqual(1);
      if (answeredAt.length === 1) expect(mine.every((r) => Date.parse(r.created_at) <= answeredAt[0]!)).toBe(true);
    }
    const busyContact = contacts.find((c) => c.phone_number === busy(11));
    expect(busyContact).toMatchObject({ state: 'failed', attempts: 2, last_outcome: 'busy' });
    // A call answered before the crash counts as completed (its record ended at the restart);
    // one cut before it was answered failed, and is retried (failed is in retry.on).
    for (const c of contacts.filter((x) => x.phone_number !== busy(11))) expect(c, c.phone_number).toMatchObject({ state: 'completed', last_outcome: 'completed' });
    expect(records.filter((r) => r.outbound_contact_id !== busyContact.contact_id).length, 'calls to the answering callees').toBeLessThanOrEqual(7 + 3);
    expect(last.counts).toMatchObject({ pending: 0, dialing: 0, calling: 0 });
  });
});
