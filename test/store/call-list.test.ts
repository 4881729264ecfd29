/**
 * GET /v1/calls in the store, on both backends: any mix of filters returns exactly what filtering
 * every record by hand returns (on SQLite on both ways `search` is served). On SQLite every filter
 * is served by an index (EXPLAIN QUERY PLAN: no full scan of calls, the page read in list order,
 * the total counted on the index alone); on PostgreSQL the search can use the trigram index.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { storeOver, type SqlClient, type Store } from '../../src/store/index.ts';
import { callListSql, callListSqlPostgres, hasGramPostings, likeLiteral, type SearchPlan, type SqlQuery } from '../../src/store/call-list.ts';
import { migrate, openSqliteClient } from '../../src/store/db.ts';
import { MIGRATIONS, type Migration } from '../../src/store/migrations.ts';
import { PostgresClient } from '../../src/store/postgres/client.ts';
import { migratePostgres } from '../../src/store/postgres/migrate.ts';
import { POSTGRES_MIGRATIONS } from '../../src/store/postgres/migrations.ts';
import { SecretBox } from '../../src/store/secret-box.ts';
import { CALL_OUTCOMES, CALL_SOURCES, CALL_STATUSES, failedDialEnd, partyNumber, sourceOf, type CallListFilter, type CallRecord } from '../../src/domain/call.ts';
import { settingsForCreate } from '../../src/domain/agent.ts';
import { agentDefaults } from '../../src/api/routes/agents.ts';
import { loadConfig } from '../../src/config.ts';
import { prng } from '../helpers/prng.ts';
import { gramsOf, postedGramsOf } from '../helpers/short-grams.ts';
import { forEachStoreBackend, openTestStore, testPostgresDatabase, TEST_ENCRYPTION_KEY, type TestStore } from '../helpers/store-backends.ts';
import { insertOrganization } from '../helpers/old-schema.ts';

const uuid = (a: number, b: number) => `${String(a).padStart(8, '0')}-0000-4000-8000-${String(b).padStart(12, '0')}`;
const TAGS = ['vip', 'callback', 'sales', 'x"y'];
const REASONS = ['client_closed', 'agent_hangup', 'transfer', 'timeout', 'silence_timeout', 'error'];

/** The filter applied by hand to every record: the oracle (a plain substring scan for `search`), in list order. */
const listByHand = (records: readonly CallRecord[], org: string, f: CallListFilter): string[] =>
  records
    .filter(
      (r) =>
        r.org_id === org &&
        (!f.agentIds?.length || (r.agent_id !== null && f.agentIds.includes(r.agent_id))) &&
        (f.status === undefined || r.status === f.status) &&
        (f.source === undefined || r.source === f.source) &&
        (f.dateFrom === undefined || r.created_at >= f.dateFrom) &&
        (f.dateTo === undefined || r.created_at <= f.dateTo) &&
        (f.outbound === undefined || (r.direction === 'outbound') === f.outbound) &&
        (!f.search || r.party_number.includes(f.search)) &&
        (!f.tag || r.tags.includes(f.tag)) &&
        (f.outcome === undefined || r.outcome === f.outcome),
    )
    .sort((a, b) => (a.created_at === b.created_at ? (a.id < b.id ? 1 : -1) : a.created_at < b.created_at ? 1 : -1))
    .map((r) => r.id);

