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
import type { Db } from './db.ts';

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
  readonly #live;
  readonly #latest;
  readonly #deleteTrunk;
  readonly #insert;
  readonly #counts;
  readonly #sweep;
  readonly #db: Db;

  constructor(db: Db) {
    this.#db = db;
    this.#live = db.prepare(`SELECT ${COLUMNS} FROM sip_registrations WHERE trunk_id = ? AND expires_at > ? ORDER BY updated_at DESC, contact`);
    this.#latest = db.prepare(`SELECT ${COLUMNS} FROM sip_registrations WHERE trunk_id = ? AND expires_at > ? ORDER BY updated_at DESC, contact LIMIT 1`);
    this.#deleteTrunk = db.prepare('DELETE FROM sip_registrations WHERE trunk_id = ?');
    this.#insert = db.prepare(
      `INSERT INTO sip_registrations (${COLUMNS}) VALUES (@trunk_id, @contact, @expires_at, @call_id, @cseq, @transport, @source_address, @source_port, @connection_id, @updated_at)`,
    );
    this.#counts = db.prepare('SELECT trunk_id, count(*) AS n FROM sip_registrations WHERE expires_at > ? GROUP BY trunk_id');
    this.#sweep = db.prepare('DELETE FROM sip_registrations WHERE expires_at <= ?');
  }

  /** The trunk's unexpired bindings, most recently registered first. */
  live(trunkId: string, now: number): StoredRegistration[] {
    return this.#live.all(trunkId, now) as StoredRegistration[];
  }

  /** The most recently registered unexpired binding of the trunk (where calls to its PBX go). */
  latest(trunkId: string, now: number): StoredRegistration | undefined {
    return this.#latest.get(trunkId, now) as StoredRegistration | undefined;
  }

  /** Replaces the trunk's bindings with `bindings` (all of them, expired ones dropped), atomically. */
  replace(trunkId: string, bindings: readonly StoredRegistration[]): void {
    this.#db.transaction(() => {
      this.#deleteTrunk.run(trunkId);
      for (const b of bindings) this.#insert.run({ ...b, trunk_id: trunkId });
    })();
  }

  /** Unexpired bindings per trunk (the registrations gauge). */
  countsByTrunk(now: number): Map<string, number> {
    return new Map((this.#counts.all(now) as { trunk_id: string; n: number }[]).map((r) => [r.trunk_id, r.n]));
  }

  /** Deletes expired bindings; returns how many went. */
  sweep(now: number): number {
    return this.#sweep.run(now).changes;
  }
}
