/**
 * A throwaway PostgreSQL server for one test file: Debian's server binaries (package
 * `postgresql`, /usr/lib/postgresql/<major>/bin, the highest major installed), a cluster made by
 * initdb in a fresh temporary directory, listening on 127.0.0.1 only at a free port, its unix
 * socket in that directory. Started once per test file (initdb and start take a second or two);
 * each test makes the databases it needs with createDatabase(). stop() shuts it down
 * (immediate: nothing in it is worth keeping) and deletes the directory.
 *
 * CALLBRIDGE_TEST_PG_BIN may name another bin directory (a PostgreSQL installed elsewhere).
 *
 * initdb refuses to run as root: a test run as root runs the server binaries as the `postgres`
 * system user (runuser), the directory handed to it.
 *
 * Authentication is trust for the superuser `callbridge`, except for the role
 * PASSWORD_ROLE, which must give its password over TCP (scram-sha-256): tests of a wrong
 * password create that role and use it.
 *
 * Durability is off (fsync, synchronous_commit, full_page_writes): a crash loses a test database,
 * which is thrown away anyway.
 */
import { execFile, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

const PG_ROOT = '/usr/lib/postgresql';
/** An environment variable naming the bin directory to use instead of Debian's. */
export const BIN_ENV = 'CALLBRIDGE_TEST_PG_BIN';
/** The cluster's superuser (initdb -U). */
export const SUPERUSER = 'callbridge';
/** The role that authenticates by password over TCP (pg_hba.conf), for tests of a wrong password. */
export const PASSWORD_ROLE = 'callbridge_password';

/**
 * The bin directory of the highest PostgreSQL major installed, or undefined. BIN_ENV names
 * another one (a PostgreSQL installed elsewhere; a missing directory stands for no PostgreSQL).
 */
export function findPostgresBin(): string | undefined {
  const chosen = process.env[BIN_ENV];
  if (chosen) return existsSync(join(chosen, 'initdb')) && existsSync(join(chosen, 'pg_ctl')) ? chosen : undefined;
  if (!existsSync(PG_ROOT)) return undefined;
  const majors = readdirSync(PG_ROOT)
    .filter((d) => /^\d+$/.test(d) && existsSync(join(PG_ROOT, d, 'bin', 'initdb')) && existsSync(join(PG_ROOT, d, 'bin', 'pg_ctl')))
    .map(Number)
    .sort((a, b) => b - a);
  return majors.length > 0 ? join(PG_ROOT, String(majors[0]), 'bin') : undefined;
}

export interface PostgresAvailability {
  ok: boolean;
  /** Skip the tests: no PostgreSQL here and not in CI (in CI a missing server fails them). */
  skip: boolean;
  reason?: string;
}

export function postgresAvailability(): PostgresAvailability {
  if (findPostgresBin() !== undefined) return { ok: true, skip: false };
  const where = process.env[BIN_ENV] ? `${process.env[BIN_ENV]} (${BIN_ENV})` : `${PG_ROOT}/<major>/bin`;
  const reason = `no PostgreSQL server in ${where} (apt-get install postgresql)`;
  return { ok: false, skip: !process.env.CI, reason };
}

export interface PostgresServer {
  port: number;
  /** The PostgreSQL major version of the binaries used. */
  major: number;
  /** Creates an empty database and returns its URL (the superuser, no password). */
  createDatabase(name: string): Promise<string>;
  /** The URL of a database on this server, as a given user (default the superuser). */
  url(database: string, user?: string, password?: string): string;
  /** The server's log so far. */
  log(): string;
  stop(): Promise<void>;
}

interface RunAs {
  uid: number;
  gid: number;
}

/** The `postgres` system user, when this process is root (initdb and postgres refuse root). */
function serverUser(): RunAs | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const uid = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) {
    throw new Error('running as root, and there is no `postgres` system user to run the PostgreSQL server as (the postgresql package creates it)');
  }
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** Runs a server binary (as `postgres` when we are root); rejects with its output on failure. */
function run(bin: string, args: string[], as: RunAs | undefined, cwd: string): Promise<string> {
  const [file, argv] = as === undefined ? [bin, args] : ['runuser', ['-u', 'postgres', '--', bin, ...args]];
  return new Promise((resolve, reject) => {
    execFile(file, argv, { cwd, encoding: 'utf8', timeout: 90_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${bin.split('/').pop()} ${args.join(' ')} failed: ${err.message}\n${stdout}\n${stderr}`, { cause: err }));
      else resolve(stdout + stderr);
    });
  });
}

/** A TCP port free on 127.0.0.1 right now. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as net.AddressInfo;
      s.close(() => resolve(port));
    });
  });
}

const DATABASE_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export async function startPostgres(): Promise<PostgresServer> {
  const bin = findPostgresBin();
  if (bin === undefined) throw new Error(postgresAvailability().reason);
  const version = spawnSync(join(bin, 'pg_ctl'), ['--version'], { encoding: 'utf8' }).stdout ?? '';
  const major = Number(/(\d+)/.exec(version)?.[1] ?? NaN);
  const as = serverUser();
  const dir = mkdtempSync(join(tmpdir(), 'callbridge-pg-'));
  if (as !== undefined) chownSync(dir, as.uid, as.gid);
  const data = join(dir, 'data');
  const logFile = join(dir, 'server.log');
  const readLog = () => (existsSync(logFile) ? readFileSync(logFile, 'utf8') : '');
  let postmasterPid: number | undefined;
  // If the test process exits without stop() (a crash, a timeout), the server must not outlive it.
  const killOnExit = () => {
    if (postmasterPid !== undefined) {
      try {
        process.kill(postmasterPid, 'SIGQUIT'); // PostgreSQL's immediate shutdown
      } catch {
        // gone already
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', killOnExit);
  try {
    await run(join(bin, 'initdb'), ['-D', data, '--auth=trust', `-U`, SUPERUSER, '--no-sync', '--encoding=UTF8', '--locale=C'], as, dir);
    // First match wins: the password role over TCP before initdb's trust lines.
    const hba = join(data, 'pg_hba.conf');
    writeFileSync(hba, `host all ${PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n${readFileSync(hba, 'utf8')}`);
    let port = 0;
    // The free port may be taken between the probe and the server's bind: then try another.
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      const settings = [
        '-c listen_addresses=127.0.0.1',
        `-c port=${port}`,
        `-c unix_socket_directories=${dir}`,
        '-c fsync=off',
        '-c synchronous_commit=off',
        '-c full_page_writes=off',
      ].join(' ');
      try {
        // -w: pg_ctl returns once the server accepts connections.
        await run(join(bin, 'pg_ctl'), ['start', '-D', data, '-l', logFile, '-w', '-t', '60', '-o', settings], as, dir);
        break;
      } catch (err) {
        if (attempt < 3 && /could not bind|already in use/i.test(readLog())) continue;
        throw new Error(`${(err as Error).message}\nserver log:\n${readLog()}`, { cause: err });
      }
    }
    postmasterPid = Number(readFileSync(join(data, 'postmaster.pid'), 'utf8').split('\n')[0]);
    const url = (database: string, user = SUPERUSER, password?: string) =>
      `postgres://${encodeURIComponent(user)}${password === undefined ? '' : `:${encodeURIComponent(password)}`}@127.0.0.1:${port}/${database}`;
    return {
      port,
      major,
      url,
      log: readLog,
      async createDatabase(name: string): Promise<string> {
        if (!DATABASE_NAME.test(name)) throw new Error(`not a plain database name: ${name}`);
        const admin = new pg.Client({ connectionString: url('postgres') });
        await admin.connect();
        try {
          await admin.query(`CREATE DATABASE ${name}`);
        } finally {
          await admin.end();
        }
        return url(name);
      },
      async stop(): Promise<void> {
        try {
          await run(join(bin, 'pg_ctl'), ['stop', '-D', data, '-m', 'immediate', '-w'], as, dir);
        } catch {
          if (postmasterPid !== undefined) {
            try {
              process.kill(postmasterPid, 'SIGKILL');
            } catch {
              // gone already
            }
          }
        }
        postmasterPid = undefined;
        process.removeListener('exit', killOnExit);
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    killOnExit();
    process.removeListener('exit', killOnExit);
    throw err;
  }
}