forEachStoreBackend((backend) => describe('call list queries', () => {
  let t: TestStore;
  let store: Store;
  const orgs: string[] = [];
  const agents: string[][] = [];
  let records: CallRecord[] = [];

  beforeAll(async () => {
    t = await openTestStore(backend);
    store = t.store;
    const settings = settingsForCreate(agentDefaults(loadConfig({}, {})), {});
    const rand = prng(7);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
    for (let o = 0; o < 3; o++) {
      orgs.push((await store.organizations.createKey(`org-${o}`)).org.id);
      agents.push([]);
      for (let a = 0; a < 4; a++) {
        const id = uuid(o + 1, a + 1);
        await store.agents.insert({ id, org_id: orgs[o]!, name: `a${a}`, status: 'active', phone_number_id: null, settings, created_at: '2026-01-01T00:00:00.000Z' });
        agents[o]!.push(id);
      }
    }
    // One transaction for the 900 calls; every write goes through the transaction's store.
    await store.tx(async (tx) => {
      for (let i = 0; i < 900; i++) {
        const o = i % 7 === 0 ? 1 : i % 11 === 0 ? 2 : 0;
        const direction = pick(['inbound', 'outbound', 'web'] as const);
        // Several calls share a created_at: the list then orders them by id.
        const created = new Date(Date.UTC(2026, 0, 1) + Math.floor(i / 3) * 3_600_000).toISOString();
        const id = uuid(9, i);
        await tx.calls.insert({
          id,
          org_id: orgs[o]!,
          agent_id: pick([...agents[o]!, null]),
          sip_trunk_id: null,
          direction,
          from: direction === 'web' ? pick(['api-client', 'Alice', 'user-42']) : `+1555${String(Math.floor(rand() * 1e7)).padStart(7, '0')}`,
          to: `+1444${String(Math.floor(rand() * 1e7)).padStart(7, '0')}`,
          created_at: created,
        });
        const fate = rand();
        if (fate < 0.1) continue; // started
        if (fate < 0.15 && direction === 'outbound') {
          await tx.calls.end(id, { ended_at: created, ...failedDialEnd(pick(['busy', 'auth_failed', 'no_answer']), 486) });
          continue;
        }
        await tx.calls.markAnswered(id, created);
        if (fate < 0.25) continue; // in progress
        await tx.calls.end(id, { ended_at: created, termination_reason: pick(REASONS) });
        if (rand() < 0.3) await tx.calls.addTags(id, [pick(TAGS), pick(TAGS)]);
      }
    });
    records = [];
    for (const org of orgs) records.push(...(await store.calls.list(org, {}, 10_000, 0)).calls);
  });
  afterAll(() => t?.dispose());

  const byHand = (org: string, f: CallListFilter): string[] => listByHand(records, org, f);

  const listSql = backend === 'postgres' ? callListSqlPostgres : callListSql;
  const run = async (org: string, f: CallListFilter, plan: SearchPlan, limit: number, offset: number) => {
    const q = listSql(org, f, plan, limit, offset);
    return {
      ids: (await store.client.all<{ id: string }>(q.page.sql, q.page.args as string[])).map((r) => r.id),
      total: (await store.client.get<{ n: number }>(q.count.sql, q.count.args as string[]))!.n,
    };
  };
  const plan = (sql: string, args: unknown[]) => (store.sqlite!.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...args) as { detail: string }[]).map((r) => r.detail);

  it('seeded a mix (sanity of the oracle)', () => {
    expect(records.length).toBe(900);
    for (const s of CALL_STATUSES.filter((x) => x !== 'connected')) expect(records.some((r) => r.status === s), s).toBe(true);
    for (const o of CALL_OUTCOMES) expect(records.some((r) => r.outcome === o), o).toBe(true);
    expect(records.some((r) => r.tags.length > 0)).toBe(true);
  });

  const FILTERS: Array<[string, CallListFilter, RegExp]> = [
    ['none', {}, /calls_org_created/],
    ['agent_ids (one)', { agentIds: [uuid(1, 1)] }, /calls_org_agent/],
    ['agent_ids (three)', { agentIds: [uuid(1, 1), uuid(1, 2), uuid(1, 3)] }, /calls_org_agent/],
    ['status', { status: 'in_progress' }, /calls_org_status/],
    ['status ended', { status: 'ended' }, /calls_org_status/],
    ['source', { source: 'api' }, /calls_org_source/],
    ['date range', { dateFrom: '2026-01-03T00:00:00.000Z', dateTo: '2026-01-05T00:00:00.000Z' }, /calls_org_created/],
    ['outbound', { outbound: true }, /calls_org_outbound/],
    ['search (short)', { search: '55' }, /calls_org_created/],
    ['tag', { tag: 'vip' }, /call_tags_org_tag/],
    ['outcome', { outcome: 'ended_by_agent' }, /calls_org_outcome/],
    ['agent + status + outcome + dates', { agentIds: [uuid(1, 1)], status: 'ended', outcome: 'transferred', dateFrom: '2026-01-02T00:00:00.000Z' }, /calls_org_agent/],
    // A search no counter or postings serve, with another filter: counted on that filter's index
    // alone (it carries party_number), not with a lookup of each entry's row.
    ['short digit search + status', { search: '55', status: 'ended' }, /calls_org_status/],
    ['short digit search + agent', { search: '55', agentIds: [uuid(1, 1)] }, /calls_org_agent/],
    ['short digit search + three agents', { search: '5', agentIds: [uuid(1, 1), uuid(1, 2), uuid(1, 3)] }, /calls_org_agent/],
    ['short digit search + source', { search: '55', source: 'api' }, /calls_org_source/],
    ['short digit search + outbound', { search: '55', outbound: false }, /calls_org_outbound/],
    ['short digit search + outcome', { search: '5', outcome: 'ended_by_agent' }, /calls_org_outcome/],
  ];

  it.skipIf(backend !== 'sqlite').each(FILTERS)('%s: served by its index, read in list order, counted on the index', (_name, f, index) => {
    const q = callListSql(orgs[0]!, f, 'scan', 20, 0);
    const page = plan(q.page.sql, q.page.args);
    const count = plan(q.count.sql, q.count.args);
    for (const p of [page, count]) {
      expect(p.join(' | ')).toMatch(index);
      // SEARCH = an index range; a SCAN of calls (or call_tags) is a full table walk.
      expect(p.filter((d) => /^SCAN (c|t|calls|call_tags)\b/.test(d))).toEqual([]);
    }
    expect(page.filter((d) => d.includes('TEMP B-TREE'))).toEqual([]);
    // Read from the oldest end (a page in the older half): in index order too.
    const asc = callListSql(orgs[0]!, f, 'scan', 20, 0, 'asc');
    expect(plan(asc.page.sql, asc.page.args).filter((d) => d.includes('TEMP B-TREE') || /^SCAN (c|t|calls|call_tags)\b/.test(d))).toEqual([]);
    expect(count.join(' | ')).toMatch(/COVERING INDEX/);
    expect(count.filter((d) => /USING INDEX sqlite_autoindex_calls_1|USING PRIMARY KEY/.test(d) && !/COVERING/.test(d))).toEqual([]);
  });

  it.skipIf(backend !== 'sqlite')('search by trigram index: no scan of calls, the matches joined by key', () => {
    const q = callListSql(orgs[0]!, { search: '1555123' }, 'fts', 20, 0);
    for (const p of [plan(q.page.sql, q.page.args), plan(q.count.sql, q.count.args)]) {
      expect(p.join(' | ')).toMatch(/SCAN f VIRTUAL TABLE INDEX \d+:M/);
      expect(p.filter((d) => /^SCAN (c|s|calls)\b/.test(d))).toEqual([]);
    }
  });

  it('each filter alone, every organization: the same calls as by hand, in list order', async () => {
    for (const org of orgs) {
      for (const [name, f] of FILTERS) {
        const want = byHand(org, f);
        const got = await run(org, f, 'scan', 1000, 0);
        expect(got.ids, name).toEqual(want);
        expect(got.total, name).toBe(want.length);
      }
    }
  });

  it('any mix of filters, any page, both search plans: the same calls as by hand', async () => {
    const allAgents = agents.flat();
    const arb = fc.record(
      {
        org: fc.integer({ min: 0, max: 2 }),
        agentIds: fc.uniqueArray(fc.constantFrom(...allAgents), { maxLength: 3 }),
        status: fc.constantFrom(...CALL_STATUSES),
        source: fc.constantFrom(...CALL_SOURCES),
        dateFrom: fc.integer({ min: 0, max: 300 }).map((h) => new Date(Date.UTC(2026, 0, 1) + h * 3_600_000).toISOString()),
        dateTo: fc.integer({ min: 0, max: 300 }).map((h) => new Date(Date.UTC(2026, 0, 1) + h * 3_600_000).toISOString()),
        outbound: fc.boolean(),
        search: fc.constantFrom('555', '15551', '1', '0', 'Alice', 'ali', 'user-', '"', '444', '+1555'),
        tag: fc.constantFrom(...TAGS, 'none'),
        outcome: fc.constantFrom(...CALL_OUTCOMES),
      },
      { requiredKeys: ['org'] },
    );
    await fc.assert(
      fc.asyncProperty(arb, fc.integer({ min: 1, max: 30 }), fc.integer({ min: 0, max: 5 }), fc.constantFrom<SearchPlan>('fts', 'scan'), async (g, limit, pageNo, searchPlan) => {
        const { org, ...f } = g;
        const filter: CallListFilter = { ...f, agentIds: f.agentIds?.length ? f.agentIds : undefined };
        // The trigram index needs three characters: shorter strings always scan.
        const planned: SearchPlan = filter.search && [...filter.search].length >= 3 ? searchPlan : 'scan';
        const want = byHand(orgs[org]!, filter);
        const got = await run(orgs[org]!, filter, planned, limit, pageNo * limit);
        expect(got.total).toBe(want.length);
        expect(got.ids).toEqual(want.slice(pageNo * limit, pageNo * limit + limit));
      }),
      { numRuns: 400 },
    );
  });

  it('CallRepo.list (counters for the totals, older pages read from the oldest end): any filter, any page, as by hand', async () => {
    const allAgents = agents.flat();
    const arb = fc.record(
      {
        agentIds: fc.uniqueArray(fc.constantFrom(...allAgents), { minLength: 1, maxLength: 3 }),
        status: fc.constantFrom(...CALL_STATUSES),
        source: fc.constantFrom(...CALL_SOURCES),
        dateFrom: fc.integer({ min: 0, max: 300 }).map((h) => new Date(Date.UTC(2026, 0, 1) + h * 3_600_000).toISOString()),
        outbound: fc.boolean(),
        search: fc.constantFrom('555', '1', 'user-'),
        tag: fc.constantFrom(...TAGS),
        outcome: fc.constantFrom(...CALL_OUTCOMES),
      },
      { requiredKeys: [] },
    );
    // Half the runs filter by one parameter alone (the totals then come from the counters).
    const single = fc.tuple(arb, fc.nat()).map(([f, k]) => {
      const keys = Object.keys(f) as Array<keyof typeof f>;
      return keys.length ? { [keys[k % keys.length]!]: f[keys[k % keys.length]!] } : {};
    });
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 2 }), fc.oneof(arb, single), fc.integer({ min: 1, max: 25 }), fc.integer({ min: 0, max: 40 }), async (o, f, limit, pageNo) => {
        const want = byHand(orgs[o]!, f);
        const got = await store.calls.list(orgs[o]!, f, limit, pageNo * limit);
        expect(got.total).toBe(want.length);
        expect(got.calls.map((c) => c.id)).toEqual(want.slice(pageNo * limit, pageNo * limit + limit));
      }),
      { numRuns: 300 },
    );
  });

  it('the counters equal a count after every kind of write, an agent deleted included', async () => {
    const counts = () => store.client.all("SELECT org_id, dim, val, n FROM call_counts WHERE n <> 0 ORDER BY 1, 2, 3");
    const byGroup = () =>
      store.client.all(
          `SELECT org_id, dim, val, n FROM (
             SELECT org_id, 'all' AS dim, '' AS val, count(*) AS n FROM calls GROUP BY org_id
             UNION ALL SELECT org_id, 'status', status, count(*) FROM calls GROUP BY 1, 3
             UNION ALL SELECT org_id, 'source', source, count(*) FROM calls GROUP BY 1, 3
             UNION ALL SELECT org_id, 'outbound', CAST(outbound AS TEXT), count(*) FROM calls GROUP BY 1, 3
             UNION ALL SELECT org_id, 'outcome', coalesce(outcome, ''), count(*) FROM calls GROUP BY 1, 3
             UNION ALL SELECT org_id, 'agent', coalesce(agent_id, ''), count(*) FROM calls GROUP BY 1, 3) g
           ORDER BY 1, 2, 3`,
        );
    expect(await counts()).toEqual(await byGroup());
    // A new call, answered, ended; its agent deleted (ON DELETE SET NULL is an update).
    const settings = settingsForCreate(agentDefaults(loadConfig({}, {})), {});
    const agent = uuid(7, 7);
    await store.agents.insert({ id: agent, org_id: orgs[2]!, name: 'gone', status: 'active', phone_number_id: null, settings, created_at: '2026-01-01T00:00:00.000Z' });
    const id = uuid(8, 1);
    await store.calls.insert({ id, org_id: orgs[2]!, agent_id: agent, sip_trunk_id: null, direction: 'outbound', from: 'a', to: '+15550000000', created_at: '2026-03-01T00:00:00.000Z' });
    expect(await counts()).toEqual(await byGroup());
    await store.calls.markAnswered(id, '2026-03-01T00:00:01.000Z');
    await store.calls.end(id, { ended_at: '2026-03-01T00:01:00.000Z', termination_reason: 'transfer' });
    expect(await counts()).toEqual(await byGroup());
    expect((await store.calls.list(orgs[2]!, { agentIds: [agent] }, 20, 0)).total).toBe(1);
    await store.agents.delete(orgs[2]!, agent);
    expect(await counts()).toEqual(await byGroup());
    expect((await store.calls.list(orgs[2]!, { agentIds: [agent] }, 20, 0)).total).toBe(0);
    expect((await store.calls.get(orgs[2]!, id))!.agent_id).toBeNull();
    records = [];
    for (const org of orgs) records.push(...(await store.calls.list(org, {}, 10_000, 0)).calls);
  });

  /** Per organization and 1-2 character substring, how many calls hold it: counted in JS, the oracle. */
  const gramsByHand = async (): Promise<string[]> => {
    const n = new Map<string, number>();
    for (const c of await store.client.all<{ org_id: string; party_number: string }>('SELECT org_id, party_number FROM calls')) {
      for (const g of gramsOf(c.party_number)) n.set(`${c.org_id} ${g}`, (n.get(`${c.org_id} ${g}`) ?? 0) + 1);
    }
    return [...n].map(([k, v]) => `${k}: ${v}`).sort();
  };
  const gramCounters = async (): Promise<string[]> =>
    (await store.client.all<{ org_id: string; gram: string; n: number }>('SELECT org_id, gram, n FROM call_gram_counts WHERE n <> 0')).map((r) => `${r.org_id} ${r.gram}: ${r.n}`).sort();

  it('the 1-2 character counters equal a count by hand after inserts, deletes and party_number updates, per organization', async () => {
    expect(await gramCounters()).toEqual(await gramsByHand());
    expect((await gramCounters()).length).toBeGreaterThan(100);
    const other = await gramCounters().then((c) => c.filter((x) => !x.startsWith(orgs[0]!)));
    // Repeated characters (counted once per call), two-byte and four-byte characters, 1 and 0 characters.
    const odd = ['+15555555555', 'héé', '😀a😀', 'x', '', 'ab#ab'];
    for (const [k, party] of odd.entries()) {
      await store.calls.insert({ id: uuid(8, 100 + k), org_id: orgs[0]!, agent_id: null, sip_trunk_id: null, direction: 'web', from: party, to: 'agent', created_at: '2026-03-02T00:00:00.000Z' });
    }
    expect(await gramCounters()).toEqual(await gramsByHand());
    // Another organization's counters did not move.
    expect(await gramCounters().then((c) => c.filter((x) => !x.startsWith(orgs[0]!)))).toEqual(other);
    await store.client.run('UPDATE calls SET party_number = ? WHERE id = ?', ['#a#', uuid(8, 100)]);
    await store.client.run('UPDATE calls SET party_number = party_number WHERE id = ?', [uuid(8, 101)]);
    await store.client.run("UPDATE calls SET summary = 'no gram moves' WHERE id = ?", [uuid(8, 102)]);
    expect(await gramCounters()).toEqual(await gramsByHand());
    await store.client.run('DELETE FROM calls WHERE id IN (?, ?)', [uuid(8, 104), uuid(8, 105)]);
    expect(await gramCounters()).toEqual(await gramsByHand());
    const c = await gramCounters();
    expect(c).toContain(`${orgs[0]} #: 1`);
    expect(c).toContain(`${orgs[0]} 😀a: 1`);
    expect(c.some((x) => x.startsWith(`${orgs[0]} ab`))).toBe(false);
    records = [];
    for (const org of orgs) records.push(...(await store.calls.list(org, {}, 10_000, 0)).calls);
  });

  it('CallRepo.list, a 1-2 character search alone: the total from its counter, 0 answered without a scan; with other filters counted', async () => {
    const org = orgs[0]!;
    for (const search of ['5', '55', '1', '+1', '#', 'é', '😀', '😀a', 'u', 'us', 'x', 'q', 'zz']) {
      const want = byHand(org, { search });
      for (const [limit, offset] of [[20, 0], [7, 14], [5, want.length - 3]] as const) {
        const got = await store.calls.list(org, { search }, limit, Math.max(0, offset));
        expect(got.total, search).toBe(want.length);
        expect(got.calls.map((r) => r.id), search).toEqual(want.slice(Math.max(0, offset), Math.max(0, offset) + limit));
      }
    }
    // The total is the counter's (a wrong counter shows through), and a counter of 0 answers
    // empty before any page is read, with another filter too.
    const n = byHand(org, { search: '55' }).length;
    await store.client.run("UPDATE call_gram_counts SET n = n + 5 WHERE org_id = ? AND gram = '55'", [org]);
    expect((await store.calls.list(org, { search: '55' }, 20, 0)).total).toBe(n + 5);
    expect((await store.calls.list(org, { search: '55', status: 'ended' }, 20, 0)).total).toBe(byHand(org, { search: '55', status: 'ended' }).length);
    await store.client.run("UPDATE call_gram_counts SET n = 0 WHERE org_id = ? AND gram = '55'", [org]);
    expect(await store.calls.list(org, { search: '55' }, 20, 0)).toEqual({ calls: [], total: 0 });
    expect(await store.calls.list(org, { search: '55', outbound: true }, 20, 0)).toEqual({ calls: [], total: 0 });
    await store.client.run("UPDATE call_gram_counts SET n = ? WHERE org_id = ? AND gram = '55'", [n, org]);
    expect(await gramCounters()).toEqual(await gramsByHand());
  });

  it('CallRepo.list: the counter for the unfiltered total, pages past the end empty', async () => {
    const org = orgs[0]!;
    const n = records.filter((r) => r.org_id === org).length;
    expect(await store.calls.orgTotal(org)).toBe(n);
    expect((await store.calls.list(org, {}, 20, 0)).total).toBe(n);
    expect((await store.calls.list(org, {}, 20, n)).calls).toEqual([]);
    expect((await store.calls.list(org, {}, 20, n - 1)).calls.map((c) => c.id)).toEqual(byHand(org, {}).slice(n - 1));
    expect(await store.calls.list(org, { search: 'nowhere' }, 20, 0)).toEqual({ calls: [], total: 0 });
  });

  it.skipIf(backend !== 'sqlite')('CallRepo.searchPlan: the trigram index only when the match is selective', async () => {
    const org = orgs[0]!;
    const one = records.find((r) => r.org_id === org && r.party_number.startsWith('+1555'))!;
    expect(await store.calls.searchPlan(org, one.party_number)).toBe('fts');
    expect(await store.calls.searchPlan(org, '+1555')).toBe('scan');
    expect(await store.calls.searchPlan(org, '55')).toBe('scan');
    expect((await store.calls.list(org, { search: one.party_number }, 20, 0)).calls.map((c) => c.id)).toEqual(byHand(org, { search: one.party_number }));
  });

  it.skipIf(backend !== 'postgres')('PostgreSQL: the search is a literal substring (% _ \\ too) and can use the trigram index', async () => {
    expect(likeLiteral('50%_a\\b')).toBe('50\\%\\_a\\\\b');
    const org = orgs[0]!;
    const one = records.find((r) => r.org_id === org && r.party_number.startsWith('+1555'))!;
    const q = callListSqlPostgres(org, { search: one.party_number }, 'scan', 20, 0);
    const searchPred = /c\.party_number LIKE \? ESCAPE '\\'/.exec(q.count.sql)![0];
    const plan = await store.tx(async (tx) => {
      // The table is small (the planner would rather read the organization's rows): with the
      // other paths forbidden, the plan shows the search predicate as written is indexable.
      await tx.client.exec('SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off');
      return (await tx.client.all<{ 'QUERY PLAN': string }>(`EXPLAIN SELECT count(*) FROM calls c WHERE ${searchPred}`, [`%${likeLiteral(one.party_number)}%`])).map((r) => r['QUERY PLAN']).join('\n');
    });
    expect(plan).toMatch(/calls_party_number_trgm/);
    for (const search of ['%', '_', '\\', '5%5', '1_5']) {
      expect((await store.calls.list(org, { search }, 1000, 0)).calls.map((c) => c.id), search).toEqual(byHand(org, { search }));
    }
  });
}));

