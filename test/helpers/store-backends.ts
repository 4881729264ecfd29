/**
 * Runs a repository test file on both store backends: the embedded SQLite (a fresh temporary data
 * directory per store) and PostgreSQL (one throwaway server per test file, test/helpers/postgres.ts,
 * started on first use; a fresh database per store, copied from a template migrated once).
 *
 *   forEachStoreBackend((backend) => {
 *     let t: TestStore;
 *     beforeAll(async () => { t = await openTestStore(backend); });
 *     afterAll(() => t.dispose());
 *     it(...)
 *   });
 *
 * forEachStoreBackend must be called at the top level of the test file: it registers the file's
 * afterAll that stops the server. Without PostgreSQL's binaries the PostgreSQL half is skipped,
 * its title naming what is missing, except in CI (test/helpers/postgres.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, describe } from 'vitest';
import { openStore, type Store } from '../../src/store/index.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from './postgres.ts';

export type StoreBackend = 'sqlite' | 'postgres';

/** The encryption key of every test store (PostgreSQL needs one configured; SQLite takes it too). */
export const TEST_ENCRYPTION_KEY = Buffer.alloc(32, 0x5a).toString('base64');

export interface TestStore {
  backend: StoreBackend;
  store: Store;
  /** The PostgreSQL database's URL (undefined on SQLite). */
  url: string | undefined;
  /** The data directory (SQLite's database is in it; on PostgreSQL it holds nothing of the store). */
  dataDir: string;
  /** Closes the store and opens the same database again (a restart). */
  reopen(): Promise<Store>;
  /** Closes the store and deletes its data directory (the PostgreSQL database goes with the server). */
  dispose(): Promise<void>;
}

let server: Promise<PostgresServer> | undefined;
/** A migrated, empty database that each test database is copied from (faster than migrating each). */
let template: Promise<string> | undefined;
let databases = 0;
let stopRegistered = false;
const TEMPLATE = 'store_template';

function postgresServer(): Promise<PostgresServer> {
  server ??= startPostgres();
  return server;
}

/** The migrated template database's name, made on first use. */
function migratedTemplate(): Promise<string> {
  template ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'callbridge-store-template-'));
    try {
      const url = await (await postgresServer()).createDatabase(TEMPLATE);
      await (await openStore(dir, TEST_ENCRYPTION_KEY, { url, poolSize: 1 })).close();
      return TEMPLATE;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  })();
  return template;
}

/** A new database copied from the migrated template; its URL. */
async function newDatabase(): Promise<string> {
  const s = await postgresServer();
  const from = await migratedTemplate();
  databases += 1;
  const name = `store_${databases}`;
  const admin = new pg.Client({ connectionString: s.url('postgres') });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${from}`);
  } finally {
    await admin.end();
  }
  return s.url(name);
}

/** Stops this file's PostgreSQL server, if one was started (forEachStoreBackend registers it). */
export async function stopTestPostgres(): Promise<void> {
  const s = server;
  server = undefined;
  template = undefined;
  if (s !== undefined) await (await s).stop();
}

/** One describe per backend around `body`; PostgreSQL's skipped (named) where it is not installed. */
export function forEachStoreBackend(body: (backend: StoreBackend) => void): void {
  if (!stopRegistered) {
    stopRegistered = true;
    afterAll(stopTestPostgres);
  }
  describe('on sqlite', () => body('sqlite'));
  const pg = postgresAvailability();
  describe.skipIf(pg.skip)(`on postgres${pg.skip ? `: skipped, ${pg.reason}` : ''}`, () => body('postgres'));
}

/**
 * A fresh, empty store (schema migrated) on the backend; `nodeId`: the node its call rows carry
 * (cluster.node_id); `publicUrl`: http.public_url, the base of the links events carry.
 */
export async function openTestStore(backend: StoreBackend, encryptionKey: string = TEST_ENCRYPTION_KEY, options: { nodeId?: string; publicUrl?: string } = {}): Promise<TestStore> {
  const dataDir = mkdtempSync(join(tmpdir(), `callbridge-store-${backend}-`));
  const url = backend === 'postgres' ? await newDatabase() : undefined;
  const node = { ...(options.nodeId !== undefined ? { nodeId: options.nodeId } : {}), ...(options.publicUrl !== undefined ? { publicUrl: options.publicUrl } : {}) };
  const open = () => openStore(dataDir, encryptionKey, url === undefined ? node : { url, poolSize: 4, ...node });
  const t: TestStore = {
    backend,
    store: await open(),
    url,
    dataDir,
    async reopen() {
      await t.store.close();
      t.store = await open();
      return t.store;
    },
    async dispose() {
      await t.store.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return t;
}

/** Another node's store on the same PostgreSQL database as `t` (its own pool and node id); closed by the caller. */
export function openOtherNode(t: TestStore, nodeId: string): Promise<Store> {
  if (t.url === undefined) throw new Error('openOtherNode: a second node shares a PostgreSQL database, not a SQLite file');
  return openStore(t.dataDir, TEST_ENCRYPTION_KEY, { url: t.url, poolSize: 4, nodeId });
}

/** A database on this file's PostgreSQL server (started on first use), for tests that need a URL. */
export async function testPostgresDatabase(name: string): Promise<{ url: string; server: PostgresServer }> {
  const s = await postgresServer();
  return { url: await s.createDatabase(name), server: s };
}
