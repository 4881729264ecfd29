// PLACEHOLDER: replaced by the sip-trunks work (helper). Interface used elsewhere: get().
import type { Db } from './db.ts';
import type { SecretBox } from './secret-box.ts';
export class SipTrunkRepo {
  constructor(private readonly db: Db, private readonly box: SecretBox) {}
  get(orgId: string, id: string): { id: string } | undefined {
    void this.box;
    return this.db.prepare('SELECT id FROM sip_trunks WHERE id = ? AND org_id = ?').get(id, orgId) as { id: string } | undefined;
  }
}
