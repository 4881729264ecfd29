/**
 * The SQL of GET /v1/calls: a page of ids in list order (created_at, id newest first) and the
 * total, for one organization and any mix of filters. Built from fixed fragments; every value is
 * bound. No I/O here, so the tests can EXPLAIN every plan.
 *
 * Each filter has an index that serves it alone, in list order and counted on the index only
 * (migration 3, docs/calls.md). With several filters one of them drives (its index is named with
 * INDEXED BY so the plan does not depend on statistics) and the others are checked on the way, in
 * this order of preference:
 *
 *   search (trigram index, when selective; the postings of a rare 1-2 character string) > tag >
 *   outbound_contact_id > outbound_list_run_id > agent_ids > status other than ended > outcome > source > outbound > status ended >
 *   created_at (no filter, date range, a 1-2 character string of digits and '+')
 *
 * The date range is a range on every driver's index (they all end in created_at).
 */
import type { CallListFilter } from '../domain/call.ts';

// callListSql is SQLite's (INDEXED BY, instr, FTS5); callListSqlPostgres is PostgreSQL's.

export interface SqlQuery {
  sql: string;
  args: unknown[];
}

/**
 * How `search` is served: the trigram index (selective strings), the postings of a 1-2 character
 * string with a character outside [0-9+] (call_short_grams, migration 12), or a scan of the
 * created_at index.
 */
export type SearchPlan = 'fts' | 'grams' | 'scan';

export interface CallListSql {
  /** `id` of one page, in list order (LIMIT and OFFSET are its last two arguments). */
  page: SqlQuery;
  /** One row `{ n }`: how many calls match. */
  count: SqlQuery;
}

interface Pred {
  sql: string;
  args: unknown[];
}

/** The FTS5 query of a substring: one phrase (trigram: consecutive trigrams = the substring). */
export const ftsPhrase = (s: string): string => `"${s.replaceAll('"', '""')}"`;

const on = (sql: string, ...args: unknown[]): Pred => ({ sql, args });

/** The filters as predicates on calls c, by name; `others` leaves out the driver's own. */
function predicates(f: CallListFilter) {
  const preds: Record<string, Pred | undefined> = {
    agent: f.agentIds?.length ? on(`c.agent_id IN (${f.agentIds.map(() => '?').join(', ')})`, ...f.agentIds) : undefined,
    status: f.status !== undefined ? on('c.status = ?', f.status) : undefined,
    outcome: f.outcome !== undefined ? on('c.outcome = ?', f.outcome) : undefined,
    source: f.source !== undefined ? on('c.source = ?', f.source) : undefined,
    outbound: f.outbound !== undefined ? on('c.outbound = ?', f.outbound ? 1 : 0) : undefined,
    run: f.outboundListRunId !== undefined ? on('c.outbound_list_run_id = ?', f.outboundListRunId) : undefined,
    contact: f.outboundContactId !== undefined ? on('c.outbound_contact_id = ?', f.outboundContactId) : undefined,
    // SQLite's instr(): on PostgreSQL only the postings of the search's gram drive (postingsSql).
    search: f.search ? on('instr(c.party_number, ?) > 0', f.search) : undefined,
    // Only when another filter drives (a selective search): the tag is then a key lookup.
    tag: f.tag ? on('EXISTS (SELECT 1 FROM call_tags tt WHERE tt.call_id = c.id AND tt.tag = ?)', f.tag) : undefined,
    from: f.dateFrom !== undefined ? on('c.created_at >= ?', f.dateFrom) : undefined,
    to: f.dateTo !== undefined ? on('c.created_at <= ?', f.dateTo) : undefined,
  };
  const others = (...except: string[]): Pred[] => Object.entries(preds).filter(([k, p]) => p !== undefined && !except.includes(k)).map(([, p]) => p as Pred);
  const where = (ps: Pred[]) => ({ sql: ps.map((p) => p.sql).join(' AND '), args: ps.flatMap((p) => p.args) });
  return { others, where };
}

/**
 * A list driven by a postings table (call_tags, call_short_grams): it holds org_id and created_at,
 * so its key, the org and the date range are read in list order from its index `(org_id, key,
 * created_at, call_id)`; calls is joined (by key) only for the other filters, checked on the way.
 */
function postingsSql(orgId: string, f: CallListFilter, p: { table: string; key: string; value: string; filter: string }, join: 'CROSS JOIN' | 'JOIN', limit: number, offset: number, dir: 'ASC' | 'DESC'): CallListSql {
  const { others, where } = predicates(f);
  const range = [
    ...(f.dateFrom !== undefined ? [on('t.created_at >= ?', f.dateFrom)] : []),
    ...(f.dateTo !== undefined ? [on('t.created_at <= ?', f.dateTo)] : []),
  ];
  const rest = others('from', 'to', p.filter);
  const w = where([on('t.org_id = ?', orgId), on(`t.${p.key} = ?`, p.value), ...range, ...rest]);
  const from = rest.length ? `${p.table} t ${join} calls c ON c.id = t.call_id` : `${p.table} t`;
  return {
    page: { sql: `SELECT t.call_id AS id FROM ${from} WHERE ${w.sql} ORDER BY t.created_at ${dir}, t.call_id ${dir} LIMIT ? OFFSET ?`, args: [...w.args, limit, offset] },
    count: { sql: `SELECT count(*) AS n FROM ${from} WHERE ${w.sql}`, args: w.args },
  };
}

