/**
 * PostgreSQL's migrations (src/store/postgres/migrations.ts) against SQLite's
 * (src/store/migrations.ts): both applied to real databases (an in-memory SQLite, a PostgreSQL
 * started by the test), then compared table by table (test/helpers/schema-shape.ts). Also: the
 * migration lock, the call counters kept by triggers, the trigram search.
 *
 * The SQLite side runs the migrations' SQL itself, not src/store/db.ts's migrate(), so this test
 * holds the two migration lists to each other whatever the code that applies them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Database } from '../../src/store/sqlite-driver.ts';
import { MIGRATIONS, type Migration } from '../../src/store/migrations.ts';
import type { SqlValue } from '../../src/store/sql-client.ts';
import { PostgresClient } from '../../src/store/postgres/client.ts';
import { MIGRATION_LOCK_KEY, migratePostgres } from '../../src/store/postgres/migrate.ts';
import { POSTGRES_MIGRATIONS } from '../../src/store/postgres/migrations.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { postgresShape, schemaDifferences, sqliteShape, type Ignore } from '../helpers/schema-shape.ts';
import { CALL_COUNTS_RECOUNT } from '../helpers/call-counts.ts';
import { gramsOf, postedGramsOf } from '../helpers/short-grams.ts';

/** What each dialect has on purpose and the other has not (docs/store-postgres.md). */
const SQLITE_ONLY: Ignore = {
  // the FTS5 search index and its shadow tables, and the triggers that fill it
  tables: (name) => name.startsWith('call_search') || name === 'schema_migrations',
  triggers: ['calls_search_ai', 'calls_search_au'],
};
const POSTGRES_ONLY: Ignore = {
  tables: (name) => name === 'schema_migrations',
  indexes: ['calls_party_number_trgm'],
};

function sqliteWith(migrations: Migration[]): Database {
  const db = new Database(':memory:');
  db.pragma('foreign_keys = ON');
  for (const m of [...migrations].sort((a, b) => a.version - b.version)) db.transaction(() => db.exec(m.sql))();
  return db;
}

it('PostgreSQL has the same migrations as SQLite, by version and name', () => {
  expect(POSTGRES_MIGRATIONS.map((m) => [m.version, m.name])).toEqual(MIGRATIONS.map((m) => [m.version, m.name]));
});

const pgAvailable = postgresAvailability();

