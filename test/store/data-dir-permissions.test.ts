/**
 * The database files once held transcripts and caller numbers world-readable (0644). The
 * data directory is 0700 and callbridge.sqlite, -wal and -shm 0600, for a new installation and
 * for one made before (tightened at start), whatever the umask.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Database } from '../../src/store/sqlite-driver.ts';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteClient } from '../../src/store/db.ts';

const root = mkdtempSync(join(tmpdir(), 'callbridge-perms-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const mode = (p: string) => statSync(p).mode & 0o777;
const FILES = ['callbridge.sqlite', 'callbridge.sqlite-wal', 'callbridge.sqlite-shm'];

describe('data directory permissions', () => {
  it('a new data directory is 0700 and its database files 0600 under umask 022', async () => {
    const old = process.umask(0o022);
    try {
      const dir = join(root, 'fresh');
      const db = (await openSqliteClient(dir)).db;
      db.prepare("INSERT INTO organizations (id, name, created_at) VALUES ('o1', 'org', '2026-01-01T00:00:00.000Z')").run();
      expect(mode(dir)).toBe(0o700);
      for (const f of FILES) {
        expect(existsSync(join(dir, f)), f).toBe(true);
        expect(mode(join(dir, f)).toString(8), f).toBe('600');
      }
      db.close();
    } finally {
      process.umask(old);
    }
  });

  it('an existing installation with 0755 / 0644 is tightened at start, its data kept', async () => {
    const old = process.umask(0o022);
    try {
      const dir = join(root, 'older');
      mkdirSync(dir, { mode: 0o755 });
      chmodSync(dir, 0o755);
      // As an older callbridge left it: SQLite created the files with the umask's 0644.
      const before = new Database(join(dir, 'callbridge.sqlite'));
      before.pragma('journal_mode = WAL');
      before.exec('CREATE TABLE keep (v TEXT); INSERT INTO keep VALUES (\'transcript\')');
      for (const f of FILES) expect(mode(join(dir, f)).toString(8), f).toBe('644');
      before.close();
      const db = (await openSqliteClient(dir)).db;
      expect(mode(dir).toString(8)).toBe('700');
      for (const f of FILES.filter((x) => existsSync(join(dir, x)))) expect(mode(join(dir, f)).toString(8), f).toBe('600');
      expect(db.prepare('SELECT v FROM keep').get()).toEqual({ v: 'transcript' });
      db.close();
    } finally {
      process.umask(old);
    }
  });
});