/**
 * `order` desc is the list's order; asc reads the same list from its oldest end (the repository
 * reads a page in the older half that way, then reverses it).
 */
export function callListSql(orgId: string, f: CallListFilter, search: SearchPlan, limit: number, offset: number, order: 'desc' | 'asc' = 'desc'): CallListSql {
  const dir = order === 'asc' ? 'ASC' : 'DESC';
  const { others, where } = predicates(f);

  if (f.search && search === 'fts') {
    // The trigram index yields the matching calls of every organization; few, or it is not chosen.
    const w = where([on('f.call_search_fts MATCH ?', ftsPhrase(f.search)), on('c.org_id = ?', orgId), ...others('search')]);
    const from = 'call_search_fts f CROSS JOIN call_search s ON s.id = f.rowid CROSS JOIN calls c ON c.id = s.call_id';
    return {
      page: { sql: `SELECT c.id FROM ${from} WHERE ${w.sql} ORDER BY c.created_at ${dir}, c.id ${dir} LIMIT ? OFFSET ?`, args: [...w.args, limit, offset] },
      count: { sql: `SELECT count(*) AS n FROM ${from} WHERE ${w.sql}`, args: w.args },
    };
  }
  // CROSS JOIN: SQLite keeps the postings the outer loop.
  if (search === 'grams' && hasGramPostings(f.search)) return postingsSql(orgId, f, { table: 'call_short_grams', key: 'gram', value: f.search, filter: 'search' }, 'CROSS JOIN', limit, offset, dir);
  if (f.tag) return postingsSql(orgId, f, { table: 'call_tags', key: 'tag', value: f.tag, filter: 'tag' }, 'CROSS JOIN', limit, offset, dir);

  const org = on('c.org_id = ?', orgId);
  const driver = pickIndex(f);
  if (driver === 'calls_org_agent' && (f.agentIds?.length ?? 0) > 1) {
    // Several agents: one arm per agent, each read in list order from the agent index, merged
    // (SQLite's MERGE of a compound SELECT), so a page never sorts all the agents' calls.
    const rest = where(others('agent'));
    const arms = (f.agentIds ?? []).map((a) => ({
      sql: `SELECT c.created_at, c.id FROM calls c INDEXED BY calls_org_agent WHERE c.org_id = ? AND c.agent_id = ?${rest.sql ? ` AND ${rest.sql}` : ''}`,
      args: [orgId, a, ...rest.args],
    }));
    const w = where([org, ...others()]);
    return {
      page: {
        sql: `SELECT id FROM (${arms.map((a) => a.sql).join(' UNION ALL ')} ORDER BY 1 ${dir}, 2 ${dir} LIMIT ? OFFSET ?)`,
        args: [...arms.flatMap((a) => a.args), limit, offset],
      },
      count: { sql: `SELECT count(*) AS n FROM calls c INDEXED BY calls_org_agent WHERE ${w.sql}`, args: w.args },
    };
  }
  const w = where([org, ...others()]);
  return {
    page: { sql: `SELECT c.id FROM calls c INDEXED BY ${driver} WHERE ${w.sql} ORDER BY c.created_at ${dir}, c.id ${dir} LIMIT ? OFFSET ?`, args: [...w.args, limit, offset] },
    count: { sql: `SELECT count(*) AS n FROM calls c INDEXED BY ${driver} WHERE ${w.sql}`, args: w.args },
  };
}

/** `%`, `_` and `\` of a search string taken literally in `LIKE ... ESCAPE '\'`. */
export const likeLiteral = (s: string): string => s.replace(/[\\%_]/g, (c) => `\\${c}`);

/**
 * The same list on PostgreSQL (docs/store-postgres.md): one statement whatever the filters, the
 * planner choosing the index (the created_at indexes of migration 3, the tag index, the trigram
 * index calls_party_number_trgm for a search of 3 or more characters), so of `search` (the
 * plan) only 'grams' is used: a rare 1-2 character string is read from its postings, the
 * statement SQLite's (no trigram serves it, and the planner has no index of it). The search is `party_number LIKE '%s%'` with s taken literally: a case-sensitive
 * substring, like SQLite's instr() and its case-sensitive trigram index.
 */
