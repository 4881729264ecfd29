// PLACEHOLDER: replaced by the telco-numbers work (helper). Interface used elsewhere: get().
import type { Db } from './db.ts';
import type { SecretBox } from './secret-box.ts';
export interface TelcoNumber { id: string; phone_number: string; phone_sid: string; label: string; account_sid: string; created_at: string; updated_at: string }
export class TelcoNumberRepo {
  constructor(private readonly db: Db, private readonly box: SecretBox) {}
  get(orgId: string, id: string): TelcoNumber | undefined {
    void this.box;
    return this.db.prepare('SELECT id, phone_number, phone_sid, label, account_sid, created_at, updated_at FROM telco_numbers WHERE id = ? AND org_id = ?').get(id, orgId) as TelcoNumber | undefined;
  }
}
