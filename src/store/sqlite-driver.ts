/**
 * The SQLite driver: better-sqlite3, in the major that runs on this Node (docs/decisions.md,
 * "Supported Node lines"). Every opening of a database goes through `Database` here, the daemon's
 * and the tests' alike, so one process never loads both.
 *
 * - better-sqlite3 13 (the optional dependency `better-sqlite3-napi`) is built on Node-API 10,
 *   which Node has from 22.14 on (24 included); on Node 20 it segfaults at the first `new
 *   Database()`, and npm leaves it out there (its `engines` is >=22).
 * - better-sqlite3 12 is built on Node's own C++ API: it serves Node 20 and 22, and aborts the
 *   process on Node 24.19 and later (a Statement collected outside a JS context trips
 *   `RemoveEnvironmentCleanupHook`'s assertion, nodejs/node#65446).
 *
 * So: 13 where Node-API 10 exists and npm installed it; else 12, except on Node 24 and later,
 * where 12 would abort at some later GC rather than now: there the missing 13 is an error now.
 */
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';

const require = createRequire(import.meta.url);

/** The package names: the optional dependency is better-sqlite3 13 under an alias. */
export const SQLITE_PACKAGES = { napi: 'better-sqlite3-napi', legacy: 'better-sqlite3' } as const;

/** The Node-API version better-sqlite3 13 is compiled for (its binding.gyp's NAPI_VERSION). */
const NAPI_VERSION_OF_13 = 10;
/** The first Node major on which better-sqlite3 12 aborts (from 24.19). */
const FIRST_NODE_WITHOUT_12 = 24;

function isMissing(err: unknown, name: string): boolean {
  const e = err as NodeJS.ErrnoException;
  return e?.code === 'MODULE_NOT_FOUND' && String(e.message).includes(`'${name}'`);
}

function loadDriver(): { Database: typeof BetterSqlite3; packageName: string } {
  const napi = Number(process.versions.napi ?? 0);
  if (napi >= NAPI_VERSION_OF_13) {
    try {
      return { Database: require(SQLITE_PACKAGES.napi) as typeof BetterSqlite3, packageName: SQLITE_PACKAGES.napi };
    } catch (err) {
      if (!isMissing(err, SQLITE_PACKAGES.napi)) throw err;
      const major = Number(process.versions.node.split('.')[0]);
      if (major >= FIRST_NODE_WITHOUT_12) {
        throw new Error(
          `Node ${process.versions.node} needs better-sqlite3 13 (the optional dependency ${SQLITE_PACKAGES.napi}), ` +
            'and it is not installed: run `npm ci` without --omit=optional (better-sqlite3 12 aborts the process on Node 24.19 and later)',
          { cause: err },
        );
      }
    }
  }
  return { Database: require(SQLITE_PACKAGES.legacy) as typeof BetterSqlite3, packageName: SQLITE_PACKAGES.legacy };
}

const driver = loadDriver();

/** better-sqlite3's Database constructor, from the package chosen above. */
export const Database: typeof BetterSqlite3 = driver.Database;
/** Which package `Database` came from (the startup log says it). */
export const SQLITE_DRIVER_PACKAGE: string = driver.packageName;
export type Database = BetterSqlite3.Database;
