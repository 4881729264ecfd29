/**
 * Call records. Voice sessions (src/session/) and the call bridge write them; the API reads them.
 * API queries are scoped by organization; the writers address a record by its id, which only they
 * hold. The record's shape and every mapping: src/domain/call.ts and docs/calls.md.
 *
 * Status: started (created: token issued, INVITE routed, dial placed) -> in_progress (answered /
 * socket open) -> ended (end_status completed, failed, busy, no_answer or expired), or
 * auth_failed for an outbound call the trunk refused our credentials for.
 */
import type { Db } from './db.ts';
import {
  endStatusOf,
  outcomeOf,
  partyNumber,
  sourceOf,
  type CallDirection,
  type CallListFilter,
  type CallOutcome,
  type CallRecord,
  type CallSource,
  type CallStatus,
  type EndStatus,
  type Transcript,
  type TranscriptEntry,
} from '../domain/call.ts';
import { callListSql, counterOf, ftsPhrase, type CounterDim, type SearchPlan, type SqlQuery } from './call-list.ts';

export type { CallDirection, CallRecord } from '../domain/call.ts';

/** A new record: status started. */
export interface NewCall {
  id: string;
  org_id: string;
  agent_id: string | null;
  sip_trunk_id: string | null;
  direction: CallDirection;
  from: string;
  to: string;
  created_at: string;
  /** The agent version the session runs, when it has one. */
  graph_version_id?: string | null;
  /** Default: from the direction (sourceOf). */
  source?: CallSource;
  /** The carrier's id of the call (its CallSid), for calls on the carrier's own voice path. */
  carrier_call_id?: string | null;
}

/** How a call ended. */
export interface CallEnd {
  ended_at: string;
  termination_reason: string;
  transcript?: TranscriptEntry[];
  /** Default: endStatusOf(termination_reason). */
  end_status?: EndStatus;
  /** Default ended; auth_failed for a dial the trunk refused our credentials for. */
  status?: 'ended' | 'auth_failed';
}

interface CallRow {
  id: string;
  org_id: string;
  agent_id: string | null;
  graph_version_id: string | null;
  sip_trunk_id: string | null;
  direction: CallDirection;
  source: CallSource;
  status: CallStatus;
  end_status: EndStatus | null;
  from_number: string;
  to_number: string;
  party_number: string;
  created_at: string;
  started_at: string | null;
  ended_at: string | null;
  termination_reason: string | null;
  outcome: CallOutcome | null;
  transcript: string;
  summary: string | null;
  recording_path: string | null;
  carrier_call_id: string | null;
  tags: string;
}

const fromRow = (r: CallRow): CallRecord => ({
  id: r.id,
  org_id: r.org_id,
  agent_id: r.agent_id,
  graph_version_id: r.graph_version_id,
  sip_trunk_id: r.sip_trunk_id,
  direction: r.direction,
  source: r.source,
  status: r.status,
  end_status: r.end_status,
  from: r.from_number,
  to: r.to_number,
  party_number: r.party_number,
  created_at: r.created_at,
  started_at: r.started_at,
  ended_at: r.ended_at,
  termination_reason: r.termination_reason,
  outcome: r.outcome,
  transcript: JSON.parse(r.transcript) as Transcript,
  summary: r.summary,
  has_recording: r.recording_path !== null,
  carrier_call_id: r.carrier_call_id,
  tags: JSON.parse(r.tags) as string[],
});

// A call's tags, sorted, as a JSON array (call_tags' primary key serves it).
const SELECT_CALL = `SELECT c.*, (SELECT json_group_array(t.tag ORDER BY t.tag) FROM call_tags t WHERE t.call_id = c.id) AS tags FROM calls c`;

/**
 * A search string goes to the trigram index when it matches at most 1 in FTS_SELECTIVITY of the
 * organization's calls (probing costs at most that many index entries); otherwise one pass over
 * the organization's created_at index, which carries party_number, is cheaper than joining every
 * match. Strings under 3 characters have no trigram and always take that pass.
 */
