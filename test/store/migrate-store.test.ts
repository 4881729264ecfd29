/**
 * `callbridge migrate-store` as a child process, from a SQLite data directory a real daemon filled
 * (REST and the daemon's own repositories) into a throwaway PostgreSQL: every table's rows equal
 * on both sides, the counters rebuilt equal, and a daemon on PostgreSQL, configured with the
 * secrets from the files the command names, serving the same agents, trunk passwords, carrier
 * tokens, calls (totals, search, transcripts, tags) to the same API key. Bad inputs each refused
 * with one line and a non-zero exit, the target left empty; a second run refused.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migratePostgres, PostgresClient, POSTGRES_MIGRATIONS } from '../../src/store/postgres/index.ts';
import { Database } from '../../src/store/sqlite-driver.ts';
import { CALL_COUNTS_RECOUNT } from '../helpers/call-counts.ts';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { postgresAvailability } from '../helpers/postgres.ts';
import { stopTestPostgres, testPostgresDatabase } from '../helpers/store-backends.ts';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'callbridge.js');
const TRUNK_PASSWORD = 'trunk-Secret-7f31a2';
const CARRIER_TOKEN = 'carrier-Token-0b9e44';
const URL_PASSWORD = 'url-Pw-d41c9e';
const pgAvailable = postgresAvailability();

const dirs: string[] = [];
const tempDir = (prefix: string) => {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
};

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** `node bin/callbridge.js migrate-store ...args` with no CALLBRIDGE_* settings but `env`. */
function migrateStore(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('CALLBRIDGE_')));
  const child = spawn(process.execPath, [BIN, 'migrate-store', ...args], { env: { ...base, CALLBRIDGE_DATA_DIR: tempDir('callbridge-migrate-cwd-'), ...env } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (b) => (stdout += b));
  child.stderr.on('data', (b) => (stderr += b));
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, stdout, stderr })));
}

const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });

/** Rows of a table as comparable, order-independent values (the keys sorted, the rows sorted). */
function canonical(rows: Array<Record<string, unknown>>): string[] {
  return rows.map((r) => JSON.stringify(Object.fromEntries(Object.entries(r).sort(([a], [b]) => a.localeCompare(b))))).sort();
}

/** Rows in every table of a PostgreSQL database but the migrations' record (0 when it has no tables). */
async function targetRows(url: string): Promise<number> {
  const client = new PostgresClient({ url, poolSize: 1 });
  try {
    const tables = await client.all<{ t: string }>("SELECT table_name AS t FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations'");
    let n = 0;
    for (const { t } of tables) n += (await client.get<{ n: number }>(`SELECT count(*) AS n FROM "${t}"`))!.n;
    return n;
  } finally {
    await client.close();
  }
}

