/**
 * Call records. Voice sessions (src/session/) and the call bridge write them; the API reads them.
 * API queries are scoped by organization; the writers address a record by its id, which only they
 * hold.
 *
 * Status: pending (a session token was issued) -> in_progress (answered / socket open) ->
 * completed | failed (ended with reason error); expired when a token was never used.
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

/** How a call ended; `status` defaults to failed for reason error and completed otherwise. */
export interface CallEnd {
  ended_at: string;
  end_reason: string;
  transcript: unknown[];
  status?: string;
}

export class CallRepo {
  readonly #get;
  readonly #insert;
  readonly #markAnswered;
  readonly #end;
  readonly #setSummary;

  constructor(private readonly db: Db) {
    this.#get = db.prepare('SELECT * FROM calls WHERE id = ? AND org_id = ?');
    this.#insert = db.prepare(
      `INSERT INTO calls (id, org_id, agent_id, sip_trunk_id, direction, status, from_number, to_number, started_at, created_at)
       VALUES (@id, @org_id, @agent_id, @sip_trunk_id, @direction, @status, @from, @to, @started_at, @started_at)`,
    );
    this.#markAnswered = db.prepare("UPDATE calls SET status = 'in_progress', answered_at = ? WHERE id = ? AND ended_at IS NULL AND answered_at IS NULL");
    // Only the first end counts: a second one (a race of client close and runtime end) is a no-op.
    this.#end = db.prepare('UPDATE calls SET status = @status, ended_at = @ended_at, end_reason = @end_reason, transcript = @transcript WHERE id = @id AND ended_at IS NULL');
    this.#setSummary = db.prepare('UPDATE calls SET summary = ? WHERE id = ?');
  }

  get(orgId: string, id: string): CallRecord | undefined {
    const r = this.#get.get(id, orgId) as CallRow | undefined;
    return r && fromRow(r);
  }

  insert(c: { id: string; org_id: string; agent_id: string | null; sip_trunk_id: string | null; direction: CallDirection; status: string; from: string; to: string; started_at: string }): void {
    this.#insert.run(c);
  }

  /** The call was answered (a phone call) or its session socket opened: status in_progress. */
  markAnswered(id: string, at: string): boolean {
    return this.#markAnswered.run(at, id).changes === 1;
  }

  /** Stores how the call ended. Only the first end is kept; returns whether this one was. */
  end(id: string, e: CallEnd): boolean {
    const status = e.status ?? (e.end_reason === 'error' ? 'failed' : 'completed');
    return this.#end.run({ id, status, ended_at: e.ended_at, end_reason: e.end_reason, transcript: JSON.stringify(e.transcript) }).changes === 1;
  }

  /** Where the call's recording (a WAV file) is; has_recording turns true. */
  setRecording(id: string, path: string): boolean {
    return this.db.prepare('UPDATE calls SET recording_path = ? WHERE id = ?').run(path, id).changes === 1;
  }

  /** The recording's file path, when the call has one. */
  recordingPath(orgId: string, id: string): string | undefined {
    const r = this.db.prepare('SELECT recording_path FROM calls WHERE id = ? AND org_id = ?').get(id, orgId) as { recording_path: string | null } | undefined;
    return r?.recording_path ?? undefined;
  }

  /** The after-call summary (it may arrive after the end). */
  setSummary(id: string, text: string): boolean {
    return this.#setSummary.run(text, id).changes === 1;
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
