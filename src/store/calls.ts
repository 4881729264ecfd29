/**
 * Call records. Voice sessions (src/session/) and the call bridge write them; the API reads them.
 * API queries are scoped by organization; the writers address a record by its id, which only they
 * hold. The record's shape and every mapping: src/domain/call.ts and docs/calls.md.
 *
 * Status: started (created: token issued, INVITE routed, dial placed) -> in_progress (answered /
 * socket open) -> ended (end_status completed, failed, busy, no_answer or expired), or
 * auth_failed for an outbound call the trunk refused our credentials for.
 */
import type { SqlClient, SqlValue } from './sql-client.ts';
import {
  clippedSipDetails,
  endStatusOf,
  outcomeOf,
  partyNumber,
  sourceOf,
  type CallAnalysis,
  type CallDirection,
  type CallListFilter,
  type CallOutcome,
  type CallRecord,
  type CallSource,
  type CallStatus,
  type ContextVariable,
  type EndStatus,
  type MachineDetectionOutcome,
  type SipDetails,
  type Transcript,
  type TranscriptEntry,
} from '../domain/call.ts';
import { recordingUrlOf } from '../domain/webhook.ts';
import { addCallEvent } from './webhook-outbox.ts';
import { callListSql, callListSqlPostgres, counterOf, ftsPhrase, gramCounterOf, hasGramPostings, isShortSearch, type CounterDim, type SearchPlan, type SqlQuery } from './call-list.ts';

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
  /**
   * A dial that never connected: only while the record is unanswered (status started) and no
   * media stream of it started on any node (stream_grants), so a node that learns late of a
   * dial never ends the call another node is bridging.
   */
  unconnected_only?: boolean;
  /** What answering-machine detection decided (docs/machine-detection.md). */
  machine_detection?: MachineDetectionOutcome;
  /** A SIP call's Call-ID and final response, stored before the end so call.ended carries them. */
  sip?: SipDetails;
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
  extracted_variables: string;
  analyzed_at: string | null;
  recording_path: string | null;
  carrier_call_id: string | null;
  outbound_list_run_id: string | null;
  outbound_contact_id: string | null;
  tags: string;
  machine_detection: string | null;
  sip_call_id: string | null;
  sip_final_status: number | null;
  sip_final_reason: string | null;
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
  extracted_variables: JSON.parse(r.extracted_variables) as ContextVariable[],
  analyzed_at: r.analyzed_at,
  has_recording: r.recording_path !== null,
  carrier_call_id: r.carrier_call_id,
  outbound_list_run_id: r.outbound_list_run_id ?? null,
  outbound_contact_id: r.outbound_contact_id ?? null,
  tags: JSON.parse(r.tags) as string[],
  machine_detection: r.machine_detection === null ? null : (JSON.parse(r.machine_detection) as MachineDetectionOutcome),
  sip: r.sip_call_id == null ? null : { call_id: r.sip_call_id, final_status: r.sip_final_status === null ? null : Number(r.sip_final_status), final_reason: r.sip_final_reason },
});

const SET_SIP = 'UPDATE calls SET sip_call_id = ?, sip_final_status = ?, sip_final_reason = ? WHERE id = ?';
const sipValues = (id: string, sip: SipDetails): SqlValue[] => {
  const d = clippedSipDetails(sip);
  return [d.call_id, d.final_status, d.final_reason, id];
};

// A call's tags, sorted, as a JSON array (call_tags' primary key serves it).
const SELECT_CALL = `SELECT c.*, (SELECT json_group_array(t.tag ORDER BY t.tag) FROM call_tags t WHERE t.call_id = c.id) AS tags FROM calls c`;
// PostgreSQL: json_agg gives NULL for no rows, and json, which would come back as an object.
const SELECT_CALL_PG = `SELECT c.*, (SELECT CAST(coalesce(json_agg(t.tag ORDER BY t.tag), '[]') AS TEXT) FROM call_tags t WHERE t.call_id = c.id) AS tags FROM calls c`;
const selectCall = (db: SqlClient): string => (db.dialect === 'postgres' ? SELECT_CALL_PG : SELECT_CALL);

/**
 * A search string goes to the trigram index when it matches at most 1 in FTS_SELECTIVITY of the
 * organization's calls (probing costs at most that many index entries); otherwise one pass over
 * the organization's created_at index, which carries party_number, is cheaper than joining every
 * match. Strings under 3 characters have no trigram and always take that pass.
 */