describe.skipIf(pgAvailable.skip)(`callbridge migrate-store${pgAvailable.skip ? `: skipped, ${pgAvailable.reason}` : ''}`, () => {
  let source: TestDaemon;
  let sqliteDir: string;
  let target: string;
  const filled = {} as {
    agentId: string;
    versionId: string;
    trunkId: string;
    assignmentId: string;
    numberId: string;
    callIds: string[];
    total: number;
  };

  beforeAll(async () => {
    // The single node: a daemon on SQLite, filled through REST and its own repositories.
    source = await startTestDaemon({ sip: { enabled: false } });
    sqliteDir = source.dataDir;
    const ok = async (method: string, path: string, body?: unknown, status = 200) => {
      const r = await source.api(method, path, body);
      expect(r.status, `${method} ${path}: ${r.text}`).toBe(status);
      return r.body;
    };
    const agent = await ok('POST', '/v1/agents', { name: 'Front desk', prompt: 'Be brief.' }, 201);
    await ok('PUT', `/v1/agents/${agent.id}/draft`, { nodes: [{ id: 'n1', type: 'tool', name: 'lookup', description: 'look it up', parameters: [] }] });
    const version = await ok('POST', `/v1/agents/${agent.id}/versions`, { tag: 'v1' }, 201);
    await ok('POST', `/v1/agents/${agent.id}/versions/${version.id}/publish`);
    await ok('POST', '/v1/agents', { name: 'Night shift' }, 201);
    const trunk = await ok('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx', inbound_sip_username: 'mig-user-1', inbound_sip_password: TRUNK_PASSWORD }, 201);
    const assignment = await ok('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, number: '200' }, 201);
    const store = source.daemon.store;
    const org = (await store.organizations.byApiKey(source.key))!;
    const numberId = crypto.randomUUID();
    await store.telcoNumbers.insert({ id: numberId, org_id: org.id, phone_number: '+15557654321', phone_sid: 'PN1', label: 'main', account_sid: 'AC1', auth_token: CARRIER_TOKEN, created_at: new Date().toISOString() });
    await store.registrations.replace(trunk.id, [
      { trunk_id: trunk.id, contact: 'sip:200@127.0.0.1:5099', expires_at: Date.now() + 3_600_000, call_id: 'reg-1', cseq: 7, transport: 'udp', source_address: '127.0.0.1', source_port: 5099, connection_id: null, updated_at: Date.now() },
    ]);
    // Web sessions (a session row and a call row each), then calls ended with transcripts and tags.
    for (const caller of ['+15550001111', 'desk-42', '+15550002222']) await ok('POST', '/v1/session-token', { agent_id: agent.id, caller_id: caller });
    const callIds: string[] = [];
    for (let i = 0; i < 25; i++) {
      const id = crypto.randomUUID();
      const at = new Date(Date.UTC(2026, 0, 1, 0, i)).toISOString();
      await store.calls.insert({ id, org_id: org.id, agent_id: agent.id, sip_trunk_id: trunk.id, direction: i % 3 === 0 ? 'outbound' : 'inbound', from: `+1555100${String(i).padStart(4, '0')}`, to: '200', created_at: at });
      if (i % 5 !== 4) await store.calls.markAnswered(id, at);
      if (i % 7 !== 6) {
        await store.calls.end(id, { ended_at: at, termination_reason: i % 2 === 0 ? 'client_closed' : 'agent_hangup', transcript: [{ index: 0, role: 'user', message: `hello ${i}`, type: 'message' }] });
      }
      if (i % 4 === 0) await store.calls.addTags(id, ['vip', `batch-${i % 3}`]);
      callIds.push(id);
    }
    filled.agentId = agent.id;
    filled.versionId = version.id;
    filled.trunkId = trunk.id;
    filled.assignmentId = assignment.id;
    filled.numberId = numberId;
    filled.callIds = callIds;
    filled.total = (await ok('GET', '/v1/calls')).pagination.total as number;
    expect(filled.total).toBe(28);
    await source.stop();
    // The superuser authenticates by trust: the password in the URL is not checked, but the
    // command must never show it.
    target = (await testPostgresDatabase('migrated')).url.replace('callbridge@', `callbridge:${URL_PASSWORD}@`);
  }, 60_000);

  afterAll(async () => {
    await stopTestPostgres();
    dirs.forEach((d) => rmSync(d, { recursive: true, force: true }));
    rmSync(sqliteDir, { recursive: true, force: true });
  });

  it('refuses bad inputs with one line each and a non-zero exit, writing nothing', async () => {
    const empty = (await testPostgresDatabase('refusals')).url;
    const garbage = tempDir('callbridge-migrate-garbage-');
    writeFileSync(join(garbage, 'callbridge.sqlite'), 'not a database '.repeat(500));
    const unreachable = `postgres://callbridge:${URL_PASSWORD}@127.0.0.1:${await freePort()}/nowhere`;
    const cases: Array<{ args: string[]; env?: Record<string, string>; code: number; says: RegExp }> = [
      { args: ['--from', `sqlite:${sqliteDir}`], code: 2, says: /--from and --to are required/ },
      { args: ['--from', 'sqlite:/nonexistent/callbridge', '--to', empty], code: 1, says: /no such file or directory: \/nonexistent\/callbridge/ },
      { args: ['--from', unreachable, '--to', empty], code: 1, says: /--from must be sqlite:<data directory or database file>/ },
      { args: ['--from', `sqlite:${tempDir('callbridge-migrate-nodb-')}`, '--to', empty], code: 1, says: /no callbridge database in .*callbridge\.sqlite/ },
      { args: ['--from', `sqlite:${garbage}`, '--to', empty], code: 1, says: /callbridge\.sqlite is not a SQLite database/ },
      { args: ['--from', `sqlite:${sqliteDir}`, '--to', `mysql://callbridge:${URL_PASSWORD}@127.0.0.1/x`], code: 1, says: /--to must be a postgres:\/\/ or postgresql:\/\/ URL, got mysql:\/\/callbridge:\*\*\*@127\.0\.0\.1\/x/ },
      { args: ['--from', `sqlite:${sqliteDir}`, '--to', unreachable], code: 1, says: /postgres:\/\/callbridge:\*\*\*@127\.0\.0\.1:\d+\/nowhere/ },
      // Another key than the one the trunk password was sealed with (the configured key wins over the file, as in the daemon).
      { args: ['--from', `sqlite:${sqliteDir}`, '--to', empty], env: { CALLBRIDGE_ENCRYPTION_KEY: Buffer.alloc(32, 7).toString('base64') }, code: 1, says: /sip_trunks\.inbound_sip_password_enc holds a value that does not open with the configured security\.encryption_key/ },
    ];
    for (const c of cases) {
      const r = await migrateStore(c.args, c.env);
      expect(r.code, `${c.args.join(' ')}: ${r.stderr}`).toBe(c.code);
      expect(r.stderr).toMatch(c.says);
      expect(r.stderr.trim().split('\n')[0]).toMatch(/^callbridge migrate-store: /);
      expect(r.stderr + r.stdout).not.toContain(URL_PASSWORD);
      expect(r.stdout).toBe('');
    }
    expect(await targetRows(empty)).toBe(0);
  }, 180_000);

  it('refuses a SQLite file a daemon has open', async () => {
    const empty = (await testPostgresDatabase('refusal_in_use')).url;
    const db = new Database(join(sqliteDir, 'callbridge.sqlite'));
    try {
      // A read: the connection now holds its shared lock, as a running daemon's does.
      db.prepare('SELECT count(*) FROM calls').get();
      const r = await migrateStore(['--from', `sqlite:${sqliteDir}`, '--to', empty]);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr).toMatch(/callbridge\.sqlite is in use \(a callbridge daemon running on it\?\)/);
    } finally {
      db.close();
    }
    expect(await targetRows(empty)).toBe(0);
  }, 60_000);

  it('rolls the whole copy back when a table arrives short, counting triggers on again', async () => {
    // A target that silently drops call_tags rows (a BEFORE trigger returning NULL).
    const lossy = (await testPostgresDatabase('lossy')).url;
    const client = new PostgresClient({ url: lossy, poolSize: 1 });
    try {
      await migratePostgres(client, POSTGRES_MIGRATIONS);
      await client.exec(`CREATE FUNCTION drop_row() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN RETURN NULL; END $fn$;
        CREATE TRIGGER drop_tags BEFORE INSERT ON call_tags FOR EACH ROW EXECUTE FUNCTION drop_row();`);
      const r = await migrateStore(['--from', `sqlite:${sqliteDir}`, '--to', lossy]);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr).toMatch(/call_tags: the source has \d+ rows, 0 arrived; rolled back, nothing was written/);
      expect(r.stdout).toBe('');
      expect(await targetRows(lossy)).toBe(0);
      const enabled = await client.all<{ tgenabled: string }>("SELECT tgenabled FROM pg_trigger WHERE tgrelid = CAST('calls' AS regclass) AND NOT tgisinternal");
      // Every counting trigger on calls (call_counts', call_gram_counts') is enabled ('O') again.
      expect(enabled.length).toBeGreaterThan(0);
      expect(enabled.filter((t) => t.tgenabled !== 'O')).toEqual([]);
    } finally {
      await client.close();
    }
  }, 60_000);

  it('copies every table, verified; a daemon on PostgreSQL serves it all with the secrets the command named', async () => {
    const r = await migrateStore(['--from', `sqlite:${sqliteDir}`, '--to', target]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout + r.stderr).not.toContain(URL_PASSWORD);
    expect(r.stdout).toMatch(/^calls\s+28$/m);
    expect(r.stdout).toMatch(/^call_counts\s+\d+\s+\(kept by triggers: copied with them off, equal row for row\)$/m);
    expect(r.stdout).toMatch(/^2 sealed values .* open with the encryption key/m);
    // It names the files, never the secrets in them.
    const keyFile = join(sqliteDir, 'encryption-key');
    const secretFile = join(sqliteDir, 'token-secret');
    expect(r.stdout).toContain(`CALLBRIDGE_ENCRYPTION_KEY=<the contents of ${keyFile}>`);
    expect(r.stdout).toContain(`CALLBRIDGE_TOKEN_SECRET=<the contents of ${secretFile}>`);
    const key = readFileSync(keyFile, 'utf8').trim();
    const tokenSecret = readFileSync(secretFile, 'utf8').trim();
    expect(r.stdout).not.toContain(key);
    expect(r.stdout).not.toContain(tokenSecret);

    // Row for row: every table of the source equal on the target, read through the store's clients.
    const sqlite = new Database(join(sqliteDir, 'callbridge.sqlite'), { readonly: true });
    const pg = new PostgresClient({ url: target, poolSize: 1 });
    try {
      const copied = ['organizations', 'api_keys', 'agents', 'agent_drafts', 'agent_versions', 'telco_numbers', 'sip_trunks', 'sip_trunk_assignments', 'calls', 'call_tags', 'sessions', 'sip_registrations'];
      for (const t of copied) {
        const rows = sqlite.prepare(`SELECT * FROM ${t}`).all() as Array<Record<string, unknown>>;
        expect(rows.length, t).toBeGreaterThan(0);
        expect(canonical(await pg.all(`SELECT * FROM ${t}`)), t).toEqual(canonical(rows));
        expect(r.stdout, t).toMatch(new RegExp(`^${t}\\s+${rows.length}$`, 'm'));
      }
      // The counters equal SQLite's, and equal to a recount of the copied calls (as PostgreSQL's migration 3 counts them).
      const counts = 'SELECT org_id, dim, val, n FROM call_counts WHERE n <> 0';
      expect(canonical(await pg.all(counts))).toEqual(canonical(sqlite.prepare(counts).all() as Array<Record<string, unknown>>));
      expect(canonical(await pg.all(counts))).toEqual(canonical(await pg.all(CALL_COUNTS_RECOUNT)));
      // The counting triggers are on again.
      const triggers = await pg.all<{ tgenabled: string }>("SELECT tgenabled FROM pg_trigger WHERE tgrelid = CAST('calls' AS regclass) AND NOT tgisinternal");
      expect(triggers.length).toBeGreaterThan(0);
      expect(triggers.filter((t) => t.tgenabled !== 'O')).toEqual([]);
    } finally {
      sqlite.close();
      await pg.close();
    }

    // A node on PostgreSQL, with the secrets from those files.
    const node = await startTestDaemon({ store: { url: target, pool_size: 4 }, security: { encryption_key: key, token_secret: tokenSecret }, sip: { enabled: false } }, join(tempDir('callbridge-migrated-node-'), 'data'));
    try {
      const get = async (path: string) => {
        // The API key made on SQLite authenticates on PostgreSQL.
        const res = await node.api('GET', path, undefined, { key: source.key });
        expect(res.status, `${path}: ${res.text}`).toBe(200);
        return res.body;
      };
      expect(node.key).toBe(''); // the database had a key: no new organization was made
      expect((await get(`/v1/agents/${filled.agentId}`)).name).toBe('Front desk');
      expect((await get('/v1/agents')).map((a: { name: string }) => a.name).sort()).toEqual(['Front desk', 'Night shift']);
      expect((await get(`/v1/agents/${filled.agentId}/versions/${filled.versionId}`)).version.published_at).toEqual(expect.any(String));
      expect((await get(`/v1/agents/${filled.agentId}/draft`)).nodes[0]).toMatchObject({ id: 'n1', type: 'tool', name: 'lookup' });
      expect((await get(`/v1/sip-trunks/${filled.trunkId}`)).inbound_sip_username).toBe('mig-user-1');
      expect((await get(`/v1/sip-trunks/assignments/${filled.assignmentId}`)).number).toBe('200');
      // The sealed values open with the key the command named.
      expect((await node.daemon.store.sipTrunks.credentials(filled.trunkId))?.inbound).toEqual({ username: 'mig-user-1', password: TRUNK_PASSWORD });
      const org = (await node.daemon.store.organizations.byApiKey(source.key))!;
      expect((await node.daemon.store.telcoNumbers.credentials(org.id, filled.numberId))?.auth_token).toBe(CARRIER_TOKEN);
      expect(await node.daemon.store.registrations.live(filled.trunkId, Date.now())).toHaveLength(1);
      // The history: the same totals, filters served by the counters, the search, a call's transcript and tags.
      expect((await get('/v1/calls')).pagination.total).toBe(filled.total);
      expect((await get('/v1/calls?page_size=100&status=ended')).pagination.total).toBeGreaterThan(0);
      expect((await get('/v1/calls?search=0001111')).calls.map((c: { from: string }) => c.from)).toEqual(['+15550001111']);
      const call = await get(`/v1/calls/${filled.callIds[0]}`);
      expect(call.transcript.entries[0]).toMatchObject({ message: 'hello 0' });
      expect(call.tags).toEqual(['batch-0', 'vip']);
      // New writes continue after the copied rows, counted by the triggers.
      expect((await node.api('POST', '/v1/session-token', { agent_id: filled.agentId, caller_id: '+15550003333' }, { key: source.key })).status).toBe(200);
      expect((await get('/v1/calls')).pagination.total).toBe(filled.total + 1);
    } finally {
      await node.close();
    }

    // A second run refuses: the target holds data; nothing changes.
    const before = await targetRows(target);
    const again = await migrateStore(['--from', `sqlite:${sqliteDir}`, '--to', target]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/the PostgreSQL database already holds data \(.*organizations.*\): migrate-store copies into an empty database only/);
    expect(again.stderr).not.toContain(URL_PASSWORD);
    expect(await targetRows(target)).toBe(before);
  }, 120_000);
});
