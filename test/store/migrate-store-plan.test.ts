/**
 * migrate-store's plan, on schemas described by hand: the foreign-key order, the tables left to
 * each side, and the refusals that keep data from being lost. (test/store/migrate-store.test.ts
 * runs the command on real databases.)
 */
import { describe, expect, it } from 'vitest';
import { planCopy } from '../../src/store/migrate-store/plan.ts';
import { foreignKeyOrder, type TargetSchema } from '../../src/store/migrate-store/postgres-target.ts';
import { insertTargets } from '../../src/store/migrate-store/sqlite-source.ts';

const col = (name: string) => ({ name, type: 'text', sequenced: false });

function target(tables: Record<string, string[]>, references: Record<string, string[]> = {}, derived: string[] = [], deriving: string[] = []): TargetSchema {
  return {
    tables: new Map(Object.entries(tables).map(([t, cs]) => [t, cs.map(col)])),
    references: new Map(Object.entries(references).map(([t, ps]) => [t, new Set(ps)])),
    derived: new Set(derived),
    deriving: new Set(deriving),
  };
}

describe('migrate-store plan', () => {
  it('orders parents before children, whatever the names say', () => {
    expect(foreignKeyOrder(['a_child', 'b_grandchild', 'z_parent'], new Map([['a_child', new Set(['z_parent'])], ['b_grandchild', new Set(['a_child'])]]))).toEqual(['z_parent', 'a_child', 'b_grandchild']);
  });

  it('refuses a foreign-key cycle, naming its tables', () => {
    expect(() => foreignKeyOrder(['a', 'b', 'c'], new Map([['a', new Set(['b'])], ['b', new Set(['a'])]]))).toThrow(/a, b form a cycle/);
  });

  it('copies the tables of both, counters with their triggers off; leaves SQLite derived tables and the bookkeeping', () => {
    const plan = planCopy(
      [
        { name: 'calls', columns: ['id', 'org_id'] },
        { name: 'call_counts', columns: ['org_id', 'n'] },
        { name: 'organizations', columns: ['id'] },
        { name: 'call_search', columns: ['id', 'party_number'] },
        { name: 'schema_migrations', columns: ['version'] },
      ],
      new Set(['call_search', 'call_counts']),
      target(
        { calls: ['id', 'org_id', 'node_id'], call_counts: ['org_id', 'n'], organizations: ['id'], schema_migrations: ['version'], cluster_nodes: ['id'] },
        { calls: ['organizations'], call_counts: ['organizations'] },
        ['call_counts'],
        ['calls'],
      ),
    );
    expect(plan.copied.map((t) => [t.name, t.derived])).toEqual([
      ['organizations', false],
      ['call_counts', true],
      ['calls', false],
    ]);
    expect(plan.triggersOff).toEqual(['calls']);
    expect(plan.sqliteOnly).toEqual(['call_search']);
    // Every target table must be empty, those SQLite does not have included.
    expect(plan.targetTables).toEqual(['call_counts', 'calls', 'cluster_nodes', 'organizations']);
  });

  it('refuses what would lose data: a SQLite table or column PostgreSQL lacks', () => {
    expect(() => planCopy([{ name: 'notes', columns: ['id'] }], new Set(), target({}))).toThrow(/the SQLite table notes has no counterpart in the PostgreSQL schema/);
    expect(() => planCopy([{ name: 'calls', columns: ['id', 'extra'] }], new Set(), target({ calls: ['id'] }))).toThrow(/the PostgreSQL table calls has no column extra/);
  });

  it('finds the tables a trigger body inserts into', () => {
    expect(insertTargets(`BEGIN INSERT INTO call_counts (a) VALUES (1) ON CONFLICT DO NOTHING; insert or ignore into "call_search"(x) values (2); UPDATE t SET n = 1; END`)).toEqual(['call_counts', 'call_search']);
  });
});
