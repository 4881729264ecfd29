/**
 * Migration 14: assignments stored at schema version 13 come out with their trunk's org_id and
 * every value kept; afterwards alternate_number is unique within an organization only (the
 * PostgreSQL twin runs the same SQL: test/store/postgres-schema.test.ts compares the schemas).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Database } from '../../src/store/sqlite-driver.ts';
import { isUniqueViolation, migrate, type Db } from '../../src/store/db.ts';
import { SqliteClient } from '../../src/store/sqlite-client.ts';
import { MIGRATIONS } from '../../src/store/migrations.ts';
import { insertOrganization } from '../helpers/old-schema.ts';
import { AgentRepo } from '../../src/store/agents.ts';
import { SipTrunkRepo } from '../../src/store/sip-trunks.ts';
import { AssignmentRepo } from '../../src/store/assignments.ts';
import { SecretBox } from '../../src/store/secret-box.ts';
import { trunkForCreate } from '../../src/domain/sip-trunk.ts';
import { newId } from '../../src/domain/ids.ts';

const AT = '2026-01-01T00:00:00.000Z';

describe('migration 14: assignments carry their organization; alternate_number unique per organization', () => {
  let dir: string;
  let db: Db;
  let client: SqliteClient;
  const orgs: string[] = [];
  const trunks: string[] = [];
  const agents: string[] = [];
  const assignments: string[] = [];

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'assignments-migration-'));
    db = new Database(join(dir, 'db.sqlite'));
    db.pragma('foreign_keys = ON');
    client = new SqliteClient(db);
    await migrate(client, MIGRATIONS.filter((m) => m.version <= 13));
    orgs.length = trunks.length = agents.length = assignments.length = 0;
    const trunkRepo = new SipTrunkRepo(client, new SecretBox(randomBytes(32)));
    for (const name of ['Org One', 'Org Two']) {
      const org = await insertOrganization(client, name);
      const trunk = newId();
      const agent = newId();
      await trunkRepo.insert({ id: trunk, org_id: org, settings: trunkForCreate({ pbx: 'generic', name: 't', inbound_auth_type: 'acl', inbound_acl: ['192.0.2.0/24'] }), passwords: {}, created_at: AT });
      await new AgentRepo(client).insert({ id: agent, org_id: org, name: 'a', status: 'active', phone_number_id: null, settings: {} as never, created_at: AT });
      orgs.push(org);
      trunks.push(trunk);
      agents.push(agent);
    }
    // Version 13's shape: no org_id; alternate_number unique across organizations.
    for (const [i, n] of [
      [0, '100'],
      [1, '200'],
    ] as const) {
      const id = newId();
      db.prepare('INSERT INTO sip_trunk_assignments (id, sip_trunk_id, agent_id, number, alternate_number, created_at) VALUES (?, ?, ?, ?, ?, ?)').run(id, trunks[i], agents[i], `5${i}`, n, AT);
      assignments.push(id);
    }
    await migrate(client, MIGRATIONS);
  });
  afterEach(() => {
    db.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('keeps every value and copies the trunk’s organization', () => {
    const rows = db.prepare('SELECT id, org_id, sip_trunk_id, agent_id, number, alternate_number, created_at FROM sip_trunk_assignments ORDER BY alternate_number').all();
    expect(rows).toEqual([
      { id: assignments[0], org_id: orgs[0], sip_trunk_id: trunks[0], agent_id: agents[0], number: '50', alternate_number: '100', created_at: AT },
      { id: assignments[1], org_id: orgs[1], sip_trunk_id: trunks[1], agent_id: agents[1], number: '51', alternate_number: '200', created_at: AT },
    ]);
  });

  it('another organization may take the same alternate_number; the same organization may not', async () => {
    const repo = new AssignmentRepo(client);
    await repo.insert({ id: newId(), sip_trunk_id: trunks[1]!, agent_id: agents[1]!, number: null, alternate_number: '100', created_at: AT });
    expect((await repo.alternateClaims('100')).map((c) => c.org_id).sort()).toEqual([...orgs].sort());
    const again = repo.insert({ id: newId(), sip_trunk_id: trunks[1]!, agent_id: agents[1]!, number: null, alternate_number: '100', created_at: AT });
    await expect(again).rejects.toSatisfy((err: unknown) => isUniqueViolation(err, 'alternate_number'));
  });

  it('deleting the organization deletes its assignments (the new foreign key cascades)', () => {
    db.prepare('DELETE FROM organizations WHERE id = ?').run(orgs[0]);
    expect(db.prepare('SELECT id FROM sip_trunk_assignments').all()).toEqual([{ id: assignments[1] }]);
  });
});
