/**
 * Agent assignments on SIP trunks. `number` routes digest-authenticated calls (unique within the
 * trunk), `alternate_number` routes ACL-authenticated calls (unique within the organization: two
 * organizations may both claim a number, and inbound routing decides, or refuses, a call for it;
 * docs/sip-trunks.md "Overlapping ACLs"). Each row carries its trunk's org_id for that UNIQUE.
 *
 * An absent number is NULL in the table, so the UNIQUE constraints ignore it, and "" in the API,
 * like an agent's unassigned phone_number_id.
 */
import type { SqlClient } from './sql-client.ts';

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

/** An assignment claiming a number, as routing sees it: which trunk, which organization. */
export interface NumberClaim {
  assignment_id: string;
  sip_trunk_id: string;
  org_id: string;
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
  constructor(private readonly db: SqlClient) {}

  /** Every assignment of a trunk. Not org-scoped: callers have already found the trunk in the org. */
  async listByTrunk(trunkId: string): Promise<Assignment[]> {
    return (await this.db.all<AssignmentRow>(`SELECT ${COLUMNS} FROM sip_trunk_assignments a WHERE a.sip_trunk_id = ? ORDER BY a.created_at, a.id`, [trunkId])).map(fromRow);
  }

  async get(orgId: string, id: string): Promise<Assignment | undefined> {
    // Scoped through the trunk: an assignment belongs to its trunk's organization.
    const row = await this.db.get<AssignmentRow>(`SELECT ${COLUMNS} FROM sip_trunk_assignments a JOIN sip_trunks t ON t.id = a.sip_trunk_id WHERE a.id = ? AND t.org_id = ?`, [id, orgId]);
    return row && fromRow(row);
  }

  /** The assignment routing `number` on a trunk (digest inbound route). */
  async byTrunkNumber(trunkId: string, number: string): Promise<Assignment | undefined> {
    const row = await this.db.get<AssignmentRow>(`SELECT ${COLUMNS} FROM sip_trunk_assignments a WHERE a.sip_trunk_id = ? AND a.number = ?`, [trunkId, number]);
    return row && fromRow(row);
  }

  /** The organization's assignment routing an alternate_number (ACL inbound route). */
  async byOrgAlternateNumber(orgId: string, alternateNumber: string): Promise<Assignment | undefined> {
    const row = await this.db.get<AssignmentRow>(`SELECT ${COLUMNS} FROM sip_trunk_assignments a WHERE a.org_id = ? AND a.alternate_number = ?`, [orgId, alternateNumber]);
    return row && fromRow(row);
  }

  /** The trunk's assignment routing an alternate_number (a call on a registered trunk). */
  async byTrunkAlternateNumber(trunkId: string, alternateNumber: string): Promise<Assignment | undefined> {
    const row = await this.db.get<AssignmentRow>(`SELECT ${COLUMNS} FROM sip_trunk_assignments a WHERE a.sip_trunk_id = ? AND a.alternate_number = ?`, [trunkId, alternateNumber]);
    return row && fromRow(row);
  }

  /**
   * Every assignment of any organization whose alternate_number is this one, with its trunk's
   * organization: inbound routing and the assignment warnings look for rival claims. Never
   * returned through the API.
   */
  async alternateClaims(alternateNumber: string): Promise<NumberClaim[]> {
    return this.db.all<NumberClaim>('SELECT a.id AS assignment_id, a.sip_trunk_id, a.org_id FROM sip_trunk_assignments a WHERE a.alternate_number = ? ORDER BY a.created_at, a.id', [alternateNumber]);
  }

  /** Every digest trunk's assignment whose `number` is this one, with its organization (as alternateClaims). */
  async digestClaims(number: string): Promise<NumberClaim[]> {
    return this.db.all<NumberClaim>(
      "SELECT a.id AS assignment_id, a.sip_trunk_id, a.org_id FROM sip_trunk_assignments a JOIN sip_trunks t ON t.id = a.sip_trunk_id WHERE a.number = ? AND t.inbound_auth_type = 'digest' ORDER BY a.created_at, a.id",
      [number],
    );
  }

  /**
   * org_id is the trunk's, read in the same statement.
   * @throws the database's UNIQUE error on a taken number or alternate_number (isUniqueViolation).
   */
  async insert(a: { id: string; sip_trunk_id: string; agent_id: string; number: string | null; alternate_number: string | null; created_at: string }): Promise<void> {
    await this.db.run(
      'INSERT INTO sip_trunk_assignments (id, org_id, sip_trunk_id, agent_id, number, alternate_number, created_at) SELECT ?, t.org_id, t.id, ?, ?, ?, ? FROM sip_trunks t WHERE t.id = ?',
      [a.id, a.agent_id, a.number, a.alternate_number, a.created_at, a.sip_trunk_id],
    );
  }

  /** Sets both numbers (null = none). @throws the database's UNIQUE error like insert. */
  async update(id: string, numbers: { number: string | null; alternate_number: string | null }): Promise<void> {
    await this.db.run('UPDATE sip_trunk_assignments SET number = ?, alternate_number = ? WHERE id = ?', [numbers.number, numbers.alternate_number, id]);
  }

  async delete(orgId: string, id: string): Promise<boolean> {
    return (await this.db.run('DELETE FROM sip_trunk_assignments WHERE id = ? AND sip_trunk_id IN (SELECT id FROM sip_trunks WHERE org_id = ?)', [id, orgId])).changes > 0;
  }
}
