/**
 * /v1/api-keys (ours; docs/api-keys.md) against a real daemon on both store backends: a key is
 * shown once and stored hashed, listed without it, revoked and refused from the next request on;
 * an organization's last key cannot be revoked; another organization's keys are 404. On
 * PostgreSQL a second daemon on the same database (another node) refuses a key revoked on the
 * first at once, although it had just accepted it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';
import { forEachStoreBackend, TEST_ENCRYPTION_KEY, testPostgresDatabase, type StoreBackend } from '../helpers/store-backends.ts';
import { untilAsync } from '../helpers/until.ts';

const MISSING = '00000000-0000-4000-8000-000000000000';
const TOKEN_SECRET = Buffer.alloc(32, 0x21).toString('base64');

interface KeyRecord {
  id: string;
  name: string;
  prefix: string;
  created_at: string;
  last_used_at: string | null;
  current: boolean;
}

let databases = 0;
async function overridesFor(backend: StoreBackend): Promise<Record<string, unknown>> {
  const base = { sip: { enabled: false } };
  if (backend === 'sqlite') return base;
  databases += 1;
  const { url } = await testPostgresDatabase(`api_keys_${databases}`);
  return { ...base, store: { url, pool_size: 4 }, security: { encryption_key: TEST_ENCRYPTION_KEY, token_secret: TOKEN_SECRET } };
}

forEachStoreBackend((backend) =>
  describe('/v1/api-keys', () => {
    let d: TestDaemon;
    /** PostgreSQL: a second node on the same database; SQLite: the same daemon. */
    let other: TestDaemon;
    beforeAll(async () => {
      const overrides = await overridesFor(backend);
      d = await startTestDaemon(overrides);
      other = backend === 'postgres' ? await startTestDaemon(overrides) : d;
    });
    afterAll(async () => {
      if (other !== d) await other?.close();
      await d?.close();
    });

    const list = async (key: string) => {
      const r = await d.api<KeyRecord[]>('GET', '/v1/api-keys', undefined, { key });
      expect(r.status, r.text).toBe(200);
      return r;
    };

    it('creates a key shown once (stored hashed), lists it without the key, revokes it: refused at once, on every node', async () => {
      const created = await d.api('POST', '/v1/api-keys', { name: 'ci deploys' });
      expect(created.status, created.text).toBe(201);
      const { key, ...record } = created.body as KeyRecord & { key: string };
      expect(key).toMatch(/^cbk_[A-Za-z0-9_-]{32}$/);
      expect(record).toEqual({ id: expect.any(String), name: 'ci deploys', prefix: key.slice(0, 10), created_at: expect.any(String), last_used_at: null, current: false });
      const stored = await d.daemon.store.client.all<Record<string, unknown>>('SELECT * FROM api_keys WHERE id = ?', [record.id]);
      expect(JSON.stringify(stored)).not.toContain(key);

      // Listed by the initial key (marked current), never with the key itself.
      const byInitial = await list(d.key);
      expect(byInitial.text).not.toContain(key);
      expect(byInitial.body).toContainEqual(record);
      expect(byInitial.body.find((k) => k.current)).toMatchObject({ name: 'initial key', prefix: d.key.slice(0, 10) });

      // The new key works on both nodes, and its use is noted.
      expect((await other.api('GET', '/v1/agents', undefined, { key })).status).toBe(200);
      expect((await list(key)).body.find((k) => k.current)?.id).toBe(record.id);
      await untilAsync(async () => (await list(d.key)).body.find((k) => k.id === record.id)?.last_used_at !== null, 'last_used_at written');

      expect((await d.api('DELETE', `/v1/api-keys/${record.id}`)).status).toBe(204);
      // Refused from the next request on, also by the node that had just accepted it.
      for (const node of [d, other]) {
        const refused = await node.api('GET', '/v1/agents', undefined, { key });
        expect(refused.status).toBe(401);
        expect(refused.body).toEqual({ error: 'invalid API key' });
      }
      expect((await list(d.key)).body.map((k) => k.id)).not.toContain(record.id);
      expect((await d.api('DELETE', `/v1/api-keys/${record.id}`)).status).toBe(404);
    });

    it("a key may revoke itself, but not the organization's last one (409)", async () => {
      const second = (await d.api('POST', '/v1/api-keys', undefined)).body as KeyRecord & { key: string };
      expect(second.name).toBe('');
      expect((await d.api('DELETE', `/v1/api-keys/${second.id}`, undefined, { key: second.key })).status).toBe(204);
      expect((await d.api('GET', '/v1/agents', undefined, { key: second.key })).status).toBe(401);

      const loneKey = await d.newOrgKey('lone');
      const lone = (await list(loneKey)).body;
      expect(lone).toHaveLength(1);
      const refused = await d.api('DELETE', `/v1/api-keys/${lone[0]!.id}`, undefined, { key: loneKey });
      expect(refused.status, refused.text).toBe(409);
      expect(refused.body.error).toMatch(/last active API key/);
      expect((await d.api('GET', '/v1/agents', undefined, { key: loneKey })).status).toBe(200);
    });

    it('two keys revoking each other at the same moment (on two nodes, on PostgreSQL): one wins, the organization keeps a key', async () => {
      const orgKey = await d.newOrgKey(`pair ${backend}`);
      const second = (await d.api('POST', '/v1/api-keys', { name: 'second' }, { key: orgKey })).body as KeyRecord & { key: string };
      const first = (await list(orgKey)).body.find((k) => k.current)!;
      const answers = await Promise.all([
        d.api('DELETE', `/v1/api-keys/${second.id}`, undefined, { key: orgKey }),
        other.api('DELETE', `/v1/api-keys/${first.id}`, undefined, { key: second.key }),
      ]);
      // The loser is refused as the last key (409), or, when the winner's revocation came first,
      // as a revoked key (401).
      const statuses = answers.map((a) => a.status);
      expect(statuses.filter((s) => s === 204), JSON.stringify(statuses)).toHaveLength(1);
      expect(statuses.filter((s) => s !== 204)[0]).toBeOneOf([409, 401]);
      const survivor = answers[0]!.status === 204 ? orgKey : second.key;
      expect((await list(survivor)).body).toHaveLength(1);
    });

    it("another organization's keys are 404 and never listed; bad input is 400", async () => {
      const otherOrgKey = await d.newOrgKey('other org');
      const mine = (await list(d.key)).body;
      const theirs = (await list(otherOrgKey)).body;
      expect(theirs.map((k) => k.id)).not.toEqual(expect.arrayContaining([mine[0]!.id]));
      expect(theirs.every((k) => !mine.some((m) => m.id === k.id))).toBe(true);
      const r = await d.api('DELETE', `/v1/api-keys/${mine[0]!.id}`, undefined, { key: otherOrgKey });
      expect(r.status).toBe(404);
      expect(r.body).toEqual({ error: 'api key not found' });
      expect((await d.api('GET', '/v1/agents')).status).toBe(200);

      expect((await d.api('DELETE', `/v1/api-keys/${MISSING}`)).status).toBe(404);
      expect((await d.api('DELETE', '/v1/api-keys/not-a-uuid')).status).toBe(400);
      const unknownField = await d.api('POST', '/v1/api-keys', { name: 'x', org_id: MISSING });
      expect(unknownField.status).toBe(400);
      expect(unknownField.body.error).toMatch(/org_id/);
      expect((await d.api('POST', '/v1/api-keys', { name: 'x'.repeat(1000) })).status).toBe(400);
      expect((await d.api('GET', '/v1/api-keys', undefined, { key: null })).status).toBe(401);
    });
  }),
);