const FTS_SELECTIVITY = 100;

export interface CallPage {
  calls: CallRecord[];
  total: number;
}

export class CallRepo {
  readonly #get;
  readonly #insert;
  readonly #markAnswered;
  readonly #end;
  readonly #setSummary;
  readonly #byIds;
  readonly #counter;
  readonly #ftsProbe;
  readonly #addTag;
  /** Prepared list statements by SQL text; the combinations of filters are finite. */
  readonly #listStatements = new Map<string, ReturnType<Db['prepare']>>();

  constructor(private readonly db: Db) {
    this.#get = db.prepare(`${SELECT_CALL} WHERE c.id = ? AND c.org_id = ?`);
    this.#insert = db.prepare(
      // transcript is named: the column's default ('[]') is the shape before migration 3.
      `INSERT INTO calls (id, org_id, agent_id, graph_version_id, sip_trunk_id, direction, source, outbound, status, from_number, to_number, party_number, created_at, transcript, carrier_call_id)
       VALUES (@id, @org_id, @agent_id, @graph_version_id, @sip_trunk_id, @direction, @source, @outbound, 'started', @from, @to, @party_number, @created_at, '{"entries":[]}', @carrier_call_id)`,
    );
    this.#markAnswered = db.prepare("UPDATE calls SET status = 'in_progress', started_at = ? WHERE id = ? AND ended_at IS NULL AND started_at IS NULL");
    // Only the first end counts: a second one (a race of client close and runtime end) is a no-op.
    this.#end = db.prepare(
      `UPDATE calls SET status = @status, end_status = @end_status, ended_at = @ended_at, termination_reason = @termination_reason, outcome = @outcome, transcript = @transcript
       WHERE id = @id AND ended_at IS NULL`,
    );
    this.#setSummary = db.prepare('UPDATE calls SET summary = ? WHERE id = ?');
    this.#byIds = db.prepare(`${SELECT_CALL} WHERE c.id IN (SELECT value FROM json_each(?))`);
    this.#counter = db.prepare('SELECT n FROM call_counts WHERE org_id = ? AND dim = ? AND val = ?').pluck();
    this.#ftsProbe = db.prepare('SELECT count(*) FROM (SELECT 1 FROM call_search_fts WHERE call_search_fts MATCH ? LIMIT ?)').pluck();
    this.#addTag = db.prepare('INSERT OR IGNORE INTO call_tags (call_id, org_id, tag, created_at) SELECT id, org_id, ?, created_at FROM calls WHERE id = ?');
  }

  get(orgId: string, id: string): CallRecord | undefined {
    const r = this.#get.get(id, orgId) as CallRow | undefined;
    return r && fromRow(r);
  }

  insert(c: NewCall): void {
    this.#insert.run({
      id: c.id,
      org_id: c.org_id,
      agent_id: c.agent_id,
      graph_version_id: c.graph_version_id ?? null,
      sip_trunk_id: c.sip_trunk_id,
      direction: c.direction,
      source: c.source ?? sourceOf(c.direction),
      outbound: c.direction === 'outbound' ? 1 : 0,
      from: c.from,
      to: c.to,
      party_number: partyNumber(c.direction, c.from, c.to),
      created_at: c.created_at,
      carrier_call_id: c.carrier_call_id ?? null,
    });
  }

  /** The call was answered (a phone call) or its session socket opened: in_progress, started_at. */
  markAnswered(id: string, at: string): boolean {
    return this.#markAnswered.run(at, id).changes === 1;
  }

  /** Stores how the call ended. Only the first end is kept; returns whether this one was. */
  end(id: string, e: CallEnd): boolean {
    const transcript: Transcript = { entries: e.transcript ?? [] };
    return (
      this.#end.run({
        id,
        status: e.status ?? 'ended',
        end_status: e.end_status ?? endStatusOf(e.termination_reason),
        ended_at: e.ended_at,
        termination_reason: e.termination_reason,
        outcome: outcomeOf(e.termination_reason) ?? null,
        transcript: JSON.stringify(transcript),
      }).changes === 1
    );
  }

  /** The carrier's id of a call callbridge placed through the carrier's call API (known after the record). */
  setCarrierCallId(id: string, callSid: string): boolean {
    return this.db.prepare('UPDATE calls SET carrier_call_id = ? WHERE id = ?').run(callSid, id).changes === 1;
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

  /** Tags the call (a tag it has already is kept once). Returns how many were new. */
  addTags(id: string, tags: readonly string[]): number {
    return this.db.transaction(() => tags.reduce((n, tag) => n + this.#addTag.run(tag, id).changes, 0))();
  }

  /** How the list query serves `search` for this organization (see FTS_SELECTIVITY). */
  searchPlan(orgId: string, search: string | undefined): SearchPlan {
    if (!search || [...search].length < 3) return 'scan';
    const budget = Math.floor(this.orgTotal(orgId) / FTS_SELECTIVITY);
    if (budget === 0) return 'scan';
    return (this.#ftsProbe.get(ftsPhrase(search), budget + 1) as number) <= budget ? 'fts' : 'scan';
  }

  /** How many calls the organization has (a counter, not a count). */
  orgTotal(orgId: string): number {
    return this.#count(orgId, 'all', '');
  }

  /** A counter of call_counts (migration 3); 0 when it has never been written. */
  #count(orgId: string, dim: CounterDim, val: string): number {
    return (this.#counter.get(orgId, dim, val) as number | undefined) ?? 0;
  }

  /** The total of a list filtered by nothing or one counted dimension alone: from the counters. */
  #countedTotal(orgId: string, f: CallListFilter): number | undefined {
    const c = counterOf(f);
    return c && c.vals.reduce((sum, v) => sum + this.#count(orgId, c.dim, v), 0);
  }

  /**
   * One page, newest first (created_at, then id), and how many calls match in all, read in one
   * transaction (one snapshot: the total and the page agree). A page in the older half of the
   * list is read from the oldest end, in the other direction, so no page skips more than half.
   */
  list(orgId: string, f: CallListFilter, limit: number, offset: number): CallPage {
    return this.db.transaction((): CallPage => {
      const plan = this.searchPlan(orgId, f.search);
      const counted = this.#countedTotal(orgId, f);
      const total = counted ?? (this.#run(callListSql(orgId, f, plan, limit, offset).count, 'get') as number);
      if (offset >= total) return { calls: [], total };
      const fromEnd = offset + limit / 2 > total / 2;
      const q = fromEnd ? callListSql(orgId, f, plan, Math.min(limit, total - offset), Math.max(0, total - offset - limit), 'asc') : callListSql(orgId, f, plan, limit, offset);
      const got = this.#run(q.page, 'all') as string[];
      const ids = fromEnd ? got.reverse() : got;
      if (ids.length === 0) return { calls: [], total };
      const byId = new Map((this.#byIds.all(JSON.stringify(ids)) as CallRow[]).map((r) => [r.id, r]));
      return { calls: ids.flatMap((id) => (byId.has(id) ? [fromRow(byId.get(id) as CallRow)] : [])), total };
    })();
  }

  /** Runs a list statement (first column only). */
  #run(q: SqlQuery, how: 'get' | 'all'): unknown {
    const st = this.#prepare(q.sql).pluck();
    return how === 'get' ? st.get(...q.args) : st.all(...q.args);
  }

  #prepare(sql: string): ReturnType<Db['prepare']> {
    let st = this.#listStatements.get(sql);
    if (st === undefined) {
      // Bounded: a burst of unusual agent_ids counts must not grow the cache without end.
      if (this.#listStatements.size >= 256) this.#listStatements.clear();
      st = this.db.prepare(sql);
      this.#listStatements.set(sql, st);
    }
    return st;
  }
}
