/**
 * GET /v1/calls in the store, on both backends: any mix of filters returns exactly what filtering
 * every record by hand returns (on SQLite on both ways `search` is served). On SQLite every filter
 * is served by an index (EXPLAIN QUERY PLAN: no full scan of calls, the page read in list order,
 * the total counted on the index alone); on PostgreSQL the search can use the trigram index.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import type { Store } from '../../src/store/index.ts';
import { callListSql, callListSqlPostgres, likeLiteral, type SearchPlan } from '../../src/store/call-list.ts';
import { CALL_OUTCOMES, CALL_SOURCES, CALL_STATUSES, failedDialEnd, type CallListFilter, type CallRecord } from '../../src/domain/call.ts';
import { settingsForCreate } from '../../src/domain/agent.ts';
import { agentDefaults } from '../../src/api/routes/agents.ts';
import { loadConfig } from '../../src/config.ts';
import { prng } from '../helpers/prng.ts';
import { forEachStoreBackend, openTestStore, type TestStore } from '../helpers/store-backends.ts';

const uuid = (a: number, b: number) => `${String(a).padStart(8, '0')}-0000-4000-8000-${String(b).padStart(12, '0')}`;
const TAGS = ['vip', 'callback', 'sales', 'x"y'];
const REASONS = ['client_closed', 'agent_hangup', 'transfer', 'timeout', 'silence_timeout', 'error'];

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

  /** The filter applied by hand to every record: the oracle. */
  const byHand = (org: string, f: CallListFilter): string[] =>
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
      const cps = [...c.party_number];
      const grams = new Set(cps.flatMap((ch, i) => (i + 1 < cps.length ? [ch, ch + cps[i + 1]!] : [ch])));
      for (const g of grams) n.set(`${c.org_id} ${g}`, (n.get(`${c.org_id} ${g}`) ?? 0) + 1);
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
