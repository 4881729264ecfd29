/**
 * Node leases (table `cluster_nodes`, docs/store-postgres.md "Several nodes"): each node running on the store has a row
 * it refreshes every cluster.heartbeat_secs; a node whose row has not been refreshed for
 * cluster.node_timeout_secs is dead, and the first survivor to see it ends its calls (node_lost)
 * and frees its call slots. Times are milliseconds since the epoch on the DATABASE's clock, so
 * the nodes' own clocks may disagree without a node being declared dead early or late.
 */
import { NODE_LOST } from '../domain/call.ts';
import type { SqlClient } from './sql-client.ts';
import { dbNowMs } from './db-clock.ts';
import { callEndedEvents } from './calls.ts';

/** A lease as operators see it. */
export interface ClusterNode {
  node_id: string;
  started_at: number;
  heartbeat_at: number;
  http_url: string;
  sip_address: string;
}

/** What a node says about itself in its lease. */
export interface NodeAddresses {
  httpUrl?: string;
  sipAddress?: string;
}

/** One dead node a sweep took over. */
export interface LostNode {
  nodeId: string;
  /** Its calls the sweep ended (node_lost). */
  calls: number;
  /** Its call slots the sweep freed. */
  slots: number;
}

export { dbNowMs } from './db-clock.ts';

export class ClusterNodeRepo {
  constructor(private readonly db: SqlClient) {}

  /**
   * Writes this node's lease at start (a lease left by its previous run is replaced) and returns
   * its started_at, which tells this run's lease from any other of the same node id.
   */
  async join(nodeId: string, addresses: NodeAddresses = {}): Promise<number> {
    const now = dbNowMs(this.db);
    const r = await this.db.get<{ started_at: number }>(
      `INSERT INTO cluster_nodes (node_id, started_at, heartbeat_at, http_url, sip_address) VALUES (?, ${now}, ${now}, ?, ?)
       ON CONFLICT (node_id) DO UPDATE SET started_at = CASE WHEN EXCLUDED.started_at > cluster_nodes.started_at THEN EXCLUDED.started_at ELSE cluster_nodes.started_at + 1 END, heartbeat_at = EXCLUDED.heartbeat_at, http_url = EXCLUDED.http_url, sip_address = EXCLUDED.sip_address
       RETURNING started_at`,
      [nodeId, addresses.httpUrl ?? '', addresses.sipAddress ?? ''],
    );
    return Number(r?.started_at);
  }

  /** Refreshes this run's lease; false when it is gone (a survivor took it over: this node was declared dead). */
  async heartbeat(nodeId: string, startedAt: number): Promise<boolean> {
    const r = await this.db.run(`UPDATE cluster_nodes SET heartbeat_at = ${dbNowMs(this.db)} WHERE node_id = ? AND started_at = ?`, [nodeId, startedAt]);
    return r.changes === 1;
  }

  /** A clean stop: this run's lease goes (a newer run's of the same id is left alone). */
  async leave(nodeId: string, startedAt: number): Promise<void> {
    await this.db.run('DELETE FROM cluster_nodes WHERE node_id = ? AND started_at = ?', [nodeId, startedAt]);
  }

  /** Every lease, oldest node first, with how long ago (database clock) each last heartbeat was. */
  list(): Promise<Array<ClusterNode & { age_ms: number }>> {
    return this.db.all(`SELECT node_id, started_at, heartbeat_at, http_url, sip_address, ${dbNowMs(this.db)} - heartbeat_at AS age_ms FROM cluster_nodes ORDER BY started_at, node_id`);
  }

  /**
   * Takes over every node whose heartbeat is older than timeoutMs: per dead node, in ONE
   * transaction, deletes its lease, ends its calls that have not ended (failed, node_lost) and
   * frees its call slots. The lease's DELETE decides who does it: of several sweepers at once,
   * one deletes the row (the others wait on its lock, then find it gone and do nothing), so the
   * calls are ended once. A web session whose token was issued on the dead node but never opened
   * is left alone: any node may still open it (it expires as usual otherwise).
   */
  async sweepDead(timeoutMs: number, endedAt: string): Promise<LostNode[]> {
    const now = dbNowMs(this.db);
    const dead = await this.db.all<{ node_id: string; started_at: number }>(`SELECT node_id, started_at FROM cluster_nodes WHERE heartbeat_at < ${now} - ?`, [timeoutMs]);
    const lost: LostNode[] = [];
    for (const d of dead) {
      const took = await this.db.transaction(async (tx) => {
        // Re-checked under the row's lock: it may have heartbeated, restarted or been swept meanwhile.
        const del = await tx.run(`DELETE FROM cluster_nodes WHERE node_id = ? AND started_at = ? AND heartbeat_at < ${dbNowMs(tx)} - ?`, [d.node_id, d.started_at, timeoutMs]);
        if (del.changes === 0) return undefined;
        const ended = await tx.all<{ id: string; org_id: string }>(
          `UPDATE calls SET status = 'ended', end_status = 'failed', ended_at = ?, termination_reason = ?
           WHERE node_id = ? AND ended_at IS NULL AND status IN ('started', 'in_progress') AND NOT (direction = 'web' AND status = 'started')
           RETURNING id, org_id`,
          [endedAt, NODE_LOST, d.node_id],
        );
        await callEndedEvents(tx, ended);
        const slots = await tx.run('DELETE FROM call_slots WHERE node_id = ?', [d.node_id]);
        return { nodeId: d.node_id, calls: ended.length, slots: slots.changes };
      });
      if (took !== undefined) lost.push(took);
    }
    return lost;
  }
}
