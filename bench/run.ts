/**
 * `npm run bench -- [name...]`: runs bench/<name>.ts, or every benchmark in sequence when no
 * name is given.
 *
 * A benchmark is a file directly in bench/ that exports `async function run(): Promise<void>`,
 * prints its figures (bench/lib/result.ts) and throws when its measurement is not valid. Files
 * that are not benchmarks: this runner, helpers under bench/lib/, processes a benchmark starts
 * (`*-server.ts`) and anything starting with `_`.
 *
 * Options after the names (`npm run bench -- soak --minutes 8`: `--name value` or `--name=value`)
 * are left in process.argv for the benchmarks to read.
 *
 * Exit status: 0 all ran, 1 a benchmark failed, 2 unknown benchmark name.
 */
import { readdirSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const BENCH_DIR = dirname(fileURLToPath(import.meta.url));

function listBenchmarks(dir: string = BENCH_DIR): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.d.ts'))
    .map((e) => basename(e.name, '.ts'))
    .filter((name) => name !== 'run' && !name.endsWith('-server') && !name.startsWith('_'))
    .sort();
}

interface BenchmarkModule {
  run(): Promise<void>;
}

async function runOne(name: string): Promise<boolean> {
  const started = Date.now();
  process.stdout.write(`\n=== bench/${name} ===\n`);
  try {
    const mod = (await import(pathToFileURL(join(BENCH_DIR, `${name}.ts`)).href)) as Partial<BenchmarkModule>;
    if (typeof mod.run !== 'function') throw new TypeError(`bench/${name}.ts does not export run()`);
    await mod.run();
    process.stdout.write(`=== bench/${name}: done in ${((Date.now() - started) / 1000).toFixed(1)} s ===\n`);
    return true;
  } catch (err) {
    process.stderr.write(`\nbench/${name} FAILED: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    return false;
  }
}

async function main(args: string[]): Promise<number> {
  const available = listBenchmarks();
  if (args.includes('--help') || args.includes('-h') || args.includes('--list')) {
    process.stdout.write(`usage: npm run bench -- [name...] [--option value...]\navailable benchmarks: ${available.join(', ')}\n`);
    return 0;
  }
  // Options (`--minutes 8`, `--floods=3`) are for the benchmarks, which read process.argv
  // themselves: skipped here with their value.
  const names: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a.startsWith('--')) {
      if (!a.includes('=') && i + 1 < args.length && !args[i + 1]!.startsWith('--')) i++;
      continue;
    }
    names.push(a);
  }
  const unknown = names.filter((a) => !available.includes(a));
  if (unknown.length > 0) {
    process.stderr.write(`unknown benchmark: ${unknown.join(', ')}\navailable benchmarks: ${available.join(', ')}\n`);
    return 2;
  }
  const failed: string[] = [];
  for (const name of names.length > 0 ? names : available) if (!(await runOne(name))) failed.push(name);
  if (failed.length > 0) {
    process.stderr.write(`\nfailed: ${failed.join(', ')}\n`);
    return 1;
  }
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
    // A benchmark may leave a timer or socket behind; do not hang on it once all is printed.
    setTimeout(() => process.exit(code), 2000).unref();
  },
  (err: unknown) => {
    process.stderr.write(`bench: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exit(1);
  },
);
