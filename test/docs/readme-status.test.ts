/**
 * README.md's "Status" section cannot contradict docs/status.md. The convention both follow:
 *
 * - docs/status.md lists capabilities in tables `| capability | state | doc |`, state one of
 *   `works`, `partial`, `not built`, the doc a link; every capability not `works` has a bullet
 *   `- **<capability>**: ...` under its "## Limits" heading saying what is missing.
 * - README.md's "## Status" has one list item per state, `- **<state>**: A; B; C.`, naming
 *   capabilities exactly as docs/status.md does; the `works` item may instead say
 *   `every capability of docs/status.md not named below.` (WORKS_REST), so that the newcomer's
 *   page lists what is missing, not the long list of what works.
 *
 * Every capability that is not `works` must appear in the README under the state docs/status.md
 * gives it, every capability the README names must have that state there, and without
 * WORKS_REST every working one must be named too. So README can neither call missing something
 * that works (the mistake this test exists for) nor the other way round.
 */
import { describe, expect, it } from 'vitest';
import { readRepoFile, section, tableCells } from './markdown.ts';

const STATES = ['works', 'partial', 'not built'] as const;
type State = (typeof STATES)[number];
/** README's `works` item when it names no capability: everything docs/status.md does not list as partial or not built. */
const WORKS_REST = 'every capability of docs/status.md not named below';

/** capability -> state, from every `| capability | state | doc |` table of docs/status.md. */
function statusTable(markdown: string): Map<string, { state: string; doc: string }> {
  const out = new Map<string, { state: string; doc: string }>();
  let inTable = false;
  for (const line of markdown.split('\n')) {
    const cells = tableCells(line);
    if (!cells) {
      inTable = false;
      continue;
    }
    if (cells.join('|') === 'capability|state|doc') {
      inTable = true;
      continue;
    }
    if (!inTable || cells.every((c) => /^-+$/.test(c))) continue;
    const [capability, state, doc] = cells;
    if (capability === undefined || state === undefined || doc === undefined || cells.length !== 3) throw new Error(`docs/status.md: a row that is not | capability | state | doc |: ${line}`);
    if (out.has(capability)) throw new Error(`docs/status.md: "${capability}" is listed twice`);
    out.set(capability, { state, doc });
  }
  return out;
}

/** capability -> state, from README's `- **<state>**: A; B; C.` items under "## Status"; worksRest: the works item is WORKS_REST. */
function readmeStatus(markdown: string): { named: Map<string, string>; worksRest: boolean } {
  const items: string[] = [];
  for (const line of section(markdown, '## Status').split('\n')) {
    if (/^- /.test(line)) items.push(line.slice(2));
    else if (/^\s+\S/.test(line) && items.length > 0) items[items.length - 1] += ' ' + line.trim();
  }
  const out = new Map<string, string>();
  let worksRest = false;
  for (const item of items) {
    const m = /^\*\*([^*]+)\*\*:\s*(.*?)\.?\s*$/.exec(item);
    if (!m) throw new Error(`README.md "## Status": an item that is not "- **<state>**: A; B; C.": ${item}`);
    if (m[1] === 'works' && m[2] === WORKS_REST) {
      worksRest = true;
      continue;
    }
    for (const name of m[2]!.split(';').map((s) => s.trim())) {
      if (out.has(name)) throw new Error(`README.md "## Status": "${name}" is listed twice`);
      out.set(name, m[1]!);
    }
  }
  return { named: out, worksRest };
}

describe('README "Status" agrees with docs/status.md', () => {
  const status = statusTable(readRepoFile('docs/status.md'));
  const { named: readme, worksRest } = readmeStatus(readRepoFile('README.md'));

  it('docs/status.md: every capability has a known state and a linked doc', () => {
    expect(status.size).toBeGreaterThan(20);
    for (const [capability, { state, doc }] of status) {
      expect(STATES, `"${capability}": state "${state}"`).toContain(state as State);
      expect(doc, `"${capability}": doc`).toMatch(/^\[[^\]]+\]\([^)]+\)/);
    }
  });

  it('docs/status.md: every capability that is not "works" says under "## Limits" what is missing', () => {
    const limits = section(readRepoFile('docs/status.md'), '## Limits');
    const missing = [...status].filter(([c, { state }]) => state !== 'works' && !limits.includes(`- **${c}**:`)).map(([c]) => c);
    expect(missing, `no "- **<capability>**:" bullet under "## Limits" for: ${missing.join(', ')}`).toEqual([]);
  });

  it('README names every capability under the state docs/status.md gives it (the working ones may be left to WORKS_REST), and no other', () => {
    const wrong: string[] = [];
    for (const [capability, { state }] of status) {
      const said = readme.get(capability);
      if (said === undefined && state === 'works' && worksRest) continue;
      if (said === undefined) wrong.push(`"${capability}" (${state} in docs/status.md) is missing from README`);
      else if (said !== state) wrong.push(`"${capability}": README says ${said}, docs/status.md says ${state}`);
    }
    for (const [capability, state] of readme) {
      if (!status.has(capability)) wrong.push(`README names "${capability}" (${state}), which docs/status.md does not list`);
    }
    expect(wrong, wrong.join('\n')).toEqual([]);
  });
});
