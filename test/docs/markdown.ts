/**
 * Small readers of the repository's Markdown for the docs tests: the files, their sections, their
 * tables and their links, with fenced code blocks left out (a link or table inside a code block
 * is text, not part of the document).
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)));

export const readRepoFile = (path: string): string => readFileSync(join(ROOT, path), 'utf8');

/** README.md and every docs/*.md, as repository-relative paths. */
export function documentedFiles(): string[] {
  const docs = readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`);
  return ['README.md', ...docs];
}

/** The lines of a Markdown text outside fenced code blocks, each with its 1-based line number. */
export function proseLines(markdown: string): { line: number; text: string }[] {
  const out: { line: number; text: string }[] = [];
  let fenced = false;
  markdown.split('\n').forEach((text, i) => {
    if (/^\s*```/.test(text)) {
      fenced = !fenced;
      return;
    }
    if (!fenced) out.push({ line: i + 1, text });
  });
  return out;
}

/** The text of the section under `heading` (a whole heading line), up to the next heading of the same or a higher level. */
export function section(markdown: string, heading: string): string {
  const lines = markdown.split('\n');
  const start = lines.findIndex((l) => l.trim() === heading);
  if (start < 0) throw new Error(`no heading "${heading}"`);
  const level = /^#+/.exec(heading)![0].length;
  const end = lines.findIndex((l, i) => i > start && new RegExp(`^#{1,${level}}\\s`).test(l));
  return lines.slice(start + 1, end < 0 ? undefined : end).join('\n');
}

/** The cells of a Markdown table row (`| a | b |`), trimmed; undefined for a line that is no row. */
export function tableCells(line: string): string[] | undefined {
  const t = line.trim();
  if (!t.startsWith('|') || !t.endsWith('|')) return undefined;
  // Pipes inside inline code are not cell separators.
  const cells: string[] = [];
  let cell = '';
  let code = false;
  for (const ch of t.slice(1, -1)) {
    if (ch === '`') code = !code;
    if (ch === '|' && !code) {
      cells.push(cell.trim());
      cell = '';
    } else cell += ch;
  }
  cells.push(cell.trim());
  return cells;
}

/** Every inline link target `[text](target)` outside code, with its line. */
export function links(markdown: string): { line: number; target: string }[] {
  const out: { line: number; target: string }[] = [];
  for (const { line, text } of proseLines(markdown)) {
    const withoutCode = text.replace(/`[^`]*`/g, '');
    for (const m of withoutCode.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) out.push({ line, target: m[1]! });
  }
  return out;
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
export function headingAnchor(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The anchors of every heading of a Markdown text (duplicates get -1, -2 as on GitHub). */
export function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const { text } of proseLines(markdown)) {
    const m = /^#{1,6}\s+(.*)$/.exec(text);
    if (!m) continue;
    const base = headingAnchor(m[1]!);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}
