/**
 * PostgresClient (src/store/postgres/client.ts) against a real PostgreSQL started by the test
 * (test/helpers/postgres.ts): `?` parameters, rows that read as SQLite's do, transactions and
 * savepoints, isolation of statements made outside a transaction, unique violations with their
 * column, and connection failures that never show the password.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Database } from '../../src/store/sqlite-driver.ts';
import type { SqlClient } from '../../src/store/sql-client.ts';
import { PostgresClient } from '../../src/store/postgres/client.ts';
import { isPostgresUniqueViolation, PostgresStoreError, redactUrl } from '../../src/store/postgres/errors.ts';
import { rewritePlaceholders } from '../../src/store/postgres/placeholders.ts';
import { PASSWORD_ROLE, postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { until } from '../helpers/until.ts';

describe('rewritePlaceholders', () => {
  it('numbers ? outside quoted text and comments, and leaves the rest as written', () => {
    const sql = `SELECT '?' AS q, 'it''s ?' AS r, "what?" , ? AS a -- a ? in a comment
      /* block ? /* nested ? */ still ? */ , $$ dollar ? $$, $body$ tagged ? $body$, E'esc \\' ?', ? AS b, x$y ?`;
    const { text, count } = rewritePlaceholders(sql);
    expect(count).toBe(3);
    expect(text).toBe(
      `SELECT '?' AS q, 'it''s ?' AS r, "what?" , $1 AS a -- a ? in a comment
      /* block ? /* nested ? */ still ? */ , $$ dollar ? $$, $body$ tagged ? $body$, E'esc \\' ?', $2 AS b, x$y $3`,
    );
  });

  it('leaves positional $n as they are and counts nothing in a statement without ?', () => {
    expect(rewritePlaceholders('SELECT $1::int')).toEqual({ text: 'SELECT $1::int', count: 0 });
  });
});

describe('redactUrl', () => {
  it('hides the password and password-like parameters, keeps the rest', () => {
    expect(redactUrl('postgres://cb:s3cr%40t@db.example:5432/callbridge?sslmode=require&password=x')).toBe(
      'postgres://cb:***@db.example:5432/callbridge?sslmode=require&password=***',
    );
    expect(redactUrl('postgres://cb@db.example/callbridge')).toBe('postgres://cb@db.example/callbridge');
    expect(redactUrl('not a url with hunter2')).not.toContain('hunter2');
  });
});

const pgAvailable = postgresAvailability();

