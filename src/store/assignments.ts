// PLACEHOLDER: replaced by the sip-trunks work (helper). Interface used elsewhere: listByTrunk().
import type { Db } from './db.ts';
export interface Assignment { id: string; agent_id: string; sip_trunk_id: string; number: string; alternate_number: string; created_at: string }
export class AssignmentRepo {
  constructor(private readonly db: Db) {}
  listByTrunk(trunkId: string): Assignment[] {
    return this.db.prepare('SELECT * FROM sip_trunk_assignments WHERE sip_trunk_id = ?').all(trunkId) as Assignment[];
  }
}