/**
 * A 1-2 character search with a character outside [0-9+] (a letter, `#`, `*`, a multi-byte code
 * point): read from its postings (call_short_grams, migration 12), in list order, alone or with
 * other filters; the same calls as a plain substring scan, case-sensitive, by code points.
 */
forEachStoreBackend((backend) => describe('rare 1-2 character search: the postings of call_short_grams', () => {
  let t: TestStore;
  let store: Store;
  const orgs: string[] = [];
  const agents: string[] = [];
  let records: CallRecord[] = [];
  // Digits weigh most, as in phone numbers; then signs, both cases of letters, 2- and 4-byte code points.
  const ALPHABET = ['0', '1', '2', '3', '5', '7', '9', '+', 'a', 'A', 'b', 'x', '#', '*', '-', 'é', 'ß', '😀'];
  const TAG = 'vip';

  const readRecords = async () => {
    records = [];
    for (const org of orgs) records.push(...(await store.calls.list(org, {}, 10_000, 0)).calls);
  };

  beforeAll(async () => {
    t = await openTestStore(backend);
    store = t.store;
    const settings = settingsForCreate(agentDefaults(loadConfig({}, {})), {});
    for (let o = 0; o < 2; o++) orgs.push((await store.organizations.createKey(`grams-${o}`)).org.id);
    for (let a = 0; a < 2; a++) {
      agents.push(uuid(5, a));
      await store.agents.insert({ id: agents[a]!, org_id: orgs[0]!, name: `g${a}`, status: 'active', phone_number_id: null, settings, created_at: '2026-01-01T00:00:00.000Z' });
    }
    const rand = prng(12);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)] as T;
    await store.tx(async (tx) => {
      for (let i = 0; i < 600; i++) {
        // Half the numbers E.164 (no postings), the rest drawn from the alphabet, 0-12 code points.
        const party = rand() < 0.5 ? `+1555${String(Math.floor(rand() * 1e7)).padStart(7, '0')}` : Array.from({ length: Math.floor(rand() * 13) }, () => (rand() < 0.5 ? pick(['1', '2', '5']) : pick(ALPHABET))).join('');
        const id = uuid(6, i);
        const created = new Date(Date.UTC(2026, 0, 1) + Math.floor(i / 3) * 3_600_000).toISOString();
        await tx.calls.insert({ id, org_id: orgs[i % 5 === 0 ? 1 : 0]!, agent_id: i % 5 === 0 ? null : pick([...agents, null]), sip_trunk_id: null, direction: 'web', from: party, to: 'agent', created_at: created });
        if (rand() < 0.6) {
          await tx.calls.markAnswered(id, created);
          if (rand() < 0.7) await tx.calls.end(id, { ended_at: created, termination_reason: pick(REASONS) });
        }
        if (rand() < 0.2) await tx.calls.addTags(id, [TAG]);
      }
    });
    await readRecords();
  });
  afterAll(() => t?.dispose());

  const byHand = (org: string, f: CallListFilter): string[] => listByHand(records, org, f);

  /** Every posting, and every posting there should be (the grams with a character outside [0-9+] of every call). */
  const postings = async () => (await store.client.all<{ org_id: string; gram: string; created_at: string; call_id: string }>('SELECT org_id, gram, created_at, call_id FROM call_short_grams')).map((r) => `${r.org_id} ${r.gram} ${r.created_at} ${r.call_id}`).sort();
  const postingsByHand = async () =>
    (await store.client.all<{ org_id: string; party_number: string; created_at: string; id: string }>('SELECT org_id, party_number, created_at, id FROM calls'))
      .flatMap((c) => postedGramsOf(c.party_number).map((g) => `${c.org_id} ${g} ${c.created_at} ${c.id}`))
      .sort();

  const listSql = backend === 'postgres' ? callListSqlPostgres : callListSql;
  const run = async (org: string, f: CallListFilter, plan: SearchPlan, limit: number, offset: number, order: 'asc' | 'desc' = 'desc') => {
    const q = listSql(org, f, plan, limit, offset, order);
    return {
      ids: (await store.client.all<{ id: string }>(q.page.sql, q.page.args as string[])).map((r) => r.id),
      total: (await store.client.get<{ n: number }>(q.count.sql, q.count.args as string[]))!.n,
    };
  };

  it('seeded: letters, signs and multi-byte code points, numbers with no postings, tags, statuses', async () => {
    expect(records.length).toBe(600);
    expect(records.filter((r) => /^\+[0-9]+$/.test(r.party_number)).length).toBeGreaterThan(200);
    for (const ch of ['#', '*', 'a', 'A', 'é', '😀']) expect(records.filter((r) => r.party_number.includes(ch)).length, ch).toBeGreaterThan(10);
    expect(records.some((r) => r.tags.includes(TAG))).toBe(true);
    expect(await postings()).toEqual(await postingsByHand());
    expect((await postings()).length).toBeGreaterThan(1000);
  });

  it('which strings have postings: a 1-2 character string with a character outside [0-9+]', async () => {
    for (const s of ['#', 'a', 'A', '*', 'é', '😀', 'gu', '#1', '1a', '+a', '😀a']) {
      expect(hasGramPostings(s), s).toBe(true);
      expect(await store.calls.searchPlan(orgs[0]!, s), s).toBe('grams');
    }
    for (const s of ['1', '12', '+', '+1', '7', '', 'abc', '#12', undefined]) expect(hasGramPostings(s), String(s)).toBe(false);
    expect(await store.calls.searchPlan(orgs[0]!, '12')).toBe('scan');
  });

  const PLANNED: Array<[string, CallListFilter]> = [
    ['alone', { search: '#' }],
    ['two characters', { search: 'é#' }],
    ['a date range', { search: 'a', dateFrom: '2026-01-03T00:00:00.000Z', dateTo: '2026-01-09T00:00:00.000Z' }],
    ['a status', { search: '#', status: 'ended' }],
    ['agents, a tag and dates', { search: '😀', agentIds: agents, tag: TAG, dateFrom: '2026-01-02T00:00:00.000Z' }],
  ];

  it.skipIf(backend !== 'sqlite').each(PLANNED)('SQLite, %s: the postings read in list order (both ends), calls only joined by key, counted on them', (_name, f) => {
    const explain = (q: SqlQuery) => (store.sqlite!.prepare(`EXPLAIN QUERY PLAN ${q.sql}`).all(...(q.args as string[])) as { detail: string }[]).map((r) => r.detail);
    for (const order of ['desc', 'asc'] as const) {
      const q = callListSql(orgs[0]!, f, 'grams', 20, 0, order);
      for (const p of [explain(q.page), explain(q.count)]) {
        expect(p[0]).toMatch(/^SEARCH t USING PRIMARY KEY \(org_id=\? AND gram=\?/);
        expect(p.join(' | ')).not.toMatch(/\bSCAN\b|TEMP B-TREE|calls_org_created/);
        // The other filters: calls read by its key, one row per posting.
        for (const d of p.slice(1)) expect(d).toMatch(/^SEARCH c USING INDEX sqlite_autoindex_calls_1 \(id=\?\)$|^CORRELATED SCALAR SUBQUERY|^SEARCH tt (EXISTS )?USING PRIMARY KEY \(call_id=\? AND tag=\?\)$/);
      }
    }
  });

  it.skipIf(backend !== 'postgres').each(PLANNED)('PostgreSQL, %s: the postings read in list order from their index, calls joined by key', async (_name, f) => {
    const q = callListSqlPostgres(orgs[0]!, f, 'grams', 20, 0);
    for (const sq of [q.page, q.count]) {
      const plan = await store.tx(async (tx) => {
        // The tables are small (the planner would rather read them whole): with sequential scans
        // forbidden, the plan shows the statement as written is served by the postings' index.
        await tx.client.exec('SET LOCAL enable_seqscan = off');
        return (await tx.client.all<{ 'QUERY PLAN': string }>(`EXPLAIN ${sq.sql}`, sq.args as string[])).map((r) => r['QUERY PLAN']).join('\n');
      });
      expect(plan).toMatch(/Index (Only )?Scan (Backward )?using call_short_grams_pkey on call_short_grams t/);
      expect(plan).not.toMatch(/calls_org_created|Seq Scan/);
      // Filters other than the date range are checked on calls, read by its key.
      if (Object.keys(f).some((k) => !['search', 'dateFrom', 'dateTo'].includes(k))) expect(plan).toMatch(/calls_pkey on calls c/);
    }
    // And the statement is the same as SQLite's: the postings drive, on both.
    expect(q.page.sql).toMatch(/^SELECT t\.call_id AS id FROM call_short_grams t/);
  });

  it('the postings against a plain substring scan: any string of 1-2 characters, any filters, any page, both ends', async () => {
    const arb = fc.record(
      {
        org: fc.integer({ min: 0, max: 1 }),
        first: fc.constantFrom(...ALPHABET, 'q'),
        second: fc.option(fc.constantFrom(...ALPHABET, 'Z'), { nil: undefined }),
        agentIds: fc.uniqueArray(fc.constantFrom(...agents), { minLength: 1, maxLength: 2 }),
        status: fc.constantFrom<CallListFilter['status']>('started', 'in_progress', 'ended'),
        dateFrom: fc.integer({ min: 0, max: 200 }).map((h) => new Date(Date.UTC(2026, 0, 1) + h * 3_600_000).toISOString()),
        dateTo: fc.integer({ min: 0, max: 200 }).map((h) => new Date(Date.UTC(2026, 0, 1) + h * 3_600_000).toISOString()),
        tag: fc.constant(TAG),
      },
      { requiredKeys: ['org', 'first'] },
    );
    await fc.assert(
      fc.asyncProperty(arb, fc.integer({ min: 1, max: 25 }), fc.integer({ min: 0, max: 6 }), async ({ org, first, second, ...rest }, limit, pageNo) => {
        const f: CallListFilter = { ...rest, search: first + (second ?? '') };
        const want = byHand(orgs[org]!, f);
        const offset = pageNo * limit;
        const page = want.slice(offset, offset + limit);
        // The repository: the plan it picks (postings or not), the total, the nearer end.
        const got = await store.calls.list(orgs[org]!, f, limit, offset);
        expect(got.total).toBe(want.length);
        expect(got.calls.map((c) => c.id)).toEqual(page);
        if (!hasGramPostings(f.search)) return;
        // The statements themselves, from both ends, against the plain scan's.
        const scan = await run(orgs[org]!, f, 'scan', limit, offset);
        expect(scan).toEqual({ ids: page, total: want.length });
        expect(await run(orgs[org]!, f, 'grams', limit, offset)).toEqual(scan);
        const asc = await run(orgs[org]!, f, 'grams', limit, offset, 'asc');
        expect(asc.ids).toEqual([...want].reverse().slice(offset, offset + limit));
      }),
      { numRuns: 400 },
    );
  });

  it('the postings follow an insert, a delete and a change of party_number (and of created_at)', async () => {
    const org = orgs[0]!;
    const id = uuid(6, 900);
    const other = await postings().then((p) => p.filter((x) => !x.endsWith(id)));
    await store.calls.insert({ id, org_id: org, agent_id: null, sip_trunk_id: null, direction: 'web', from: 'guest#12', to: 'agent', created_at: '2026-02-01T00:00:00.000Z' });
    const of = async () => (await postings()).filter((x) => x.endsWith(id)).map((x) => x.split(' ')[1]).sort();
    expect(await of()).toEqual(['#', '#1', 'e', 'es', 'g', 'gu', 's', 'st', 't', 't#', 'u', 'ue']);
    expect((await store.calls.list(org, { search: '#1' }, 1, 0)).calls.map((c) => c.id)).toEqual([id]);
    await store.client.run('UPDATE calls SET party_number = ? WHERE id = ?', ['Ab😀', id]);
    expect(await of()).toEqual(['A', 'Ab', 'b', 'b😀', '😀']);
    expect((await store.calls.list(org, { search: 'gu' }, 20, 0)).calls.map((c) => c.id)).not.toContain(id);
    await store.client.run('UPDATE calls SET created_at = ? WHERE id = ?', ['2026-02-02T00:00:00.000Z', id]);
    expect(await postings()).toEqual(await postingsByHand());
    // A number of digits and '+' alone posts nothing; a column no posting holds moves nothing.
    await store.client.run('UPDATE calls SET party_number = ? WHERE id = ?', ['+15550001111', id]);
    expect(await of()).toEqual([]);
    await store.client.run('UPDATE calls SET party_number = ? WHERE id = ?', ['x*', id]);
    await store.client.run("UPDATE calls SET summary = 'no posting moves' WHERE id = ?", [id]);
    expect(await of()).toEqual(['*', 'x', 'x*']);
    await store.client.run('DELETE FROM calls WHERE id = ?', [id]);
    expect(await of()).toEqual([]);
    expect(await postings()).toEqual(other);
    expect(await postings()).toEqual(await postingsByHand());
    await readRecords();
  });
}));