describe.skipIf(pgAvailable.skip)(`PostgresClient on a real PostgreSQL${pgAvailable.skip ? `: skipped, ${pgAvailable.reason}` : ''}`, () => {
  let server: PostgresServer;
  let url: string;
  let client: PostgresClient;

  beforeAll(async () => {
    server = await startPostgres();
    url = await server.createDatabase('client_test');
    client = new PostgresClient({ url, poolSize: 4 });
  });

  afterAll(async () => {
    await client?.close();
    await server?.stop();
  });

  it('binds ? parameters, and a ? inside a quoted string or identifier stays text', async () => {
    const row = await client.get<Record<string, unknown>>(`SELECT '?' AS q, ? AS p, ?::integer + 1 AS n, 1 AS "why?"`, ['x', 41]);
    expect(row).toEqual({ q: '?', p: 'x', n: 42, 'why?': 1 });
  });

  it('refuses a statement given the wrong number of parameters, before sending it', async () => {
    await expect(client.get('SELECT ? AS a, ? AS b', [1])).rejects.toThrow(/takes 2 parameter\(s\), 1 given/);
  });

  it('reads rows as SQLite gives them: counts, sums and BIGINT columns are numbers, text stays text', async () => {
    const schema = 'CREATE TABLE mapped (id TEXT PRIMARY KEY, code TEXT NOT NULL, flag INTEGER NOT NULL, ms BIGINT, note TEXT)';
    const rows: [string, string, number, number | null, string | null][] = [
      ['a', '007', 1, 1_767_225_600_000, 'héllo ✓'],
      ['b', '42', 0, null, null],
      ['c', '1e3', 1, 4_102_444_800_000, ''],
    ];
    const queries = [
      'SELECT count(*) AS n, sum(flag) AS flags, sum(ms) AS ms_total, max(ms) AS ms_max, min(code) AS code FROM mapped',
      'SELECT id, code, flag, ms, note FROM mapped ORDER BY id',
    ];
    const sqlite = new Database(':memory:');
    const sqliteResults: unknown[] = [];
    try {
      sqlite.exec(schema.replace('BIGINT', 'INTEGER'));
      for (const r of rows) sqlite.prepare('INSERT INTO mapped (id, code, flag, ms, note) VALUES (?, ?, ?, ?, ?)').run(...r);
      for (const q of queries) sqliteResults.push(sqlite.prepare(q).all());
    } finally {
      sqlite.close();
    }
    await client.exec(schema);
    for (const r of rows) await client.run('INSERT INTO mapped (id, code, flag, ms, note) VALUES (?, ?, ?, ?, ?)', r);
    const pgResults: unknown[] = [];
    for (const q of queries) pgResults.push(await client.all(q));
    expect(pgResults).toEqual(sqliteResults);
    expect(typeof (pgResults[0] as { n: unknown }[])[0]!.n).toBe('number');
    expect(await client.get('SELECT 1.5::numeric AS x')).toEqual({ x: 1.5 });
  });

  it('fails loudly on an int8 beyond the exact range of a JavaScript number', async () => {
    const err = await client.get('SELECT 9007199254740993::bigint AS x').catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PostgresStoreError);
    expect((err as Error).message).toMatch(/9007199254740993, beyond the largest exact JavaScript number/);
    // The pooled connection is still usable afterwards.
    expect(await client.get('SELECT 2::bigint AS x')).toEqual({ x: 2 });
  });

  describe('the pool', () => {
    it('sets its type parsers on its own connections only, not on node-postgres for everyone', async () => {
      expect(await client.get('SELECT 5::bigint AS x')).toEqual({ x: 5 });
      expect(pg.types.getTypeParser(20, 'text')('5')).toBe('5');
    });

    it('names itself callbridge to the server and opens at most poolSize connections', async () => {
      expect(await client.get("SELECT current_setting('application_name') AS name")).toEqual({ name: 'callbridge' });
      const small = new PostgresClient({ url, poolSize: 2 });
      try {
        const rows = await Promise.all(Array.from({ length: 6 }, () => small.get<{ pid: number }>('SELECT pg_backend_pid() AS pid, pg_sleep(0.05)')));
        expect(new Set(rows.map((r) => r!.pid)).size).toBe(2);
      } finally {
        await small.close();
      }
    });

    it('survives the server dropping its idle connections: reported to onIdleError, the next statement reconnects', async () => {
      const idleErrors: PostgresStoreError[] = [];
      const victim = new PostgresClient({ url, poolSize: 2, onIdleError: (err) => idleErrors.push(err) });
      try {
        await Promise.all([victim.get('SELECT pg_sleep(0.02)'), victim.get('SELECT pg_sleep(0.02)')]);
        const killed = await client.get<{ n: number }>(
          "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle' AND application_name = 'callbridge'",
        );
        expect(killed!.n).toBeGreaterThanOrEqual(2);
        await until(() => idleErrors.length >= 2, 'the pool to report both dropped connections');
        expect(idleErrors.map((e) => e.code)).toEqual(['unreachable', 'unreachable']);
        expect(await victim.get('SELECT 1 AS x')).toEqual({ x: 1 });
      } finally {
        await victim.close();
      }
    });
  });

  describe('transactions', () => {
    beforeAll(async () => {
      await client.exec('CREATE TABLE items (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE)');
    });
    const names = async () => (await client.all<{ name: string }>('SELECT name FROM items ORDER BY name')).map((r) => r.name);

    it('commits every statement together', async () => {
      await client.exec('DELETE FROM items');
      const result = await client.transaction(async (tx) => {
        await tx.run('INSERT INTO items (id, name) VALUES (?, ?)', ['1', 'one']);
        const { changes } = await tx.run('INSERT INTO items (id, name) VALUES (?, ?), (?, ?)', ['2', 'two', '3', 'three']);
        return changes;
      });
      expect(result).toBe(2);
      expect(await names()).toEqual(['one', 'three', 'two']);
    });

    it('rolls back and rethrows when fn rejects', async () => {
      await client.exec('DELETE FROM items');
      const boom = new Error('boom');
      await expect(
        client.transaction(async (tx) => {
          await tx.run('INSERT INTO items (id, name) VALUES (?, ?)', ['1', 'one']);
          throw boom;
        }),
      ).rejects.toBe(boom);
      expect(await names()).toEqual([]);
    });

    it('runs a nested transaction as a savepoint: its failure undoes its own work only', async () => {
      await client.exec('DELETE FROM items');
      await client.transaction(async (tx) => {
        await tx.run('INSERT INTO items (id, name) VALUES (?, ?)', ['1', 'outer before']);
        await expect(
          tx.transaction(async (inner) => {
            await inner.run('INSERT INTO items (id, name) VALUES (?, ?)', ['2', 'inner failed']);
            // A failing statement aborts the savepoint, not the enclosing transaction.
            await inner.run('INSERT INTO items (id, name) VALUES (?, ?)', ['3', 'outer before']);
          }),
        ).rejects.toSatisfy((e: unknown) => isPostgresUniqueViolation(e, 'name'));
        await tx.transaction(async (inner) => {
          await inner.run('INSERT INTO items (id, name) VALUES (?, ?)', ['4', 'inner kept']);
        });
        await tx.run('INSERT INTO items (id, name) VALUES (?, ?)', ['5', 'outer after']);
      });
      expect(await names()).toEqual(['inner kept', 'outer after', 'outer before']);
    });

    it('refuses statements on a transaction that has ended (its connection is back in the pool)', async () => {
      let leaked: SqlClient | undefined;
      await client.transaction(async (tx) => {
        leaked = tx;
      });
      await expect(leaked!.get('SELECT 1 AS x')).rejects.toThrow(/transaction has ended/);
    });

    it('a statement made outside an open transaction neither sees it nor joins it', async () => {
      await client.exec('DELETE FROM items');
      let inserted!: () => void;
      const insertedInside = new Promise<void>((resolve) => (inserted = resolve));
      let finish!: () => void;
      const finishGate = new Promise<void>((resolve) => (finish = resolve));
      const tx = client.transaction(async (t) => {
        await t.run('INSERT INTO items (id, name) VALUES (?, ?)', ['in', 'inside']);
        inserted();
        await finishGate;
        throw new Error('roll back');
      });
      await insertedInside;
      expect(await client.get('SELECT name FROM items WHERE id = ?', ['in'])).toBeUndefined();
      await client.run('INSERT INTO items (id, name) VALUES (?, ?)', ['out', 'outside']);
      finish();
      await expect(tx).rejects.toThrow('roll back');
      expect(await names()).toEqual(['outside']);
    });
  });

  describe('unique violations', () => {
    beforeAll(async () => {
      await client.exec(`
        CREATE TABLE trunks (id TEXT PRIMARY KEY, username TEXT UNIQUE, alternate_number TEXT UNIQUE);
        CREATE TABLE assignments (id TEXT PRIMARY KEY, trunk_id TEXT NOT NULL, number TEXT, UNIQUE (trunk_id, number));
        INSERT INTO trunks (id, username, alternate_number) VALUES ('t1', 'alice', '+100');
        INSERT INTO assignments (id, trunk_id, number) VALUES ('a1', 't1', '200');
      `);
    });
    const failure = (sql: string, params: string[]) => client.run(sql, params).then(() => expect.unreachable('the insert succeeded'), (e: unknown) => e);

    it('is recognised with its column, keeping node-postgres error as the cause', async () => {
      const err = await failure('INSERT INTO trunks (id, username) VALUES (?, ?)', ['t2', 'alice']);
      expect(err).toBeInstanceOf(PostgresStoreError);
      expect(err).toMatchObject({ code: 'query', sqlState: '23505' });
      expect((err as Error).cause).toMatchObject({ code: '23505', constraint: 'trunks_username_key', table: 'trunks' });
      expect(isPostgresUniqueViolation(err)).toBe(true);
      expect(isPostgresUniqueViolation(err, 'username')).toBe(true);
      expect(isPostgresUniqueViolation(err, 'trunks.username')).toBe(true);
      expect(isPostgresUniqueViolation(err, 'alternate_number')).toBe(false);
      expect(isPostgresUniqueViolation(err, 'assignments.username')).toBe(false);
      expect(isPostgresUniqueViolation((err as Error).cause, 'username')).toBe(true);
    });

    it('names the column of a primary key and of a key of several columns, not a column merely containing it', async () => {
      const pk = await failure('INSERT INTO trunks (id) VALUES (?)', ['t1']);
      expect(isPostgresUniqueViolation(pk, 'id')).toBe(true);
      expect(isPostgresUniqueViolation(pk, 'username')).toBe(false);
      const pair = await failure('INSERT INTO assignments (id, trunk_id, number) VALUES (?, ?, ?)', ['a2', 't1', '200']);
      expect(isPostgresUniqueViolation(pair, 'assignments.number')).toBe(true);
      const alternate = await failure('INSERT INTO trunks (id, alternate_number) VALUES (?, ?)', ['t3', '+100']);
      expect(isPostgresUniqueViolation(alternate, 'alternate_number')).toBe(true);
      expect(isPostgresUniqueViolation(alternate, 'number')).toBe(false);
    });

    it('is not confused with other failures', async () => {
      const notNull = await failure('INSERT INTO assignments (id, trunk_id) VALUES (?, NULL)', ['a3']);
      expect(notNull).toMatchObject({ code: 'query', sqlState: '23502' });
      expect(isPostgresUniqueViolation(notNull)).toBe(false);
      expect(isPostgresUniqueViolation(new Error('duplicate key value violates unique constraint'))).toBe(false);
    });
  });

  describe('connection failures', () => {
    const PASSWORD = 'Wr0ng-pa55w0rd-x9';
    const leaks = (err: unknown): string[] => {
      const texts: string[] = [];
      for (let e = err, i = 0; e instanceof Error && i < 5; e = e.cause, i++) texts.push(e.message, e.stack ?? '');
      texts.push(JSON.stringify(err, Object.getOwnPropertyNames(err as object)));
      return texts.filter((t) => t.includes(PASSWORD));
    };

    it('a wrong password: refused, saying so, without the password', async () => {
      await client.exec(`CREATE ROLE ${PASSWORD_ROLE} LOGIN PASSWORD 'the-right-one'`);
      const wrong = new PostgresClient({ url: server.url('client_test', PASSWORD_ROLE, PASSWORD) });
      try {
        const err = await wrong.get('SELECT 1 AS x').catch((e: unknown) => e);
        expect(err).toBeInstanceOf(PostgresStoreError);
        expect(err).toMatchObject({ code: 'refused', sqlState: '28P01' });
        expect((err as Error).message).toContain(`postgres://${PASSWORD_ROLE}:***@127.0.0.1:${server.port}/client_test`);
        expect((err as Error).message).toMatch(/password authentication failed/);
        expect(leaks(err)).toEqual([]);
        // The right password gets in, so the refusal above was the password's doing.
        const right = new PostgresClient({ url: server.url('client_test', PASSWORD_ROLE, 'the-right-one') });
        try {
          expect(await right.get('SELECT current_user AS u')).toEqual({ u: PASSWORD_ROLE });
        } finally {
          await right.close();
        }
      } finally {
        await wrong.close();
      }
    });

    it('an unreachable server: a clear error naming the redacted URL', async () => {
      // A port nothing listens on: one the kernel just handed out and took back.
      const { createServer } = await import('node:net');
      const probe = createServer();
      const port = await new Promise<number>((resolve) => probe.listen(0, '127.0.0.1', () => resolve((probe.address() as { port: number }).port)));
      await new Promise((resolve) => probe.close(resolve));
      const unreachable = new PostgresClient({ url: `postgres://callbridge:${PASSWORD}@127.0.0.1:${port}/client_test`, connectTimeoutMs: 2000 });
      try {
        const err = await unreachable.transaction(async () => undefined).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(PostgresStoreError);
        expect(err).toMatchObject({ code: 'unreachable' });
        expect((err as Error).message).toContain(`PostgreSQL at postgres://callbridge:***@127.0.0.1:${port}/client_test is unreachable`);
        expect((err as Error).message).toContain('ECONNREFUSED');
        expect(leaks(err)).toEqual([]);
      } finally {
        await unreachable.close();
      }
    });

    it('a closed client refuses statements', async () => {
      const c = new PostgresClient({ url });
      expect(await c.get('SELECT 1 AS x')).toEqual({ x: 1 });
      await c.close();
      await expect(c.get('SELECT 1 AS x')).rejects.toMatchObject({ code: 'closed' });
    });

    it('refuses a URL that is not postgres://, without echoing a password', () => {
      expect(() => new PostgresClient({ url: `mysql://u:${PASSWORD}@h/db` })).toThrow(/must start with postgres:\/\/.*mysql:\/\/u:\*\*\*@h\/db/);
      expect(() => new PostgresClient({ url: 'postgres://h/db', poolSize: 0 })).toThrow(/pool size/);
    });
  });
});
