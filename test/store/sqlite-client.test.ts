/**
 * SqliteClient (store/sqlite-client.ts) on a real database file in a temporary directory: the
 * asynchronous SqlClient over better-sqlite3's one connection. A statement runs at once when no
 * transaction is open; a transaction holds the connection (statements on the outer client wait
 * for its end and are never part of it); a rejection rolls back; a nested transaction is a
 * savepoint; the statement cache; the migrations over the client.
 */
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteClient } from '../../src/store/sqlite-client.ts';
import { migrate, openDatabaseFile } from '../../src/store/db.ts';
import { isUniqueViolation } from '../../src/store/db.ts';

const root = mkdtempSync(join(tmpdir(), 'callbridge-sqlite-client-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

let n = 0;
let client: SqliteClient;
beforeEach(async () => {
  client = new SqliteClient(openDatabaseFile(join(root, `db-${++n}`)));
  await client.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL UNIQUE)');
});
afterEach(async () => {
  await client.close();
});

const values = async (c = client) => (await c.all<{ v: string }>('SELECT v FROM t ORDER BY id')).map((r) => r.v);

describe('SqliteClient', () => {
  it('runs a statement at once when no transaction is open: the work is done before the promise is awaited', async () => {
    const p = client.run('INSERT INTO t (v) VALUES (?)', ['a']);
    // Read through the raw handle before awaiting: the row is already there.
    expect(client.db.prepare('SELECT count(*) AS n FROM t').get()).toEqual({ n: 1 });
    expect(await p).toEqual({ changes: 1 });
    expect(await client.get<{ v: string }>('SELECT v FROM t WHERE v = ?', ['a'])).toEqual({ v: 'a' });
    expect(await client.get('SELECT v FROM t WHERE v = ?', ['missing'])).toBeUndefined();
    expect(await values()).toEqual(['a']);
  });

  it('rejects (never throws) on a bad statement, with the driver\'s error', async () => {
    await client.run('INSERT INTO t (v) VALUES (?)', ['a']);
    let thrown = false;
    let p: Promise<unknown> | undefined;
    try {
      p = client.run('INSERT INTO t (v) VALUES (?)', ['a']);
    } catch {
      thrown = true;
    }
    expect(thrown).toBe(false);
    const err = await p!.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isUniqueViolation(err, 't.v')).toBe(true);
    await expect(client.all('SELECT nope FROM t')).rejects.toThrow(/no such column/);
  });

  it('commits what the transaction wrote, and returns what fn returned', async () => {
    const r = await client.transaction(async (tx) => {
      await tx.run('INSERT INTO t (v) VALUES (?)', ['a']);
      await tx.run('INSERT INTO t (v) VALUES (?)', ['b']);
      return 'done';
    });
    expect(r).toBe('done');
    expect(await values()).toEqual(['a', 'b']);
    expect(client.db.inTransaction).toBe(false);
  });

  it('rolls back everything on a rejection and rethrows it', async () => {
    await client.run('INSERT INTO t (v) VALUES (?)', ['kept']);
    const boom = new Error('boom');
    await expect(
      client.transaction(async (tx) => {
        await tx.run('INSERT INTO t (v) VALUES (?)', ['a']);
        await tx.run("UPDATE t SET v = 'changed' WHERE v = 'kept'");
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await values()).toEqual(['kept']);
    expect(client.db.inTransaction).toBe(false);
  });

  it('rolls back when a statement of the transaction fails (a constraint), and the client goes on working', async () => {
    await expect(
      client.transaction(async (tx) => {
        await tx.run('INSERT INTO t (v) VALUES (?)', ['x']);
        await tx.run('INSERT INTO t (v) VALUES (?)', ['x']);
      }),
    ).rejects.toThrow(/UNIQUE/);
    expect(await values()).toEqual([]);
    await client.run('INSERT INTO t (v) VALUES (?)', ['after']);
    expect(await values()).toEqual(['after']);
  });

  it('makes a statement on the outer client wait for the open transaction: it lands after COMMIT and is not rolled back with a failing one', async () => {
    const order: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const failing = client.transaction(async (tx) => {
      await tx.run('INSERT INTO t (v) VALUES (?)', ['in-tx']);
      order.push('tx wrote');
      await gate;
      throw new Error('rolled back');
    });
    // Let the transaction begin and write.
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['tx wrote']);
    const outside = client.run('INSERT INTO t (v) VALUES (?)', ['outside']).then((r) => {
      order.push('outer ran');
      return r;
    });
    // The outer statement has not run: the raw connection sees only the transaction's row.
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual(['tx wrote']);
    expect(client.db.prepare('SELECT v FROM t ORDER BY id').all()).toEqual([{ v: 'in-tx' }]);
    release();
    await expect(failing).rejects.toThrow('rolled back');
    expect(await outside).toEqual({ changes: 1 });
    expect(order).toEqual(['tx wrote', 'outer ran']);
    // The transaction's row is gone, the outer one stayed.
    expect(await values()).toEqual(['outside']);
  });

  it('lands an outer read after COMMIT too: it sees the committed rows', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const tx = client.transaction(async (t) => {
      await t.run('INSERT INTO t (v) VALUES (?)', ['a']);
      await gate;
      await t.run('INSERT INTO t (v) VALUES (?)', ['b']);
    });
    await new Promise((r) => setImmediate(r));
    const read = values();
    release();
    await tx;
    expect(await read).toEqual(['a', 'b']);
  });

  it('runs transactions one after another, in the order they were asked for', async () => {
    const order: string[] = [];
    const one = client.transaction(async (tx) => {
      order.push('one begins');
      await new Promise((r) => setTimeout(r, 20));
      await tx.run('INSERT INTO t (v) VALUES (?)', ['one']);
      order.push('one ends');
    });
    const two = client.transaction(async (tx) => {
      order.push('two begins');
      await tx.run('INSERT INTO t (v) VALUES (?)', ['two']);
      order.push('two ends');
    });
    await Promise.all([one, two]);
    expect(order).toEqual(['one begins', 'one ends', 'two begins', 'two ends']);
    expect(await values()).toEqual(['one', 'two']);
  });

  it('makes a nested transaction a savepoint: its rollback undoes only its own writes', async () => {
    await client.transaction(async (tx) => {
      await tx.run('INSERT INTO t (v) VALUES (?)', ['outer-1']);
      await expect(
        tx.transaction(async (inner) => {
          await inner.run('INSERT INTO t (v) VALUES (?)', ['inner']);
          throw new Error('inner fails');
        }),
      ).rejects.toThrow('inner fails');
      const kept = await tx.transaction(async (inner) => {
        await inner.run('INSERT INTO t (v) VALUES (?)', ['inner-kept']);
        return 'kept';
      });
      expect(kept).toBe('kept');
      await tx.run('INSERT INTO t (v) VALUES (?)', ['outer-2']);
    });
    expect(await values()).toEqual(['outer-1', 'inner-kept', 'outer-2']);
  });

  it('rolls a committed savepoint back with its failing outer transaction', async () => {
    await expect(
      client.transaction(async (tx) => {
        await tx.transaction(async (inner) => {
          await inner.run('INSERT INTO t (v) VALUES (?)', ['inner']);
        });
        throw new Error('outer fails');
      }),
    ).rejects.toThrow('outer fails');
    expect(await values()).toEqual([]);
  });

  it('refuses a statement on a transaction\'s client after the transaction ended', async () => {
    let leaked: SqliteClient | undefined;
    await client.transaction(async (tx) => {
      leaked = tx as SqliteClient;
    });
    await expect(leaked!.run('INSERT INTO t (v) VALUES (?)', ['late'])).rejects.toThrow(/already ended/);
    expect(await values()).toEqual([]);
  });

  it('prepares a statement once per SQL text', async () => {
    const db = client.db;
    let prepared = 0;
    const prepare = db.prepare.bind(db);
    db.prepare = ((sql: string) => {
      prepared++;
      return prepare(sql);
    }) as typeof db.prepare;
    for (let i = 0; i < 5; i++) await client.run('INSERT INTO t (v) VALUES (?)', [`v${i}`]);
    for (let i = 0; i < 5; i++) await client.get('SELECT v FROM t WHERE v = ?', [`v${i}`]);
    expect(prepared).toBe(2);
  });

  it('closes once the open transaction has ended; close twice is fine', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const tx = client.transaction(async (t) => {
      await gate;
      await t.run('INSERT INTO t (v) VALUES (?)', ['last']);
    });
    await new Promise((r) => setImmediate(r));
    const closed = client.close();
    release();
    await tx;
    await closed;
    expect(client.db.open).toBe(false);
    await client.close();
    const again = new SqliteClient(openDatabaseFile(join(root, `db-${n}`)));
    expect(await values(again)).toEqual(['last']);
    client = again;
  });
});

describe('migrate over a SqlClient', () => {
  it('applies each migration once, records it, and refuses a schema newer than it knows', async () => {
    const m = [
      { version: 1, name: 'one', sql: 'CREATE TABLE m1 (x INTEGER)' },
      { version: 2, name: 'two', sql: 'CREATE TABLE m2 (x INTEGER)' },
    ];
    await migrate(client, m);
    await migrate(client, m);
    expect(await client.all('SELECT version, name FROM schema_migrations ORDER BY version')).toEqual([
      { version: 1, name: 'one' },
      { version: 2, name: 'two' },
    ]);
    await expect(migrate(client, m.slice(0, 1))).rejects.toThrow(/schema version 2 is newer than this callbridge knows \(1\)/);
  });

  it('leaves nothing of a migration that fails', async () => {
    await expect(migrate(client, [{ version: 1, name: 'bad', sql: 'CREATE TABLE ok (x INTEGER); CREATE TABLE t (x INTEGER)' }])).rejects.toThrow(/already exists/);
    expect(await client.get("SELECT name FROM sqlite_master WHERE name = 'ok'")).toBeUndefined();
    expect(await client.all('SELECT version FROM schema_migrations')).toEqual([]);
  });
});
