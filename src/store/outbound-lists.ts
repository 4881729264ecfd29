/**
 * Outbound lists and their contacts (tables outbound_lists, outbound_contacts, migration 19;
 * docs/outbound.md). Every read and write is scoped by organization: another organization's list
 * is "not found". A phone number is in a list once (UNIQUE (list_id, phone_number)): a duplicate
 * is reported back, never added twice.
 */
import type { SqlClient } from './sql-client.ts';
import type { ContactVariables } from '../domain/outbound.ts';

export interface OutboundList {
  id: string;
  org_id: string;
  name: string;
  agent_id: string;
  sip_trunk_id: string | null;
  from_number: string | null;
  caller_id: string | null;
  created_at: string;
}

export interface OutboundContact {
  id: string;
  list_id: string;
  phone_number: string;
  variables: ContactVariables;
  /** The contact's IANA time zone; null: the run window's (migration 23). */
  timezone: string | null;
  created_at: string;
}

interface ContactRow {
  id: string;
  list_id: string;
  phone_number: string;
  variables: string;
  timezone: string | null;
  created_at: string;
}

const LIST_COLUMNS = 'id, org_id, name, agent_id, sip_trunk_id, from_number, caller_id, created_at';
const contactOf = (r: ContactRow): OutboundContact => ({ ...r, variables: JSON.parse(r.variables) as ContactVariables });

/** Rows per INSERT statement when contacts are added in bulk (well under both dialects' bound-parameter limits). */
const INSERT_BATCH = 200;

export class OutboundListRepo {
  constructor(private readonly db: SqlClient) {}

  async insert(l: OutboundList): Promise<void> {
    await this.db.run(`INSERT INTO outbound_lists (${LIST_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, [
      l.id,
      l.org_id,
      l.name,
      l.agent_id,
      l.sip_trunk_id,
      l.from_number,
      l.caller_id,
      l.created_at,
    ]);
  }

  async get(orgId: string, id: string): Promise<OutboundList | undefined> {
    return this.db.get<OutboundList>(`SELECT ${LIST_COLUMNS} FROM outbound_lists WHERE id = ? AND org_id = ?`, [id, orgId]);
  }

  async list(orgId: string, limit: number, offset: number): Promise<Array<OutboundList & { contact_count: number }>> {
    const rows = await this.db.all<OutboundList & { contact_count: number | string }>(
      `SELECT ${LIST_COLUMNS.split(', ').map((c) => `l.${c}`).join(', ')}, (SELECT count(*) FROM outbound_contacts c WHERE c.list_id = l.id) AS contact_count
       FROM outbound_lists l WHERE l.org_id = ? ORDER BY l.created_at DESC, l.id DESC LIMIT ? OFFSET ?`,
      [orgId, limit, offset],
    );
    return rows.map((r) => ({ ...r, contact_count: Number(r.contact_count) }));
  }

  async contactCount(listId: string): Promise<number> {
    return Number((await this.db.get<{ n: number | string }>('SELECT count(*) AS n FROM outbound_contacts WHERE list_id = ?', [listId]))?.n ?? 0);
  }

  /**
   * Adds contacts in one transaction, in the order given, skipping the numbers the list has
   * already (or that repeat within `contacts`). Returns the added contacts and the numbers
   * skipped. The caller has checked the list belongs to the organization.
   */
  async addContacts(listId: string, contacts: Array<{ id: string; phone_number: string; variables: ContactVariables; timezone?: string | null }>, createdAt: string): Promise<{ added: OutboundContact[]; duplicates: string[] }> {
    return this.db.transaction(async (tx) => {
      const added: OutboundContact[] = [];
      const duplicates: string[] = [];
      let seq = Number((await tx.get<{ n: number | string | null }>('SELECT max(seq) AS n FROM outbound_contacts WHERE list_id = ?', [listId]))?.n ?? 0);
      for (let i = 0; i < contacts.length; i += INSERT_BATCH) {
        const batch = contacts.slice(i, i + INSERT_BATCH);
        const rows = batch.map((c) => [c.id, listId, ++seq, c.phone_number, JSON.stringify(c.variables), c.timezone ?? null, createdAt] as const);
        const inserted = await tx.all<{ id: string }>(
          `INSERT INTO outbound_contacts (id, list_id, seq, phone_number, variables, timezone, created_at) VALUES ${rows.map(() => '(?, ?, ?, ?, ?, ?, ?)').join(', ')}
           ON CONFLICT (list_id, phone_number) DO NOTHING RETURNING id`,
          rows.flat(),
        );
        const ids = new Set(inserted.map((r) => r.id));
        for (const c of batch) {
          if (ids.has(c.id)) added.push({ id: c.id, list_id: listId, phone_number: c.phone_number, variables: c.variables, timezone: c.timezone ?? null, created_at: createdAt });
          else duplicates.push(c.phone_number);
        }
      }
      return { added, duplicates };
    });
  }

  /** A page of the list's contacts, in the order they were added. */
  async contacts(listId: string, limit: number, offset: number): Promise<OutboundContact[]> {
    const rows = await this.db.all<ContactRow>('SELECT id, list_id, phone_number, variables, timezone, created_at FROM outbound_contacts WHERE list_id = ? ORDER BY seq, id LIMIT ? OFFSET ?', [listId, limit, offset]);
    return rows.map(contactOf);
  }

  /**
   * Removes a contact from the list; in the list's runs that have not called it yet it is
   * canceled (a call already placed goes on). False when the list has no such contact.
   */
  async deleteContact(listId: string, contactId: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      const r = await tx.run('DELETE FROM outbound_contacts WHERE id = ? AND list_id = ?', [contactId, listId]);
      if (r.changes === 0) return false;
      await tx.run(
        "UPDATE outbound_run_contacts SET state = 'canceled', lease_owner = NULL, lease_until = NULL WHERE contact_id = ? AND state = 'pending' AND run_id IN (SELECT id FROM outbound_runs WHERE list_id = ?)",
        [contactId, listId],
      );
      return true;
    });
  }
}