const FTS_SELECTIVITY = 100;

/** CallEnd.unconnected_only's condition on the row being ended. */
const UNCONNECTED = " AND status = 'started' AND started_at IS NULL AND NOT EXISTS (SELECT 1 FROM stream_grants g WHERE g.call_id = calls.id AND g.stream_started = 1)";

export interface CallPage {
  calls: CallRecord[];
  total: number;
}

export interface CallRepoOptions {
  /** http.public_url: the base of recording.ready's recording_url (empty: the path alone). */
  publicUrl?: string;
}

export class CallRepo {
  /** nodeId: the node whose rows this repository writes (calls.node_id; null when none). */
  constructor(
    private readonly db: SqlClient,
    private readonly nodeId: string | null = null,
    private readonly options: CallRepoOptions = {},
  ) {}

  async get(orgId: string, id: string): Promise<CallRecord | undefined> {
    const r = await this.db.get<CallRow>(`${selectCall(this.db)} WHERE c.id = ? AND c.org_id = ?`, [id, orgId]);
    return r && fromRow(r);
  }

  /** Creates the record (status started) and, in the same transaction, its call.started events. */
  async insert(c: NewCall): Promise<void> {
    await this.db.transaction(async (tx) => {
      await this.#insert(tx, c);
      await addCallEvent(tx, 'call.started', c.org_id, () => callById(tx, c.id));
    });
  }

