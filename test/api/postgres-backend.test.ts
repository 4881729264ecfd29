/**
 * The daemon on a PostgreSQL store (store.url), end to end through REST: an agent with a published
 * version, a SIP trunk with a password, an assignment, calls listed with a search; then the daemon
 * restarted on the same database, and a second daemon with a fresh data directory (another node),
 * finding all of it, the trunk password still decryptable with the configured key. A wrong
 * password in store.url stops start-up with a message that does not repeat it; /readyz says when
 * the database cannot be reached.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { PASSWORD_ROLE, postgresAvailability, startPostgres, type PostgresServer } from '../helpers/postgres.ts';
import { delay } from '../helpers/until.ts';
import { PROBE_INTERVAL_MS, PROBE_TIMEOUT_MS } from '../../src/store/store-probe.ts';

const KEY = Buffer.alloc(32, 0x3c).toString('base64');
const TOKEN_SECRET = Buffer.alloc(32, 0x4d).toString('base64');
const TRUNK_PASSWORD = 'trunk-Secret-51c2e9';
const URL_PASSWORD = 'url-Pw-60e1b7';
const pgAvailable = postgresAvailability();

describe.skipIf(pgAvailable.skip)(`the daemon on a PostgreSQL store${pgAvailable.skip ? `: skipped, ${pgAvailable.reason}` : ''}`, () => {
  let server: PostgresServer;
  let url: string;
  const daemons: TestDaemon[] = [];
  const overrides = () => ({ store: { url, pool_size: 4 }, security: { encryption_key: KEY, token_secret: TOKEN_SECRET }, sip: { enabled: false } });

  beforeAll(async () => {
    server = await startPostgres();
    // The superuser authenticates by trust: the password in the URL is not checked, but the
    // daemon must keep it out of its logs all the same.
    url = (await server.createDatabase('daemon_store')).replace('callbridge@', `callbridge:${URL_PASSWORD}@`);
  });
  afterAll(async () => {
    for (const d of daemons) await d.close().catch(() => {});
    await server?.stop();
  });

  it('keeps what REST wrote across a restart and shows it to a second node; the trunk password stays usable', async () => {
    const logLines: string[] = [];
    const a = await startTestDaemon(overrides(), undefined, {}, logLines);
    daemons.push(a);
    // The start-up line names the backend and the server, never the password.
    const listening = logLines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'callbridge listening');
    expect(listening).toMatchObject({ store: 'postgres', storeLocation: `postgres://callbridge:***@127.0.0.1:${server.port}/daemon_store` });
    const api = a.api.bind(a);
    const ok = async (method: string, path: string, body?: unknown, status = 200) => {
      const r = await api(method, path, body);
      expect(r.status, `${method} ${path}: ${r.text}`).toBe(status);
      return r.body;
    };
    const agent = await ok('POST', '/v1/agents', { name: 'Front desk', prompt: 'Be brief.' }, 201);
    const version = await ok('POST', `/v1/agents/${agent.id}/versions`, { tag: 'v1' }, 201);
    await ok('POST', `/v1/agents/${agent.id}/versions/${version.id}/publish`);
    const trunk = await ok('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'pbx', inbound_sip_username: 'pg-user-1', inbound_sip_password: TRUNK_PASSWORD }, 201);
    const assignment = await ok('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, number: '200' }, 201);
    // Two calls (web sessions' call rows), told apart by the search.
    await ok('POST', '/v1/session-token', { agent_id: agent.id, caller_id: '+15550001111' });
    await ok('POST', '/v1/session-token', { agent_id: agent.id, caller_id: 'desk-42' });
    const search = async (d: TestDaemon, s: string) => {
      const r = await d.api('GET', `/v1/calls?search=${encodeURIComponent(s)}`, undefined, { key: a.key });
      expect(r.status, r.text).toBe(200);
      return (r.body.calls as Array<{ from: string }>).map((c) => c.from);
    };
    expect(await search(a, '0001')).toEqual(['+15550001111']);
    expect(await search(a, 'sk-4')).toEqual(['desk-42']);
    expect(await search(a, '%')).toEqual([]);
    // A duplicate digest username is the API's 409, from PostgreSQL's unique violation.
    const dup = await api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'again', inbound_sip_username: 'pg-user-1', inbound_sip_password: 'x-Secret-1234' });
    expect(dup.status, dup.text).toBe(409);
    // The trunk's record never shows the password; the database holds it sealed.
    const raw = new pg.Client({ connectionString: url });
    await raw.connect();
    try {
      const row = (await raw.query('SELECT inbound_sip_password_enc FROM sip_trunks WHERE id = $1', [trunk.id])).rows[0] as { inbound_sip_password_enc: string };
      expect(row.inbound_sip_password_enc).not.toContain(TRUNK_PASSWORD);
    } finally {
      await raw.end();
    }

    const checkAll = async (d: TestDaemon) => {
      const get = async (path: string) => {
        const r = await d.api('GET', path, undefined, { key: a.key });
        expect(r.status, `${path}: ${r.text}`).toBe(200);
        return r.body;
      };
      expect((await get(`/v1/agents/${agent.id}`)).name).toBe('Front desk');
      expect((await get(`/v1/agents/${agent.id}/versions/${version.id}`)).version.published_at).toEqual(expect.any(String));
      expect((await get(`/v1/sip-trunks/${trunk.id}`)).inbound_sip_username).toBe('pg-user-1');
      expect((await get(`/v1/sip-trunks/assignments/${assignment.id}`)).number).toBe('200');
      expect(await search(d, '0001')).toEqual(['+15550001111']);
      // Decrypted with the configured key (what a digest challenge of that trunk checks against).
      expect((await d.daemon.store.sipTrunks.credentials(trunk.id))?.inbound).toEqual({ username: 'pg-user-1', password: TRUNK_PASSWORD });
    };

    // The same node restarted.
    const a2 = await a.restart();
    daemons.splice(daemons.indexOf(a), 1, a2);
    await checkAll(a2);
    expect(logLines.join('\n')).not.toContain(URL_PASSWORD);
    // Another node: its own (empty) data directory, the same database and secrets.
    // (not created yet: the daemon makes it, as `npm start` does with ./data)
    const otherDir = join(mkdtempSync(join(tmpdir(), 'callbridge-node-b-')), 'data');
    try {
      const b = await startTestDaemon(overrides(), otherDir);
      daemons.push(b);
      await checkAll(b);
      // A write on one node is read on the other at once.
      const renamed = await b.api('PATCH', `/v1/agents/${agent.id}`, { name: 'Renamed on B' }, { key: a.key });
      expect(renamed.status, renamed.text).toBe(200);
      expect((await a2.api('GET', `/v1/agents/${agent.id}`)).body.name).toBe('Renamed on B');
    } finally {
      rmSync(dirname(otherDir), { recursive: true, force: true });
    }
  });

  it('refuses to start with a wrong password in store.url, saying why without the password', async () => {
    const admin = new pg.Client({ connectionString: server.url('postgres') });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE ${PASSWORD_ROLE} LOGIN PASSWORD 'the-Right-one-77'`);
    } finally {
      await admin.end();
    }
    const wrong = 'not-the-Password-93';
    const dir = mkdtempSync(join(tmpdir(), 'callbridge-pg-wrong-'));
    try {
      const started = startTestDaemon({ ...overrides(), store: { url: server.url('daemon_store', PASSWORD_ROLE, wrong) } }, dir);
      const err = (await started.then(
        (d) => {
          daemons.push(d);
          throw new Error('the daemon started');
        },
        (e: unknown) => e,
      )) as Error;
      expect(err.message).toMatch(/password authentication failed|refused/i);
      expect(err.message).toContain(`127.0.0.1:${server.port}`);
      expect(err.message).not.toContain(wrong);
      expect(JSON.stringify(err, Object.getOwnPropertyNames(err))).not.toContain(wrong);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  // Last: it stops the server.
  it('/readyz turns 503 naming the store once PostgreSQL cannot be reached', async () => {
    const d = daemons.find((x) => x.key !== '') ?? daemons[0]!;
    expect((await d.api('GET', '/readyz')).status).toBe(200);
    await server.stop();
    const end = Date.now() + PROBE_INTERVAL_MS + PROBE_TIMEOUT_MS + 2000;
    let r = await d.api('GET', '/readyz');
    while (r.status === 200 && Date.now() < end) {
      await delay(100);
      r = await d.api('GET', '/readyz');
    }
    expect(r.status, r.text).toBe(503);
    expect(r.body.status).toBe('unavailable');
    expect(r.body.reason).toMatch(/^store unreachable: /);
    expect(r.body.reason).toContain(`127.0.0.1:${server.port}`);
    expect((await d.api('GET', '/healthz')).status).toBe(200);
  });
});
