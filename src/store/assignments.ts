/**
 * Agent assignments on SIP trunks. `number` routes digest-authenticated calls (unique within the
 * trunk), `alternate_number` routes ACL-authenticated calls (unique across all trunks of all
 * organizations, since the source address alone may not single out a trunk).
 *
 * An absent number is NULL in the table, so the UNIQUE constraints ignore it, and "" in the API,
 * like an agent's unassigned phone_number_id.
 */
import type { Db } from './db.ts';

export interface Assignment {
  id: string;
  agent_id: string;
  sip_trunk_id: string;
  number: string;
  alternate_number: string;
  created_at: string;
}

interface AssignmentRow {
  id: string;
  agent_id: string;
  sip_trunk_id: string;
  number: string | null;
  alternate_number: string | null;
  created_at: string;
}

const COLUMNS = 'a.id, a.agent_id, a.sip_trunk_id, a.number, a.alternate_number, a.created_at';

const fromRow = (r: AssignmentRow): Assignment => ({
  id: r.id,
  agent_id: r.agent_id,
  sip_trunk_id: r.sip_trunk_id,
  number: r.number ?? '',
  alternate_number: r.alternate_number ?? '',
  created_at: r.created_at,
});

export class AssignmentRepo {
  readonly #listByTrunk;
  readonly #get;
  readonly #insert;
  readonly #update;
  readonly #delete;
  readonly #byTrunkNumber;
  readonly #byAlternateNumber;
  readonly #digestNumberExists;

  constructor(db: Db) {
    this.#listByTrunk = db.prepare(`SELECT ${COLUMNS} FROM sip_trunk_assignments a WHERE a.sip_trunk_id = ? ORDER BY a.created_at, a.id`);
    // Scoped through the trunk: an assignment belongs to its trunk's organization.
    this.#get = db.prepare(`SELECT ${COLUMNS} FROM sip_trunk_assignments a JOIN sip_trunks t ON t.id = a.sip_trunk_id WHERE a.id = ? AND t.org_id = ?`);
    this.#insert = db.prepare(
      'INSERT INTO sip_trunk_assignments (id, sip_trunk_id, agent_id, number, alternate_number, created_at) ' +
        'VALUES (@id, @sip_trunk_id, @agent_id, @number, @alternate_number, @created_at)',
    );
    this.#update = db.prepare('UPDATE sip_trunk_assignments SET number = @number, alternate_number = @alternate_number WHERE id = @id');
    this.#delete = db.prepare('DELETE FROM sip_trunk_assignments WHERE id = ? AND sip_trunk_id IN (SELECT id FROM sip_trunks WHERE org_id = ?)');
    this.#byTrunkNumber = db.prepare(`SELECT ${COLUMNS} FROM sip_trunk_assignments a WHERE a.sip_trunk_id = ? AND a.number = ?`);
    this.#byAlternateNumber = db.prepare(`SELECT ${COLUMNS} FROM sip_trunk_assignments a WHERE a.alternate_number = ?`);
    this.#digestNumberExists = db.prepare(
      "SELECT 1 FROM sip_trunk_assignments a JOIN sip_trunks t ON t.id = a.sip_trunk_id WHERE a.number = ? AND t.inbound_auth_type = 'digest' LIMIT 1",
    );
  }

  /** Every assignment of a trunk. Not org-scoped: callers have already found the trunk in the org. */
  listByTrunk(trunkId: string): Assignment[] {
    return (this.#listByTrunk.all(trunkId) as AssignmentRow[]).map(fromRow);
  }

  get(orgId: string, id: string): Assignment | undefined {
    const row = this.#get.get(id, orgId) as AssignmentRow | undefined;
    return row && fromRow(row);
  }

  /** The assignment routing `number` on a trunk (digest inbound route). */
  byTrunkNumber(trunkId: string, number: string): Assignment | undefined {
    const row = this.#byTrunkNumber.get(trunkId, number) as AssignmentRow | undefined;
    return row && fromRow(row);
  }

  /** The assignment routing an alternate_number, in any organization (ACL inbound route). */
  byAlternateNumber(alternateNumber: string): Assignment | undefined {
    const row = this.#byAlternateNumber.get(alternateNumber) as AssignmentRow | undefined;
    return row && fromRow(row);
  }

  /** Whether some digest trunk routes `number`: SIP then challenges instead of answering 404. */
  digestNumberExists(number: string): boolean {
    return this.#digestNumberExists.get(number) !== undefined;
  }

  /** @throws the SQLite UNIQUE error on a taken number or alternate_number (isUniqueViolation). */
  insert(a: { id: string; sip_trunk_id: string; agent_id: string; number: string | null; alternate_number: string | null; created_at: string }): void {
    this.#insert.run(a);
  }

  /** Sets both numbers (null = none). @throws the SQLite UNIQUE error like insert. */
  update(id: string, numbers: { number: string | null; alternate_number: string | null }): void {
    this.#update.run({ id, ...numbers });
  }

  delete(orgId: string, id: string): boolean {
    return this.#delete.run(id, orgId).changes > 0;
  }
}