  async #insert(db: SqlClient, c: NewCall): Promise<void> {
    await db.run(
      // transcript is named: the column's default ('[]') is the shape before migration 3.
      `INSERT INTO calls (id, org_id, agent_id, graph_version_id, sip_trunk_id, direction, source, outbound, status, from_number, to_number, party_number, created_at, transcript, carrier_call_id, node_id)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'started', ?, ?, ?, ?, '{"entries":[]}', ?, ?)`,
      [
        c.id,
        c.org_id,
        c.agent_id,
        c.graph_version_id ?? null,
        c.sip_trunk_id,
        c.direction,
        c.source ?? sourceOf(c.direction),
        c.direction === 'outbound' ? 1 : 0,
        c.from,
        c.to,
        partyNumber(c.direction, c.from, c.to),
        c.created_at,
        c.carrier_call_id ?? null,
        this.nodeId,
      ],
    );
  }

  /** The call was answered (a phone call) or its session socket opened: in_progress, started_at. */
  async markAnswered(id: string, at: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      const r = await tx.get<{ org_id: string }>("UPDATE calls SET status = 'in_progress', started_at = ? WHERE id = ? AND ended_at IS NULL AND started_at IS NULL RETURNING org_id", [at, id]);
      if (r) await addCallEvent(tx, 'call.answered', r.org_id, () => callById(tx, id));
      return r !== undefined;
    });
  }

  /**
   * Stores how the call ended and, in the same transaction, its call.ended events (with the final
   * transcript). Only the first end is kept; returns whether this one was.
   */
  async end(id: string, e: CallEnd): Promise<boolean> {
    const transcript: Transcript = { entries: e.transcript ?? [] };
    // Only the first end counts: a second one (a race of client close and runtime end) is a no-op.
    return this.db.transaction(async (tx) => {
      if (e.sip !== undefined) await tx.run(SET_SIP, sipValues(id, e.sip));
      const r = await tx.all<{ id: string; org_id: string }>(
        `UPDATE calls SET status = ?, end_status = ?, ended_at = ?, termination_reason = ?, outcome = ?, transcript = ?, machine_detection = ?
         WHERE id = ? AND ended_at IS NULL${e.unconnected_only === true ? UNCONNECTED : ''} RETURNING id, org_id`,
        [
          e.status ?? 'ended',
          e.end_status ?? endStatusOf(e.termination_reason),
          e.ended_at,
          e.termination_reason,
          outcomeOf(e.termination_reason) ?? null,
          JSON.stringify(transcript),
          e.machine_detection ? JSON.stringify(e.machine_detection) : null,
          id,
        ],
      );
      await callEndedEvents(tx, r);
      return r.length === 1;
    });
  }

  /** A SIP call's Call-ID and final response (docs/calls.md "SIP details"); the latest write wins. */
  async setSip(id: string, sip: SipDetails): Promise<boolean> {
    return (await this.db.run(SET_SIP, sipValues(id, sip))).changes === 1;
  }

  /** The carrier's id of a call callbridge placed through the carrier's call API (known after the record). */
  async setCarrierCallId(id: string, callSid: string): Promise<boolean> {
    return (await this.db.run('UPDATE calls SET carrier_call_id = ? WHERE id = ?', [callSid, id])).changes === 1;
  }

  /**
   * Where the call's recording (a WAV file) is; has_recording turns true and, in the same
   * transaction, the recording.ready events of subscribed endpoints are written. The caller hands
   * over a finished file (CallRecorder.close: header sizes patched, file closed), so a receiver
   * fetching recording_url at once gets all of it. Only the first recording of a call is kept:
   * a second one changes nothing and writes no event (false).
   */
  async setRecording(id: string, path: string): Promise<boolean> {
    return this.db.transaction(async (tx) => {
      const r = await tx.get<{ org_id: string }>('UPDATE calls SET recording_path = ? WHERE id = ? AND recording_path IS NULL RETURNING org_id', [path, id]);
      if (r) await addCallEvent(tx, 'recording.ready', r.org_id, () => callById(tx, id), { recording_url: recordingUrlOf(this.options.publicUrl ?? '', id) });
      return r !== undefined;
    });
  }

  /** The recording's file path, when the call has one. */
  async recordingPath(orgId: string, id: string): Promise<string | undefined> {
    const r = await this.db.get<{ recording_path: string | null }>('SELECT recording_path FROM calls WHERE id = ? AND org_id = ?', [id, orgId]);
    return r?.recording_path ?? undefined;
  }

  /**
   * Stores the post-call analysis (summary, extracted_variables, analyzed_at) of an ended call,
   * once: a call already analysed, or not ended, is left as it is. Returns whether this write
   * stored it; the call.analyzed events of subscribed endpoints are written in its transaction.
   */
  async setAnalysis(id: string, analysis: CallAnalysis, at: string): Promise<boolean> {
    // The call.analyzed events go with the write, in its transaction, as the other call events do.
    return this.db.transaction(async (tx) => {
      const r = await tx.get<{ org_id: string }>(
        'UPDATE calls SET summary = ?, extracted_variables = ?, analyzed_at = ? WHERE id = ? AND ended_at IS NOT NULL AND analyzed_at IS NULL RETURNING org_id',
        [analysis.summary, JSON.stringify(analysis.extracted_variables), at, id],
      );
      if (r) await addCallEvent(tx, 'call.analyzed', r.org_id, () => callById(tx, id));
      return r !== undefined;
    });
  }

  /** Tags the call (a tag it has already is kept once). Returns how many were new. */
  addTags(id: string, tags: readonly string[]): Promise<number> {
    return this.db.transaction(async (tx) => {
      let added = 0;
      for (const tag of tags) {
        // The SELECT's WHERE keeps SQLite from reading ON CONFLICT as part of a join.
        const r = await tx.run('INSERT INTO call_tags (call_id, org_id, tag, created_at) SELECT id, org_id, ?, created_at FROM calls WHERE id = ? ON CONFLICT DO NOTHING', [tag, id]);
        added += r.changes;
      }
      return added;
    });
  }

  /** How the list query serves `search` for this organization (see FTS_SELECTIVITY; 'grams': hasGramPostings). */
  searchPlan(orgId: string, search: string | undefined): Promise<SearchPlan> {
    return searchPlan(this.db, orgId, search);
  }

  /** How many calls the organization has (a counter, not a count). */
  orgTotal(orgId: string): Promise<number> {
    return counter(this.db, orgId, 'all', '');
  }

  /**
   * One page, newest first (created_at, then id), and how many calls match in all, read in one
   * transaction (one snapshot: the total and the page agree). A page in the older half of the
   * list is read from the oldest end, in the other direction, so no page skips more than half.
   */
  list(orgId: string, f: CallListFilter, limit: number, offset: number): Promise<CallPage> {
    return this.db.transaction(async (tx): Promise<CallPage> => {
      // A 1-2 character string no call of the organization holds: nothing to read.
      const grams = isShortSearch(f.search) ? await gramCount(tx, orgId, f.search) : undefined;
      if (grams === 0) return { calls: [], total: 0 };
      const plan = await searchPlan(tx, orgId, f.search);
      // A short search alone: that counter is the total (read once, just above).
      const counted = gramCounterOf(f) !== undefined ? grams : await countedTotal(tx, orgId, f);
      const listSql = tx.dialect === 'postgres' ? callListSqlPostgres : callListSql;
      const total = counted ?? ((await tx.get<{ n: number }>(...sqlOf(listSql(orgId, f, plan, limit, offset).count)))?.n ?? 0);
      if (offset >= total) return { calls: [], total };
      const fromEnd = offset + limit / 2 > total / 2;
      const q = fromEnd ? listSql(orgId, f, plan, Math.min(limit, total - offset), Math.max(0, total - offset - limit), 'asc') : listSql(orgId, f, plan, limit, offset);
      const got = (await tx.all<{ id: string }>(...sqlOf(q.page))).map((r) => r.id);
      const ids = fromEnd ? got.reverse() : got;
      if (ids.length === 0) return { calls: [], total };
      const rows =
        tx.dialect === 'postgres'
          ? await tx.all<CallRow>(`${SELECT_CALL_PG} WHERE c.id IN (SELECT json_array_elements_text(CAST(? AS json)))`, [JSON.stringify(ids)])
          : await tx.all<CallRow>(`${SELECT_CALL} WHERE c.id IN (SELECT value FROM json_each(?))`, [JSON.stringify(ids)]);
      const byId = new Map(rows.map((r) => [r.id, r]));
      return { calls: ids.flatMap((id) => (byId.has(id) ? [fromRow(byId.get(id) as CallRow)] : [])), total };
    });
  }
}