describe.skipIf(pgAvailable.skip)(`PostgreSQL schema against SQLite's${pgAvailable.skip ? `: skipped, ${pgAvailable.reason}` : ''}`, () => {
  let server: PostgresServer;
  const clients: PostgresClient[] = [];
  const sqlites: Database[] = [];

  /** A new database migrated with `migrations`, and a client of it. */
  async function postgresWith(name: string, migrations: Migration[] = POSTGRES_MIGRATIONS): Promise<PostgresClient> {
    const client = open(await server.createDatabase(name));
    await migratePostgres(client, migrations);
    return client;
  }
  function open(url: string): PostgresClient {
    const client = new PostgresClient({ url, poolSize: 3 });
    clients.push(client);
    return client;
  }
  function sqlite(migrations: Migration[] = MIGRATIONS): Database {
    const db = sqliteWith(migrations);
    sqlites.push(db);
    return db;
  }

  beforeAll(async () => {
    server = await startPostgres();
  });

  afterAll(async () => {
    for (const db of sqlites) db.close();
    await Promise.all(clients.map((c) => c.close()));
    await server?.stop();
  });

  describe('the same schema', () => {
    let reference: ReturnType<typeof sqliteShape>;
    let migrated: PostgresClient;
    beforeAll(async () => {
      reference = sqliteShape(sqlite(), SQLITE_ONLY);
      migrated = await postgresWith('schema_same');
    });

    it('has the same tables, columns, nullability, defaults, keys, foreign keys, indexes and triggers', async () => {
      const shape = await postgresShape(migrated, POSTGRES_ONLY);
      // Not vacuous: the introspection found the tables and their parts.
      expect(Object.keys(shape)).toEqual(expect.arrayContaining(['calls', 'call_counts', 'call_tags', 'sip_trunks', 'sip_registrations', 'sessions']));
      expect(shape.calls!.columns).toContain("source text not null default 'sip'");
      expect(shape.calls!.foreignKeys).toContain('(agent_id) -> agents (id) on delete set null');
      expect(shape.calls!.triggers).toEqual(['calls_count_ad', 'calls_count_ai', 'calls_count_au', 'calls_grams_ad', 'calls_grams_ai', 'calls_grams_au', 'calls_short_grams_ad', 'calls_short_grams_ai', 'calls_short_grams_au']);
      expect(shape.agents!.keys).toContain('unique (phone_number_id) where phone_number_id is not null');
      expect(schemaDifferences(reference, shape)).toEqual([]);
    });

    it('fails when one dialect adds a column, changes a nullability or adds a key the other has not', async () => {
      // The version after the newest, so the test keeps working as migrations are added.
      const next = Math.max(...POSTGRES_MIGRATIONS.map((m) => m.version)) + 1;
      const extra: Migration = {
        version: next,
        name: 'only on PostgreSQL',
        sql: `ALTER TABLE calls ADD COLUMN only_here TEXT;
              ALTER TABLE sessions ALTER COLUMN chat_id SET NOT NULL;
              CREATE UNIQUE INDEX agents_name ON agents (org_id, name);`,
      };
      const shape = await postgresShape(await postgresWith('schema_extra', [...POSTGRES_MIGRATIONS, extra]), POSTGRES_ONLY);
      expect(schemaDifferences(reference, shape)).toEqual([
        'agents keys: unique (org_id, name): only in postgres',
        'agents indexes: unique agents_name (org_id, name): only in postgres',
        'calls.only_here text: only in postgres',
        'sessions.chat_id text: only in sqlite',
        'sessions.chat_id text not null: only in postgres',
      ]);
      const sqliteExtra = sqliteShape(sqlite([...MIGRATIONS, { version: next, name: 'only on SQLite', sql: 'ALTER TABLE sip_trunks ADD COLUMN only_there INTEGER' }]), SQLITE_ONLY);
      expect(schemaDifferences(sqliteExtra, await postgresShape(migrated, POSTGRES_ONLY))).toEqual(['sip_trunks.only_there integer: only in sqlite']);
    });
  });

  describe('migratePostgres', () => {
    const versions = MIGRATIONS.map((m) => m.version);

    it('two nodes starting together: both succeed, one migrates, each migration is recorded once', async () => {
      const url = await server.createDatabase('concurrent');
      const [a, b] = [open(url), open(url)];
      const results = await Promise.all([migratePostgres(a), migratePostgres(b)]);
      expect(results.map((r) => r.length).sort()).toEqual([0, versions.length]);
      expect(results.find((r) => r.length > 0)).toEqual(versions);
      const recorded = await a.all<{ version: number; name: string }>('SELECT version, name FROM schema_migrations ORDER BY version');
      expect(recorded).toEqual(MIGRATIONS.map((m) => ({ version: m.version, name: m.name })));
      expect(await migratePostgres(b)).toEqual([]);
    });

    it('refuses a database newer than the code', async () => {
      const client = await postgresWith('newer');
      await client.run('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)', [99, 'from the future', new Date().toISOString()]);
      await expect(migratePostgres(client)).rejects.toThrow(`database schema version 99 is newer than this callbridge knows (${Math.max(...versions)}); refusing to start`);
    });

    it('a failed migration is rolled back and leaves the lock free', async () => {
      const client = await postgresWith('failing', POSTGRES_MIGRATIONS.filter((m) => m.version <= 7));
      const broken: Migration = { version: 8, name: 'broken', sql: 'ALTER TABLE telco_numbers ADD COLUMN half_done TEXT; SELECT no_such_function();' };
      await expect(migratePostgres(client, [...POSTGRES_MIGRATIONS.filter((m) => m.version <= 7), broken])).rejects.toThrow(/no_such_function/);
      expect(await client.get('SELECT max(version) AS v FROM schema_migrations')).toEqual({ v: 7 });
      expect(await client.get("SELECT count(*) AS n FROM information_schema.columns WHERE table_name = 'telco_numbers' AND column_name = 'half_done'")).toEqual({ n: 0 });
      const other = open(server.url('failing'));
      const lock = await other.withConnection(async (session) => {
        const got = await session.get(`SELECT pg_try_advisory_lock(${MIGRATION_LOCK_KEY}) AS got`);
        await session.exec('SELECT pg_advisory_unlock_all()');
        return got;
      });
      expect(lock).toEqual({ got: true });
      expect(await migratePostgres(other)).toEqual(POSTGRES_MIGRATIONS.filter((m) => m.version >= 8).map((m) => m.version));
    });
  });

  describe('derived structures', () => {
    const T = '2026-01-01T00:00:00.000Z';
    const O1 = '0a000000-0000-4000-8000-000000000001';
    const O2 = '0a000000-0000-4000-8000-000000000002';
    const A1 = '0b000000-0000-4000-8000-000000000001';
    const A2 = '0b000000-0000-4000-8000-000000000002';
    const C = (n: number) => `0e000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
    const INSERT_CALL =
      'INSERT INTO calls (id, org_id, agent_id, direction, status, from_number, to_number, created_at, source, outbound, party_number, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)';
    const call = (n: number, org: string, agent: string | null, status: string, source: string, outbound: 0 | 1, party: string, outcome: string | null = null): [string, SqlValue[]] => [
      INSERT_CALL,
      [C(n), org, agent, outbound ? 'outbound' : 'inbound', status, outbound ? '+15550000' : party, outbound ? party : '+15550000', T, source, outbound, party, outcome],
    ];
    const SETUP: [string, SqlValue[]][] = [
      ['INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?), (?, ?, ?)', [O1, 'one', T, O2, 'two', T]],
      ["INSERT INTO agents (id, org_id, name, status, settings, created_at, updated_at) VALUES (?, ?, 'a', 'active', '{}', ?, ?), (?, ?, 'b', 'active', '{}', ?, ?)", [A1, O1, T, T, A2, O1, T, T]],
    ];

    /** Runs the same statements on both databases. */
    async function both(db: Database, client: PostgresClient, steps: [string, SqlValue[]][]): Promise<void> {
      for (const [sql, params] of steps) {
        db.prepare(sql).run(...params);
        await client.run(sql, params);
      }
    }

    /**
     * Both databases migrated up to (not including) `version`, the same statements run on both, then
     * the migrations from `version` on applied to both (SQLite's SQL as it is; PostgreSQL's through
     * migratePostgres).
     */
    async function bothMigratedOver(version: number, name: string, steps: [string, SqlValue[]][]): Promise<{ db: Database; client: PostgresClient }> {
      const db = sqlite(MIGRATIONS.filter((m) => m.version < version));
      const client = await postgresWith(name, POSTGRES_MIGRATIONS.filter((m) => m.version < version));
      await both(db, client, steps);
      for (const m of MIGRATIONS.filter((x) => x.version >= version)) db.transaction(() => db.exec(m.sql))();
      expect(await migratePostgres(client)).toEqual(MIGRATIONS.map((m) => m.version).filter((v) => v >= version));
      return { db, client };
    }

    it('the call counters: the same totals as SQLite after the same inserts, updates and deletes, and right', async () => {
      const db = sqlite();
      const client = await postgresWith('counters');
      await both(db, client, [
        ...SETUP,
        call(1, O1, A1, 'started', 'sip', 0, '+4915112345678'),
        call(2, O1, A1, 'in_progress', 'sip', 1, '+33612345678'),
        call(3, O1, A2, 'ended', 'api', 0, '+14155550100', 'ended_by_agent'),
        call(4, O1, null, 'ended', 'twilio', 1, '+14155550101', 'transferred'),
        call(5, O2, null, 'started', 'sip', 0, '+442071234567'),
        call(6, O1, A2, 'auth_failed', 'sip', 0, '+4930123456'),
      ]);
      const counts = (rows: { org_id: string; dim: string; val: string; n: number }[]) => rows.map((r) => `${r.org_id} ${r.dim}=${r.val}: ${r.n}`).sort();
      const COUNTERS = 'SELECT org_id, dim, val, n FROM call_counts';
      expect(counts(await client.all(COUNTERS))).toEqual(counts(db.prepare(COUNTERS).all() as never));

      await both(db, client, [
        ["UPDATE calls SET status = 'in_progress', started_at = ? WHERE id = ?", [T, C(1)]],
        ["UPDATE calls SET status = 'ended', outcome = 'ended_by_user', ended_at = ? WHERE id = ?", [T, C(1)]],
        ["UPDATE calls SET summary = 'a column no counter follows' WHERE id = ?", [C(2)]],
        ['UPDATE calls SET status = status, outcome = outcome WHERE id = ?', [C(3)]],
        ["UPDATE calls SET outbound = 1 - outbound, source = 'api' WHERE id = ?", [C(2)]],
        ['DELETE FROM agents WHERE id = ?', [A2]], // calls.agent_id SET NULL: the agent counter moves
        ['DELETE FROM calls WHERE id = ?', [C(4)]],
        ['DELETE FROM organizations WHERE id = ?', [O2]], // its calls and counters go with it
      ]);
      const pgCounts = counts(await client.all(COUNTERS));
      expect(pgCounts).toEqual(counts(db.prepare(COUNTERS).all() as never));
      // And right: every non-zero counter is the count of its calls.
      expect(pgCounts.filter((c) => !c.endsWith(': 0'))).toEqual(counts(await client.all(CALL_COUNTS_RECOUNT)));
      expect(pgCounts).toContain(`${O1} agent=: 2`);
      expect(pgCounts).toContain(`${O1} status=ended: 2`);
      expect(pgCounts.some((c) => c.startsWith(O2))).toBe(false);
    });

    it('the 1-2 character counters and postings: filled by migrations 10 and 12 for the calls before them, then kept by the triggers, as SQLite does, and right', async () => {
      const { db, client } = await bothMigratedOver(10, 'grams', [
        ...SETUP,
        call(1, O1, A1, 'started', 'sip', 0, '+4915112345678'),
        call(2, O1, A1, 'started', 'sip', 1, '+33612345'),
        call(3, O2, null, 'started', 'sip', 0, '+442071555'),
        call(6, O2, null, 'started', 'sip', 0, 'Ab*😀'),
        call(7, O1, A1, 'started', 'sip', 1, 'guest#12'),
      ]);
      // The postings (migration 12): the grams with a character outside [0-9+], once per call,
      // the same on both and as counted by hand; first those the migration wrote.
      const POSTINGS = 'SELECT org_id, gram, created_at, call_id FROM call_short_grams';
      const postings = (rows: { org_id: string; gram: string; created_at: string; call_id: string }[]) => rows.map((r) => `${r.org_id} ${r.gram} ${r.created_at} ${r.call_id}`).sort();
      const checkPostings = async (): Promise<string[]> => {
        const pgPostings = postings(await client.all(POSTINGS));
        expect(pgPostings).toEqual(postings(db.prepare(POSTINGS).all() as never));
        const calls = await client.all<{ org_id: string; party_number: string; created_at: string; id: string }>('SELECT org_id, party_number, created_at, id FROM calls');
        expect(pgPostings).toEqual(calls.flatMap((c) => postedGramsOf(c.party_number).map((g) => `${c.org_id} ${g} ${c.created_at} ${c.id}`)).sort());
        return pgPostings;
      };
      expect((await checkPostings()).length).toBe(postedGramsOf('Ab*😀').length + postedGramsOf('guest#12').length);
      await both(db, client, [
        call(4, O1, null, 'started', 'sip', 0, 'héé#'),
        ['UPDATE calls SET party_number = ? WHERE id = ?', ['+336', C(2)]],
        ['UPDATE calls SET party_number = ? WHERE id = ?', ['x+1', C(7)]],
        ['DELETE FROM calls WHERE id = ?', [C(1)]],
        ['DELETE FROM calls WHERE id = ?', [C(6)]],
        call(5, O1, null, 'started', 'sip', 0, '+4915112345678'),
      ]);
      const GRAMS = 'SELECT org_id, gram, n FROM call_gram_counts WHERE n <> 0';
      const grams = (rows: { org_id: string; gram: string; n: number }[]) => rows.map((r) => `${r.org_id} ${r.gram}: ${r.n}`).sort();
      const pgGrams = grams(await client.all(GRAMS));
      expect(pgGrams).toEqual(grams(db.prepare(GRAMS).all() as never));
      // Right: each substring of 1-2 characters of the calls' party numbers, once per call.
      const byHand = new Map<string, number>();
      for (const r of await client.all<{ org_id: string; party_number: string }>('SELECT org_id, party_number FROM calls')) {
        for (const g of gramsOf(r.party_number)) byHand.set(`${r.org_id} ${g}`, (byHand.get(`${r.org_id} ${g}`) ?? 0) + 1);
      }
      expect(pgGrams).toEqual([...byHand].map(([k, v]) => `${k}: ${v}`).sort());
      expect(pgGrams).toContain(`${O1} 5: 1`);
      expect(pgGrams).toContain(`${O2} 5: 1`);
      expect(pgGrams).toContain(`${O1} é: 1`);
      const pgPostings = await checkPostings();
      expect(pgPostings.filter((p) => p.endsWith(C(4))).map((p) => p.split(' ')[1]).sort()).toEqual(['#', 'h', 'hé', 'é', 'é#', 'éé']);
      expect(pgPostings.filter((p) => p.endsWith(C(7))).map((p) => p.split(' ')[1]).sort()).toEqual(['x', 'x+']);
    });

    it('the trigram search finds a party number by a 3-character substring, through its index, as SQLite does', async () => {
      const db = sqlite();
      const client = await postgresWith('search');
      await both(db, client, [
        ...SETUP,
        call(1, O1, A1, 'started', 'sip', 0, '+4915112345678'),
        call(2, O1, A1, 'started', 'sip', 1, '+33612345'),
        call(3, O1, null, 'started', 'sip', 0, '+14155550100'),
        call(4, O2, null, 'started', 'sip', 0, '+442071555'),
      ]);
      const sqliteSearch = (s: string) =>
        (db.prepare('SELECT s.call_id AS id FROM call_search_fts f JOIN call_search s ON s.id = f.rowid WHERE call_search_fts MATCH ? ORDER BY 1').all(`"${s}"`) as { id: string }[]).map((r) => r.id);
      const LIKE = "SELECT id FROM calls WHERE party_number LIKE ? ESCAPE '\\' ORDER BY 1";
      const pgSearch = async (s: string) => (await client.all<{ id: string }>(LIKE, [`%${s}%`])).map((r) => r.id);
      for (const [s, expected] of [
        ['555', [C(3), C(4)]],
        ['123', [C(1), C(2)]],
        ['+33', [C(2)]],
        ['999', []],
      ] as const) {
        expect(await pgSearch(s)).toEqual(expected);
        expect(sqliteSearch(s)).toEqual(expected);
      }
      // The index serves it: with every other way to read calls switched off, the plan reads
      // the trigram index (a GIN index supports bitmap scans only).
      const plan = await client.transaction(async (tx) => {
        await tx.exec('SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off; SET LOCAL enable_indexonlyscan = off');
        return (await tx.all<{ 'QUERY PLAN': string }>(`EXPLAIN ${LIKE}`, ['%555%'])).map((r) => r['QUERY PLAN']).join('\n');
      });
      expect(plan).toMatch(/Bitmap Index Scan on calls_party_number_trgm/);
      expect(plan).not.toMatch(/Seq Scan|disabled/i);
    });
  });
});
