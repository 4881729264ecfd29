/**
 * The REGISTER bindings of PBXs on digest trunks (callbridge as their registrar,
 * docs/sip-registrar.md). Times are milliseconds since the epoch, passed in by the caller so one
 * REGISTER reads and writes against one clock reading. Rows past their expiry are never returned
 * and are swept now and then; the SIP layer replaces a trunk's whole set in one statement batch
 * (inside the caller's transaction) after it applied RFC 3261 10.3 to it.
 *
 * The lookups are by trunk id, not by organization: a REGISTER names no organization, and a
 * trunk id belongs to exactly one. What the API shows of bindings goes through the org-scoped
 * trunk reads (SipTrunkRepo), never through here.
 */
import type { SqlClient } from './sql-client.ts';

export type RegistrationTransport = 'udp' | 'tcp' | 'tls';

export interface StoredRegistration {
  trunk_id: string;
  contact: string;
  expires_at: number;
  call_id: string;
  cseq: number;
  transport: RegistrationTransport;
  source_address: string;
  source_port: number;
  connection_id: string | null;
  updated_at: number;
}

const COLUMNS = 'trunk_id, contact, expires_at, call_id, cseq, transport, source_address, source_port, connection_id, updated_at';

export class RegistrationRepo {
  constructor(private readonly db: SqlClient) {}

  /** The trunk's unexpired bindings, most recently registered first. */
  live(trunkId: string, now: number): Promise<StoredRegistration[]> {
    return this.db.all<StoredRegistration>(`SELECT ${COLUMNS} FROM sip_registrations WHERE trunk_id = ? AND expires_at > ? ORDER BY updated_at DESC, contact`, [trunkId, now]);
  }

  /** The most recently registered unexpired binding of the trunk (where calls to its PBX go). */
  latest(trunkId: string, now: number): Promise<StoredRegistration | undefined> {
    return this.db.get<StoredRegistration>(`SELECT ${COLUMNS} FROM sip_registrations WHERE trunk_id = ? AND expires_at > ? ORDER BY updated_at DESC, contact LIMIT 1`, [
      trunkId,
      now,
    ]);
  }

  /** Replaces the trunk's bindings with `bindings` (all of them, expired ones dropped), atomically. */
  replace(trunkId: string, bindings: readonly StoredRegistration[]): Promise<void> {
    return this.db.transaction(async (tx) => {
      await tx.run('DELETE FROM sip_registrations WHERE trunk_id = ?', [trunkId]);
      for (const b of bindings) {
        await tx.run(`INSERT INTO sip_registrations (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, [
          trunkId,
          b.contact,
          b.expires_at,
          b.call_id,
          b.cseq,
          b.transport,
          b.source_address,
          b.source_port,
          b.connection_id,
          b.updated_at,
        ]);
      }
    });
  }

  /** Unexpired bindings per trunk (the registrations gauge). */
  async countsByTrunk(now: number): Promise<Map<string, number>> {
    const rows = await this.db.all<{ trunk_id: string; n: number }>('SELECT trunk_id, count(*) AS n FROM sip_registrations WHERE expires_at > ? GROUP BY trunk_id', [now]);
    return new Map(rows.map((r) => [r.trunk_id, r.n]));
  }

  /** Deletes expired bindings; returns how many went. */
  async sweep(now: number): Promise<number> {
    return (await this.db.run('DELETE FROM sip_registrations WHERE expires_at <= ?', [now])).changes;
  }
}
