/**
 * Node leases and the dead-node sweep (src/store/cluster-nodes.ts), the node of each call row,
 * and endAbandoned at a restart, on real databases. The two-node cases share one PostgreSQL
 * database through two stores (two pools, two node ids), as two daemons would.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../src/store/index.ts';
import type { NewSession } from '../../src/store/sessions.ts';
import { forEachStoreBackend, openOtherNode, openTestStore, type TestStore } from '../helpers/store-backends.ts';

const TIMEOUT_MS = 20_000;

forEachStoreBackend((backend) =>
  describe('node leases', () => {
    let t: TestStore;
    let x: Store;
    let y: Store;
    let z: Store;
    let orgId: string;
    let agentId: string;
    beforeAll(async () => {
      t = await openTestStore(backend, undefined, { nodeId: 'node-x' });
      x = t.store;
      orgId = (await x.organizations.createKey('o')).org.id;
      agentId = randomUUID();
      await x.agents.insert({ id: agentId, org_id: orgId, name: 'Agent', status: 'active', phone_number_id: null, settings: {} as never, created_at: '2026-01-01T00:00:00.000Z' });
      if (backend === 'postgres') {
        y = await openOtherNode(t, 'node-y');
        z = await openOtherNode(t, 'node-z');
      }
    });
    afterAll(async () => {
      await y?.close();
      await z?.close();
      await t?.dispose();
    });

    const newSession = (over: Partial<NewSession> = {}): NewSession => ({
      id: randomUUID(),
      org_id: orgId,
      agent_id: agentId,
      version_id: null,
      caller_id: '+15550001',
      transport: 'websocket',
      chat_id: null,
      first_message: null,
      prompt: null,
      variables: [],
      scopes: ['voice'],
      token_jti: 'jti',
      token_expires_at: '2099-01-01T00:00:00.000Z',
      created_at: '2026-01-01T00:00:00.000Z',
      call_to: '+15550002',
      direction: 'inbound',
      ...over,
    });

    /** A phone call of `node` whose session is open (in_progress), as the bridge leaves it. */
    async function liveCall(node: Store): Promise<string> {
      const s = await node.sessions.create(newSession());
      expect(await node.sessions.claim(s.id, 'jti', '2026-01-01T00:00:01.000Z')).toBe(true);
      expect(await node.calls.markAnswered(s.id, '2026-01-01T00:00:01.000Z')).toBe(true);
      return s.id;
    }

    /** Makes a node's lease `ms` older than the database's clock says. */
    const ageLease = (node: Store, nodeId: string, ms: number) => node.client.run('UPDATE cluster_nodes SET heartbeat_at = heartbeat_at - ? WHERE node_id = ?', [ms, nodeId]);
    const callOf = (node: Store, id: string) => node.calls.get(orgId, id);

    it('a lease: join, heartbeat, list with its age on the database clock, leave', async () => {
      const started = await x.clusterNodes.join('node-x', { httpUrl: 'http://127.0.0.1:1', sipAddress: '127.0.0.1:5060' });
      expect(await x.clusterNodes.heartbeat('node-x', started)).toBe(true);
      const [lease] = (await x.clusterNodes.list()).filter((n) => n.node_id === 'node-x');
      expect(lease).toMatchObject({ node_id: 'node-x', started_at: started, http_url: 'http://127.0.0.1:1', sip_address: '127.0.0.1:5060' });
      expect(lease!.age_ms).toBeGreaterThanOrEqual(0);
      expect(lease!.age_ms).toBeLessThan(TIMEOUT_MS);
      // Milliseconds since the epoch, near this machine's clock (same machine as the database here).
      expect(Math.abs(lease!.heartbeat_at - Date.now())).toBeLessThan(60_000);
      await x.clusterNodes.leave('node-x', started);
      expect((await x.clusterNodes.list()).map((n) => n.node_id)).not.toContain('node-x');
    });

    it('a restart with the same node id gets a new lease: the old run can no longer heartbeat or leave it', async () => {
      // At once, very likely within the same millisecond of the database clock: the new run's
      // started_at (the run's identity) must still differ from the old one's.
      const old = await x.clusterNodes.join('node-x');
      const now = await x.clusterNodes.join('node-x');
      expect(now).not.toBe(old);
      expect(await x.clusterNodes.heartbeat('node-x', old)).toBe(false);
      await x.clusterNodes.leave('node-x', old);
      expect(await x.clusterNodes.heartbeat('node-x', now)).toBe(true);
      await x.clusterNodes.leave('node-x', now);
    });

    it('a stale lease is swept: its calls fail (node_lost), its slots go, its lease goes; a fresh one is left alone', async () => {
      await x.clusterNodes.join('node-stale');
      await ageLease(x, 'node-stale', TIMEOUT_MS + 5000);
      await x.clusterNodes.join('node-x');
      const lost = await x.clusterNodes.sweepDead(TIMEOUT_MS, '2026-01-01T00:05:00.000Z');
      expect(lost).toEqual([{ nodeId: 'node-stale', calls: 0, slots: 0 }]);
      expect((await x.clusterNodes.list()).map((n) => n.node_id)).toEqual(['node-x']);
      expect(await x.clusterNodes.sweepDead(TIMEOUT_MS, '2026-01-01T00:05:00.000Z')).toEqual([]);
    });

    it.skipIf(backend === 'sqlite')("node y's sweep fails exactly dead node x's unended calls, frees x's slots, deletes x's lease", async () => {
      const xStarted = await x.clusterNodes.join('node-x');
      await y.clusterNodes.join('node-y');
      const xLive = await liveCall(x);
      const xRinging = (await x.sessions.create(newSession())).id; // an inbound call still ringing
      const xEnded = await liveCall(x);
      await x.calls.end(xEnded, { ended_at: '2026-01-01T00:01:00.000Z', termination_reason: 'client_closed' });
      // A token minted on x, never opened: any node may still open it, so it is not x's call yet.
      const xToken = (await x.sessions.create(newSession({ direction: 'web' }))).id;
      const yLive = await liveCall(y);
      expect(await x.callSlots.acquire({ id: 'slot-x1', nodeId: 'node-x', orgId, trunkId: null }, { perOrg: 0, perTrunk: 0 })).toBeUndefined();
      expect(await x.callSlots.acquire({ id: 'slot-x2', nodeId: 'node-x', orgId, trunkId: null }, { perOrg: 0, perTrunk: 0 })).toBeUndefined();
      expect(await y.callSlots.acquire({ id: 'slot-y1', nodeId: 'node-y', orgId, trunkId: null }, { perOrg: 0, perTrunk: 0 })).toBeUndefined();

      // Not dead yet: nothing happens.
      expect(await y.clusterNodes.sweepDead(TIMEOUT_MS, '2026-01-01T00:05:00.000Z')).toEqual([]);
      await ageLease(x, 'node-x', TIMEOUT_MS + 1000);
      expect(await y.clusterNodes.sweepDead(TIMEOUT_MS, '2026-01-01T00:05:00.000Z')).toEqual([{ nodeId: 'node-x', calls: 2, slots: 2 }]);

      for (const id of [xLive, xRinging]) {
        expect(await callOf(y, id)).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'node_lost', ended_at: '2026-01-01T00:05:00.000Z' });
      }
      expect(await callOf(y, xEnded)).toMatchObject({ status: 'ended', end_status: 'completed', termination_reason: 'client_closed' });
      expect(await callOf(y, xToken)).toMatchObject({ status: 'started' });
      expect(await callOf(y, yLive)).toMatchObject({ status: 'in_progress' });
      expect((await y.clusterNodes.list()).map((n) => n.node_id)).toEqual(['node-y']);
      expect(await y.callSlots.count({ orgId })).toBe(1);
      // The token minted on x opens on y: the call is y's from then on.
      expect(await y.sessions.claim(xToken, 'jti', '2026-01-01T00:06:00.000Z')).toBe(true);
      expect((await y.client.get<{ node_id: string }>('SELECT node_id FROM calls WHERE id = ?', [xToken]))!.node_id).toBe('node-y');
      // x comes back (it was only stalled): its old lease is gone, so its heartbeat says so.
      expect(await x.clusterNodes.heartbeat('node-x', xStarted)).toBe(false);
      await y.callSlots.releaseNode('node-y');
    });

    it.skipIf(backend === 'sqlite')('two sweepers at once: the dead node is taken over once, its calls failed once', async () => {
      await x.clusterNodes.join('node-x');
      const calls = [await liveCall(x), await liveCall(x), await liveCall(x)];
      await ageLease(x, 'node-x', TIMEOUT_MS + 1000);
      const [fromY, fromZ] = await Promise.all([y.clusterNodes.sweepDead(TIMEOUT_MS, '2026-01-01T00:07:00.000Z'), z.clusterNodes.sweepDead(TIMEOUT_MS, '2026-01-01T00:07:01.000Z')]);
      const takeovers = [...fromY!, ...fromZ!].filter((l) => l.nodeId === 'node-x');
      expect(takeovers).toHaveLength(1);
      expect(takeovers[0]!.calls).toBe(3);
      for (const id of calls) expect(await callOf(y, id)).toMatchObject({ status: 'ended', termination_reason: 'node_lost' });
      // One ended_at for all three: one sweeper's.
      expect(new Set(await Promise.all(calls.map(async (id) => (await callOf(y, id))!.ended_at))).size).toBe(1);
    });

    it.skipIf(backend === 'sqlite')("endAbandoned at a node's restart ends only that node's own calls, not another node's live one", async () => {
      const xOld = await liveCall(x);
      const yLive = await liveCall(y);
      expect(await x.sessions.endAbandoned('2026-01-01T00:08:00.000Z')).toBe(1);
      expect(await callOf(x, xOld)).toMatchObject({ status: 'ended', end_status: 'failed', termination_reason: 'error' });
      expect(await callOf(x, yLive)).toMatchObject({ status: 'in_progress' });
    });

    it.skipIf(backend === 'postgres')('SQLite (one node owns the file): endAbandoned ends every call left in progress, whatever its node', async () => {
      const mine = await liveCall(x);
      // A row of a run that had another node id (the host was renamed).
      const other = await liveCall(x);
      await x.client.run("UPDATE calls SET node_id = 'old-host' WHERE id = ?", [other]);
      expect(await x.sessions.endAbandoned('2026-01-01T00:08:00.000Z')).toBe(2);
      for (const id of [mine, other]) expect(await callOf(x, id)).toMatchObject({ status: 'ended', termination_reason: 'error' });
    });
  }),
);
