/**
 * The native addons load on this Node: the store's SQLite driver (the better-sqlite3 it chooses
 * for this Node, src/store/sqlite-driver.ts) opens a database and runs a statement, and
 * @discordjs/opus makes an encoder. Prints one line saying which; exits non-zero when either fails.
 * scripts/ci-lts-node.sh runs it right after `npm ci` on each LTS Node, so a broken addon is named
 * there rather than by the first test that opens a store.
 *
 *   node --import tsx scripts/native-addons-check.ts
 */
import { createRequire } from 'node:module';
import { Database, SQLITE_DRIVER_PACKAGE } from '../src/store/sqlite-driver.ts';

const require = createRequire(import.meta.url);

const db = new Database(':memory:');
const { version } = db.prepare('select sqlite_version() as version').get() as { version: string };
db.close();
const driverVersion = (require(`${SQLITE_DRIVER_PACKAGE}/package.json`) as { version: string }).version;

const { OpusEncoder } = require('@discordjs/opus') as typeof import('@discordjs/opus');
const frame = new OpusEncoder(48_000, 1).encode(Buffer.alloc(960 * 2));

process.stdout.write(
  `node ${process.versions.node} (Node-API ${process.versions.napi}): SQLite ${version} through ${SQLITE_DRIVER_PACKAGE} ${driverVersion}; ` +
    `@discordjs/opus encodes (${frame.length}-byte frame)\n`,
);
