/**
 * No class in src/bridge or src/agent (providers included) is longer than 250 lines, counted from
 * its `class` line to its closing brace. Both folders hold classes that kept taking on jobs
 * (call registry, limits, dials, carrier streams; session wiring and stage orchestration): a class
 * past this size is doing several jobs, and each job is easier to test alone in a module of its
 * own. The limit is a tripwire, not a target.
 *
 * The classes come from TypeScript's own parser (declarations and class expressions, nested ones
 * included), so the test measures what the compiler reads.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SRC = resolve(import.meta.dirname, '../../src');
const CHECKED = ['bridge', 'agent'];
const MAX_CLASS_LINES = 250;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [path] : [];
  });
}

interface ClassSize {
  name: string;
  lines: number;
}

/** Every class of one source text with its length in lines, from the `class` keyword's line to the closing brace's. */
export function classSizes(fileName: string, text: string): ClassSize[] {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found: ClassSize[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isClassDeclaration(node) || ts.isClassExpression(node)) {
      // getStart() skips leading comments but not decorators or modifiers: start at the `class` keyword itself.
      const keyword = node.getChildren(source).find((c) => c.kind === ts.SyntaxKind.ClassKeyword) ?? node;
      const first = source.getLineAndCharacterOfPosition(keyword.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      found.push({ name: node.name?.text ?? '(anonymous class)', lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('class size in src/bridge and src/agent', () => {
  it('measures a class from its class line to its closing brace (the measure itself)', () => {
    const body = Array.from({ length: 8 }, (_, i) => `  m${i}(): void {}`).join('\n');
    const text = `/** doc */\nexport class A {\n${body}\n}\nconst b = class {\n  x = 1;\n};\nclass Outer { inner = class Inner {}; }\n`;
    expect(classSizes('x.ts', text)).toEqual([
      { name: 'A', lines: 10 },
      { name: '(anonymous class)', lines: 3 },
      { name: 'Outer', lines: 1 },
      { name: 'Inner', lines: 1 },
    ]);
  });

  it(`has no class over ${MAX_CLASS_LINES} lines`, () => {
    const files = CHECKED.flatMap((folder) => sourceFiles(join(SRC, folder)));
    expect(files.length).toBeGreaterThan(50);
    const tooLong = files.flatMap((file) =>
      classSizes(file, readFileSync(file, 'utf8'))
        .filter((c) => c.lines > MAX_CLASS_LINES)
        .map((c) => `${relative(SRC, file)}: ${c.name} ${c.lines} lines`),
    );
    expect(tooLong).toEqual([]);
  });
});
