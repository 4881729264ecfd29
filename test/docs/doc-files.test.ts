/**
 * The README and docs/ stay readable and whole: the README is a newcomer's page (under 15 KB, the
 * long material lives in docs/), docs/benchmarks.md keeps the latest figures and not every run
 * (under 40 KB; the history is in git), and every relative link of README.md and docs/*.md leads
 * to a file of this repository, and to a heading of it when the link names one. A clone has
 * nothing outside the repository, so a link out of it is broken for every reader.
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, anchors, documentedFiles, links, readRepoFile } from './markdown.ts';

const README_MAX_BYTES = 15_000;
const BENCHMARKS_MAX_BYTES = 40_000;

describe('docs: sizes', () => {
  it(`README.md is under ${README_MAX_BYTES} bytes`, () => {
    expect(statSync(join(ROOT, 'README.md')).size).toBeLessThan(README_MAX_BYTES);
  });
  it(`docs/benchmarks.md is under ${BENCHMARKS_MAX_BYTES} bytes`, () => {
    expect(statSync(join(ROOT, 'docs/benchmarks.md')).size).toBeLessThan(BENCHMARKS_MAX_BYTES);
  });
});

describe('docs: relative links', () => {
  it('no doc points at ../shared/ (the contract files beside the checkout, which a clone does not have)', () => {
    const outside = documentedFiles().flatMap((file) =>
      readRepoFile(file)
        .split('\n')
        .flatMap((text, i) => (text.includes('../shared/') ? [`${file}:${i + 1}: ${text.trim()}`] : [])),
    );
    expect(outside, outside.join('\n')).toEqual([]);
  });

  it('every relative link of README.md and docs/*.md resolves to a file (and heading) of the repository', () => {
    const broken: string[] = [];
    for (const file of documentedFiles()) {
      const markdown = readRepoFile(file);
      for (const { line, target } of links(markdown)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto: ...
        const [path, anchor] = target.split('#', 2) as [string, string | undefined];
        const resolved = path === '' ? file : normalize(join(dirname(file), decodeURIComponent(path)));
        const where = `${file}:${line}: (${target})`;
        if (resolved.startsWith('..') || relative(ROOT, join(ROOT, resolved)).startsWith('..')) {
          broken.push(`${where} leaves the repository`);
          continue;
        }
        if (!existsSync(join(ROOT, resolved))) {
          broken.push(`${where} names no file`);
          continue;
        }
        if (anchor && resolved.endsWith('.md') && !anchors(readRepoFile(resolved)).has(anchor)) {
          broken.push(`${where}: ${resolved} has no heading #${anchor}`);
        }
      }
    }
    expect(broken, broken.join('\n')).toEqual([]);
  });
});
