/**
 * The heartbeat loop (src/store/node-heartbeat.ts) on a real PostgreSQL database shared by two
 * nodes: node X writes its lease and then stops beating without leaving (its process died);
 * node Y, beating every 200 ms with a 600 ms timeout, ends X's call (failed, node_lost) within
 * timeout + heartbeat (+ margin) of X's last heartbeat and logs one line naming X. A clean stop
 * deletes the lease; a start frees the slots the node's previous run left.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import type { CallRecord } from '../../src/store/calls.ts';
import { NodeHeartbeat } from '../../src/store/node-heartbeat.ts';
import { postgresAvailability } from '../helpers/postgres.ts';
import { openOtherNode, openTestStore, stopTestPostgres, type TestStore } from '../helpers/store-backends.ts';

const HEARTBEAT_MS = 200;
const TIMEOUT_MS = 600;
const pg = postgresAvailability();

function recordingLog() {
  const lines: Array<{ obj: Record<string, unknown>; msg: string }> = [];
  const push = (obj: object, msg: string) => void lines.push({ obj: obj as Record<string, unknown>, msg });
  return { lines, log: { info: push, warn: push, debug: () => undefined } };
}

describe.skipIf(pg.skip)(`the heartbeat loop on PostgreSQL${pg.skip ? `: skipped, ${pg.reason}` : ''}`, () => {
  let t: TestStore;
  let x: Store;
  let y: Store;
  beforeAll(async () => {
    t = await openTestStore('postgres', undefined, { nodeId: 'node-x' });
    x = t.store;
    y = await openOtherNode(t, 'node-y');
  });
  afterAll(async () => {
    await y?.close();
    await t?.dispose();
    await stopTestPostgres();
  });

  it("a node that stops beating: a survivor ends its call node_lost within timeout + heartbeat (+ margin), once, and says so", async () => {
    const orgId = (await x.organizations.createKey('o')).org.id;
    const agentId = randomUUID();
    await x.agents.insert({ id: agentId, org_id: orgId, name: 'A', status: 'active', phone_number_id: null, settings: {} as never, created_at: '2026-01-01T00:00:00.000Z' });
    // X's process: its own pool, closed below as if the process were killed.
    const xProcess = await openOtherNode(t, 'node-x');
    const hx = new NodeHeartbeat(xProcess, { nodeId: 'node-x', heartbeatMs: HEARTBEAT_MS, nodeTimeoutMs: TIMEOUT_MS, log: recordingLog().log });
    await hx.start();
    const s = await x.sessions.create({
      id: randomUUID(), org_id: orgId, agent_id: agentId, version_id: null, caller_id: '+1555', transport: 'websocket', chat_id: null, first_message: null, prompt: null,
      variables: [], scopes: ['voice'], token_jti: 'j', token_expires_at: '2099-01-01T00:00:00.000Z', created_at: '2026-01-01T00:00:00.000Z', call_to: '+1556', direction: 'inbound',
    });
    await x.sessions.claim(s.id, 'j', '2026-01-01T00:00:01.000Z');
    await x.calls.markAnswered(s.id, '2026-01-01T00:00:01.000Z');
    await x.callSlots.acquire({ id: 'x-slot', nodeId: 'node-x', orgId, trunkId: null }, { perOrg: 0, perTrunk: 0 });

    const ylog = recordingLog();
    const hy = new NodeHeartbeat(y, { nodeId: 'node-y', heartbeatMs: HEARTBEAT_MS, nodeTimeoutMs: TIMEOUT_MS, log: ylog.log });
    await hy.start();
    // X dies: its connections go, so no more beats reach the database and it never leaves (what
    // kill -9 leaves behind); its timer's beats fail from now on.
    await xProcess.close();
    const died = Date.now();
    let ended: CallRecord | undefined;
    while (Date.now() - died < TIMEOUT_MS + HEARTBEAT_MS + 3000) {
      ended = await y.calls.get(orgId, s.id);
      if (ended?.termination_reason === 'node_lost') break;
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(ended).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'node_lost' });
    const took = ylog.lines.filter((l) => l.obj.lostNode === 'node-x');
    expect(took).toHaveLength(1);
    expect(took[0]!.msg).toMatch(/node node-x stopped heartbeating: ended its 1 call\(s\) as node_lost and freed 1 call slot\(s\)/);
    expect(await y.callSlots.count({ orgId })).toBe(0);
    expect((await y.clusterNodes.list()).map((n) => n.node_id)).toEqual(['node-y']);

    await hx.stop().catch(() => undefined); // its timer; the lease is gone already
    // A clean stop deletes Y's lease.
    await hy.stop();
    expect(await y.clusterNodes.list()).toEqual([]);
  });

  it("a start frees the call slots the node's previous run left, and only that node's", async () => {
    await x.callSlots.acquire({ id: 'left-x', nodeId: 'node-x', orgId: 'o', trunkId: null }, { perOrg: 0, perTrunk: 0 });
    await y.callSlots.acquire({ id: 'live-y', nodeId: 'node-y', orgId: 'o', trunkId: null }, { perOrg: 0, perTrunk: 0 });
    const log = recordingLog();
    const hx = new NodeHeartbeat(x, { nodeId: 'node-x', heartbeatMs: HEARTBEAT_MS, nodeTimeoutMs: TIMEOUT_MS, log: log.log });
    await hx.start();
    await hx.stop();
    expect(await x.callSlots.count({ orgId: 'o' })).toBe(1);
    expect(log.lines.some((l) => l.obj.slots === 1 && /freed call slots a previous run/.test(l.msg))).toBe(true);
    // No fresh lease of this id was there: no warning about a second node with the same id.
    expect(log.lines.some((l) => /a lease of this node id was refreshed recently/.test(l.msg))).toBe(false);
    // Two processes with one node id: the second start says so.
    const first = new NodeHeartbeat(x, { nodeId: 'node-twin', heartbeatMs: HEARTBEAT_MS, nodeTimeoutMs: TIMEOUT_MS, log: recordingLog().log });
    await first.start();
    const twinLog = recordingLog();
    const twin = new NodeHeartbeat(y, { nodeId: 'node-twin', heartbeatMs: HEARTBEAT_MS, nodeTimeoutMs: TIMEOUT_MS, log: twinLog.log });
    await twin.start();
    expect(twinLog.lines.some((l) => /a lease of this node id was refreshed recently/.test(l.msg))).toBe(true);
    await twin.stop();
    await first.stop();
  });
});