/**
 * Migration 12 on a database that held calls before it: their postings are filled, and the list
 * reads them (both backends; SQLite through the daemon's migrate(), PostgreSQL through
 * migratePostgres()).
 */
forEachStoreBackend((backend) => describe('migration 12: the postings of the calls stored before it', () => {
  it('fills call_short_grams for every call, per organization, and the list serves a rare string from them', async () => {
    const before = (ms: Migration[]) => ms.filter((m) => m.version < 12);
    const dir = mkdtempSync(join(tmpdir(), 'callbridge-grams-migration-'));
    let client: SqlClient;
    let migrateAll: () => Promise<unknown>;
    if (backend === 'sqlite') {
      const sqlite = await openSqliteClient(dir, before(MIGRATIONS));
      client = sqlite;
      migrateAll = () => migrate(sqlite, MIGRATIONS);
    } else {
      const pgClient = new PostgresClient({ url: (await testPostgresDatabase('short_grams_migration')).url, poolSize: 2 });
      await migratePostgres(pgClient, before(POSTGRES_MIGRATIONS));
      client = pgClient;
      migrateAll = () => migratePostgres(pgClient, POSTGRES_MIGRATIONS);
    }
    try {
      const orgs = [await insertOrganization(client, 'm0'), await insertOrganization(client, 'm1')];
      const rand = prng(11);
      const parties = ['+15550001111', 'guest#1', 'guest#2', 'Ab*', 'é😀', '', 'x', '+1#', 'user-42'];
      const calls: Array<{ id: string; org_id: string; party: string; created_at: string }> = [];
      for (let i = 0; i < 60; i++) {
        const c = { id: uuid(4, i), org_id: orgs[i % 3 === 0 ? 1 : 0]!, party: parties[Math.floor(rand() * parties.length)]!, created_at: new Date(Date.UTC(2026, 0, 1) + i * 60_000).toISOString() };
        calls.push(c);
        // The row as CallRepo.insert wrote it then: today's insert also reads the webhook
        // endpoints (migration 16), which a schema before 12 has not.
        await client.run(
          `INSERT INTO calls (id, org_id, agent_id, sip_trunk_id, direction, source, outbound, status, from_number, to_number, party_number, created_at, transcript)
           VALUES (?, ?, NULL, NULL, 'web', ?, 0, 'started', ?, 'agent', ?, ?, '{"entries":[]}')`,
          [c.id, c.org_id, sourceOf('web'), c.party, partyNumber('web', c.party, 'agent'), c.created_at],
        );
      }
      await migrateAll();
      const got = (await client.all<{ org_id: string; gram: string; created_at: string; call_id: string }>('SELECT org_id, gram, created_at, call_id FROM call_short_grams')).map((r) => `${r.org_id} ${r.gram} ${r.created_at} ${r.call_id}`).sort();
      expect(got).toEqual(calls.flatMap((c) => postedGramsOf(c.party).map((g) => `${c.org_id} ${g} ${c.created_at} ${c.id}`)).sort());
      expect(got.length).toBeGreaterThan(100);
      const store = storeOver(client, new SecretBox(Buffer.from(TEST_ENCRYPTION_KEY, 'base64')));
      for (const search of ['#', 'gu', '😀', 'A', '#1', 'q']) {
        const want = calls.filter((c) => c.org_id === orgs[0] && c.party.includes(search)).sort((a, b) => (a.created_at < b.created_at ? 1 : -1)).map((c) => c.id);
        const page = await store.calls.list(orgs[0]!, { search }, 5, 0);
        expect(page.total, search).toBe(want.length);
        expect(page.calls.map((c) => c.id), search).toEqual(want.slice(0, 5));
      }
    } finally {
      await client.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}));