/** The record of a call by id alone (the writers' view: they hold the id). */
async function callById(db: SqlClient, id: string): Promise<CallRecord | undefined> {
  const r = await db.get<CallRow>(`${selectCall(db)} WHERE c.id = ?`, [id]);
  return r && fromRow(r);
}

/**
 * The call.ended events of calls `tx` has just ended (a bulk end: a swept node's calls, expired
 * tokens), in that transaction. Any other call event is added the same way, through addCallEvent
 * (webhook-outbox.ts) inside the transaction of the change that causes it.
 */
export async function callEndedEvents(tx: SqlClient, ended: ReadonlyArray<{ id: string; org_id: string }>): Promise<void> {
  for (const c of ended) await addCallEvent(tx, 'call.ended', c.org_id, () => callById(tx, c.id));
}

/** A list statement as the client's arguments. */
const sqlOf = (q: SqlQuery): [string, SqlValue[]] => [q.sql, q.args as SqlValue[]];

async function searchPlan(db: SqlClient, orgId: string, search: string | undefined): Promise<SearchPlan> {
  // A 1-2 character string with a letter or a sign: its postings (call_short_grams), on both.
  if (hasGramPostings(search)) return 'grams';
  // PostgreSQL's planner chooses between the trigram index and a scan itself (callListSqlPostgres).
  if (!search || [...search].length < 3 || db.dialect === 'postgres') return 'scan';
  const budget = Math.floor((await counter(db, orgId, 'all', '')) / FTS_SELECTIVITY);
  if (budget === 0) return 'scan';
  const probe = await db.get<{ n: number }>('SELECT count(*) AS n FROM (SELECT 1 FROM call_search_fts WHERE call_search_fts MATCH ? LIMIT ?)', [ftsPhrase(search), budget + 1]);
  return (probe?.n ?? 0) <= budget ? 'fts' : 'scan';
}

/** A counter of call_counts (migration 3); 0 when it has never been written. */
async function counter(db: SqlClient, orgId: string, dim: CounterDim, val: string): Promise<number> {
  return (await db.get<{ n: number }>('SELECT n FROM call_counts WHERE org_id = ? AND dim = ? AND val = ?', [orgId, dim, val]))?.n ?? 0;
}

/** How many of the organization's calls hold this 1-2 character string (call_gram_counts, migration 10). */
async function gramCount(db: SqlClient, orgId: string, gram: string): Promise<number> {
  return (await db.get<{ n: number }>('SELECT n FROM call_gram_counts WHERE org_id = ? AND gram = ?', [orgId, gram]))?.n ?? 0;
}

/** The total of a list filtered by nothing or one counted dimension alone: from the counters. */
async function countedTotal(db: SqlClient, orgId: string, f: CallListFilter): Promise<number | undefined> {
  const c = counterOf(f);
  if (!c) return undefined;
  let sum = 0;
  for (const v of c.vals) sum += await counter(db, orgId, c.dim, v);
  return sum;
}
