/**
 * Call slots (table `call_slots`, docs/store-postgres.md "Several nodes"): the calls counted against
 * bridge.max_calls_per_trunk and bridge.max_calls_per_org, kept in the database so that the
 * limits hold across every node sharing it. A slot is taken at admission and freed when the call
 * ends; a node frees its own leftovers at start, and a survivor frees a dead node's.
 */
import { createHash } from 'node:crypto';
import { dbNowMs } from './cluster-nodes.ts';
import type { SqlClient } from './sql-client.ts';

/** The limits a new call must fit under (0: no limit of that kind). */
export interface SlotLimits {
  perOrg: number;
  perTrunk: number;
}

export interface SlotRequest {
  id: string;
  nodeId: string;
  orgId: string;
  trunkId: string | null;
}

/** Which limit refused a slot. */
export type SlotRefusal = 'org' | 'trunk';

/**
 * A transaction-level advisory lock key for a scope ('org' or 'trunk') and id: the first 8 bytes
 * of a SHA-256, as a signed 64-bit integer in decimal (what pg_advisory_xact_lock(bigint) takes).
 * A collision only makes two unrelated ids queue behind each other, never count together.
 */
export function slotLockKey(scope: 'org' | 'trunk', id: string): string {
  return createHash('sha256').update(`callbridge:slot:${scope}:${id}`).digest().readBigInt64BE(0).toString();
}

export class CallSlotRepo {
  constructor(private readonly db: SqlClient) {}

  /**
   * Takes a slot when the call fits under both limits, in one transaction. On PostgreSQL two
   * advisory transaction locks serialize the count and the insert: the organization's first,
   * then the trunk's, always in that order (no deadlock between two admissions); other
   * organizations and trunks are not held up. On SQLite the transaction itself is the lock (one
   * writer at a time). Returns the limit that refused it, or undefined when it was taken.
   */
  acquire(req: SlotRequest, limits: SlotLimits): Promise<SlotRefusal | undefined> {
    return this.db.transaction(async (tx) => {
      if (tx.dialect === 'postgres') {
        if (limits.perOrg > 0) await tx.get('SELECT pg_advisory_xact_lock(CAST(? AS BIGINT))', [slotLockKey('org', req.orgId)]);
        if (limits.perTrunk > 0 && req.trunkId !== null) await tx.get('SELECT pg_advisory_xact_lock(CAST(? AS BIGINT))', [slotLockKey('trunk', req.trunkId)]);
      }
      const over = await overLimit(tx, req, limits);
      if (over !== undefined) return over;
      await tx.run(`INSERT INTO call_slots (id, node_id, org_id, trunk_id, acquired_at) VALUES (?, ?, ?, ?, ${dbNowMs(tx)})`, [req.id, req.nodeId, req.orgId, req.trunkId]);
      return undefined;
    });
  }

  /**
   * Whether a call would fit now, without taking a slot (a quick refusal before the authoritative
   * acquire: an INVITE is refused before it rings when the limit is already reached).
   */
  wouldRefuse(req: Omit<SlotRequest, 'id' | 'nodeId'>, limits: SlotLimits): Promise<SlotRefusal | undefined> {
    return overLimit(this.db, req, limits);
  }

  /** Frees a slot (a no-op when it is gone already). */
  async release(id: string): Promise<void> {
    await this.db.run('DELETE FROM call_slots WHERE id = ?', [id]);
  }

  /**
   * Makes a slot taken by any node (a reservation: the carrier's voice webhook reserves one for
   * the call's media stream) this node's. False when there is no such slot (never taken, or freed).
   */
  async adopt(id: string, nodeId: string): Promise<boolean> {
    return (await this.db.run('UPDATE call_slots SET node_id = ? WHERE id = ?', [nodeId, id])).changes === 1;
  }

  /** Frees a slot only while `nodeId` holds it (a reservation no node adopted). */
  async releaseHeldBy(id: string, nodeId: string): Promise<void> {
    await this.db.run('DELETE FROM call_slots WHERE id = ? AND node_id = ?', [id, nodeId]);
  }

  /** Frees every slot of a node (at its start: slots its previous run never freed). Returns how many. */
  async releaseNode(nodeId: string): Promise<number> {
    return (await this.db.run('DELETE FROM call_slots WHERE node_id = ?', [nodeId])).changes;
  }

  /** Frees every slot (SQLite at start: one node owns the file). Returns how many. */
  async releaseAll(): Promise<number> {
    return (await this.db.run('DELETE FROM call_slots')).changes;
  }

  /** How many slots are held, by organization, trunk or node (operators, tests). */
  async count(by: { orgId: string } | { trunkId: string } | { nodeId: string }): Promise<number> {
    const [column, value] = 'orgId' in by ? ['org_id', by.orgId] : 'trunkId' in by ? ['trunk_id', by.trunkId] : ['node_id', by.nodeId];
    return (await this.db.get<{ n: number }>(`SELECT count(*) AS n FROM call_slots WHERE ${column} = ?`, [value]))?.n ?? 0;
  }
}

async function overLimit(db: SqlClient, req: Omit<SlotRequest, 'id' | 'nodeId'>, limits: SlotLimits): Promise<SlotRefusal | undefined> {
  if (limits.perOrg > 0) {
    const n = (await db.get<{ n: number }>('SELECT count(*) AS n FROM call_slots WHERE org_id = ?', [req.orgId]))?.n ?? 0;
    if (n >= limits.perOrg) return 'org';
  }
  if (limits.perTrunk > 0 && req.trunkId !== null) {
    const n = (await db.get<{ n: number }>('SELECT count(*) AS n FROM call_slots WHERE trunk_id = ?', [req.trunkId]))?.n ?? 0;
    if (n >= limits.perTrunk) return 'trunk';
  }
  return undefined;
}