export function callListSqlPostgres(orgId: string, f: CallListFilter, search: SearchPlan, limit: number, offset: number, order: 'desc' | 'asc' = 'desc'): CallListSql {
  const dir = order === 'asc' ? 'ASC' : 'DESC';
  // The postings of a rare 1-2 character string, as on SQLite (PostgreSQL has no CROSS JOIN ... ON).
  if (search === 'grams' && hasGramPostings(f.search)) return postingsSql(orgId, f, { table: 'call_short_grams', key: 'gram', value: f.search, filter: 'search' }, 'JOIN', limit, offset, dir);
  const preds: Pred[] = [{ sql: 'c.org_id = ?', args: [orgId] }];
  const add = (sql: string, ...args: unknown[]) => preds.push({ sql, args });
  if (f.agentIds?.length) add(`c.agent_id IN (${f.agentIds.map(() => '?').join(', ')})`, ...f.agentIds);
  if (f.status !== undefined) add('c.status = ?', f.status);
  if (f.outcome !== undefined) add('c.outcome = ?', f.outcome);
  if (f.source !== undefined) add('c.source = ?', f.source);
  if (f.outbound !== undefined) add('c.outbound = ?', f.outbound ? 1 : 0);
  if (f.outboundListRunId !== undefined) add('c.outbound_list_run_id = ?', f.outboundListRunId);
  if (f.outboundContactId !== undefined) add('c.outbound_contact_id = ?', f.outboundContactId);
  if (f.search) add(`c.party_number LIKE ? ESCAPE '\\'`, `%${likeLiteral(f.search)}%`);
  if (f.tag) add('EXISTS (SELECT 1 FROM call_tags tt WHERE tt.call_id = c.id AND tt.tag = ?)', f.tag);
  if (f.dateFrom !== undefined) add('c.created_at >= ?', f.dateFrom);
  if (f.dateTo !== undefined) add('c.created_at <= ?', f.dateTo);
  const where = preds.map((p) => p.sql).join(' AND ');
  const args = preds.flatMap((p) => p.args);
  return {
    page: { sql: `SELECT c.id FROM calls c WHERE ${where} ORDER BY c.created_at ${dir}, c.id ${dir} LIMIT ? OFFSET ?`, args: [...args, limit, offset] },
    count: { sql: `SELECT count(*) AS n FROM calls c WHERE ${where}`, args },
  };
}

/** The index that drives a list without a tag or a selective search (see the file comment). */
export function pickIndex(f: CallListFilter): string {
  if (f.outboundContactId !== undefined) return 'calls_org_outbound_contact';
  if (f.outboundListRunId !== undefined) return 'calls_org_outbound_run';
  if (f.agentIds?.length) return 'calls_org_agent';
  if (f.status !== undefined && f.status !== 'ended') return 'calls_org_status';
  if (f.outcome !== undefined) return 'calls_org_outcome';
  if (f.source !== undefined) return 'calls_org_source';
  if (f.outbound !== undefined) return 'calls_org_outbound';
  if (f.status !== undefined) return 'calls_org_status';
  return 'calls_org_created';
}

/**
 * A search of 1 or 2 characters (code points, as SQL's length() counts them): no trigram serves
 * it, but call_gram_counts (migration 10) counts the calls holding each such substring.
 */
export const isShortSearch = (s: string | undefined): s is string => s !== undefined && s !== '' && [...s].length <= 2;

/**
 * A 1-2 character search with a character outside [0-9+] (a letter, `#`, `*`): call_short_grams
 * (migration 12) holds its postings, every call of the organization that holds it, in list order.
 * Strings of digits and '+' alone have none (most phone numbers hold them: a page fills at once).
 */
export const hasGramPostings = (s: string | undefined): s is string => isShortSearch(s) && /[^0-9+]/u.test(s);

/**
 * The gram whose counter is the total of this filter: a 1-2 character search and no other filter
 * (with another, the matches of both are counted on the driver's index).
 */
export function gramCounterOf(f: CallListFilter): string | undefined {
  if (!isShortSearch(f.search)) return undefined;
  const other = Boolean(f.agentIds?.length) || Boolean(f.tag) || [f.status, f.source, f.outbound, f.outcome, f.dateFrom, f.dateTo, f.outboundListRunId, f.outboundContactId].some((v) => v !== undefined);
  return other ? undefined : f.search;
}

/** The dimensions of call_counts (migration 3). */
export type CounterDim = 'all' | 'status' | 'source' | 'outbound' | 'outcome' | 'agent';

/**
 * The counters whose sum is the total of this filter, when it filters by nothing or by exactly
 * one of status, source, outbound, outcome or agent_ids (no dates, search or tag).
 */
export function counterOf(f: CallListFilter): { dim: CounterDim; vals: string[] } | undefined {
  if (f.dateFrom !== undefined || f.dateTo !== undefined || f.search || f.tag || f.outboundListRunId !== undefined || f.outboundContactId !== undefined) return undefined;
  const dims: Array<{ dim: CounterDim; vals: string[] }> = [];
  if (f.agentIds?.length) dims.push({ dim: 'agent', vals: [...new Set(f.agentIds)] });
  if (f.status !== undefined) dims.push({ dim: 'status', vals: [f.status] });
  if (f.source !== undefined) dims.push({ dim: 'source', vals: [f.source] });
  if (f.outbound !== undefined) dims.push({ dim: 'outbound', vals: [f.outbound ? '1' : '0'] });
  if (f.outcome !== undefined) dims.push({ dim: 'outcome', vals: [f.outcome] });
  if (dims.length === 0) return { dim: 'all', vals: [''] };
  return dims.length === 1 ? dims[0] : undefined;
}
