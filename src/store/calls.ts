/**
 * Call records. The call bridge (issue 6) writes them; the API reads them. Queries are scoped by
 * organization.
 */
import type { Db } from './db.ts';

export type CallDirection = 'inbound' | 'outbound' | 'web';

export interface CallRecord {
  id: string;
  agent_id: string | null;
  sip_trunk_id: string | null;
  direction: CallDirection;
  status: string;
  from: string;
  to: string;
  started_at: string;
  answered_at: string | null;
  ended_at: string | null;
  end_reason: string | null;
  transcript: unknown[];
  summary: string | null;
  has_recording: boolean;
}

export interface CallFilter {
  agentIds?: string[];
  status?: string;
  direction?: CallDirection;
  from?: string;
  to?: string;
  limit: number;
  offset: number;
}

interface CallRow {
  id: string;
  agent_id: string | null;
  sip_trunk_id: string | null;
  direction: CallDirection;
  status: string;
  from_number: string;
  to_number: string;
  started_at: string;
  answered_at: string | null;
  ended_at: string | null;
  end_reason: string | null;
  transcript: string;
  summary: string | null;
  recording_path: string | null;
}

const fromRow = (r: CallRow): CallRecord => ({
  id: r.id,
  agent_id: r.agent_id,
  sip_trunk_id: r.sip_trunk_id,
  direction: r.direction,
  status: r.status,
  from: r.from_number,
  to: r.to_number,
  started_at: r.started_at,
  answered_at: r.answered_at,
  ended_at: r.ended_at,
  end_reason: r.end_reason,
  transcript: JSON.parse(r.transcript) as unknown[],
  summary: r.summary,
  has_recording: r.recording_path !== null,
});

export class CallRepo {
  readonly #get;
  readonly #insert;

  constructor(private readonly db: Db) {
    this.#get = db.prepare('SELECT * FROM calls WHERE id = ? AND org_id = ?');
    this.#insert = db.prepare(
      `INSERT INTO calls (id, org_id, agent_id, sip_trunk_id, direction, status, from_number, to_number, started_at, created_at)
       VALUES (@id, @org_id, @agent_id, @sip_trunk_id, @direction, @status, @from, @to, @started_at, @started_at)`,
    );
  }

  get(orgId: string, id: string): CallRecord | undefined {
    const r = this.#get.get(id, orgId) as CallRow | undefined;
    return r && fromRow(r);
  }

  insert(c: { id: string; org_id: string; agent_id: string | null; sip_trunk_id: string | null; direction: CallDirection; status: string; from: string; to: string; started_at: string }): void {
    this.#insert.run(c);
  }

  /** Newest first, filtered. Built from fixed SQL fragments; values are always bound. */
  list(orgId: string, f: CallFilter): CallRecord[] {
    const where = ['org_id = ?'];
    const args: unknown[] = [orgId];
    if (f.agentIds?.length) {
      where.push(`agent_id IN (${f.agentIds.map(() => '?').join(', ')})`);
      args.push(...f.agentIds);
    }
    const add = (clause: string, value: string | undefined) => {
      if (value === undefined) return;
      where.push(clause);
      args.push(value);
    };
    add('status = ?', f.status);
    add('direction = ?', f.direction);
    add('started_at >= ?', f.from);
    add('started_at < ?', f.to);
    const sql = `SELECT * FROM calls WHERE ${where.join(' AND ')} ORDER BY started_at DESC, id LIMIT ? OFFSET ?`;
    return (this.db.prepare(sql).all(...args, f.limit, f.offset) as CallRow[]).map(fromRow);
  }
}
