/**
 * docs/configuration.md's table of settings is the one scripts/config-table.ts generates from the
 * convict schema, so a setting added, removed or re-documented in src/config.ts without
 * regenerating the table (`npx tsx scripts/config-table.ts --write`) fails here.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CONFIG_DOC, configTable, documentedTable, withTable } from '../../scripts/config-table.ts';

describe('docs/configuration.md: the generated table of settings', () => {
  const markdown = readFileSync(CONFIG_DOC, 'utf8');

  it('holds exactly the table generated from src/config.ts (else run: npx tsx scripts/config-table.ts --write)', () => {
    expect(documentedTable(markdown)).toBe(configTable());
  });

  it('has one row per setting of the schema, none of them empty', () => {
    const rows = configTable().trim().split('\n').slice(2);
    expect(rows.length).toBeGreaterThan(50);
    for (const row of rows) expect(row, row).toMatch(/^\| `[a-z0-9_.]+` \| (`CALLBRIDGE_[A-Z0-9_]+`)? \| .+ \| .+ \|$/);
  });

  it('regenerating leaves the file as it is (--write replaces only the table)', () => {
    expect(withTable(markdown, configTable())).toBe(markdown);
  });
});
