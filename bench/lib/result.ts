/**
 * How a benchmark reports its figures. Every figure ends with one machine-readable line
 *
 *   RESULT <name> <value> <unit> baseline=<value> ratio=<value>
 *
 * (docs/benchmarks.md and the operating contract in DESIGN.md), where ratio = value / baseline
 * rounded to 3 significant digits. `printFigures` prints a human-readable table first, then the
 * RESULT lines, so a script can `grep '^RESULT '` and a person can read the table.
 */

export interface Figure {
  /** snake_case, stable across runs: scripts compare figures by name. */
  name: string;
  value: number;
  /** e.g. `req/s`, `ms`. No spaces. */
  unit: string;
  /** The same quantity measured on the baseline in the same run. */
  baseline: number;
  /** Free text for the table only (what was measured, against what). */
  note?: string;
}

/**
 * A figure's value as printed: integers from 1000 up, else 4 significant digits, never in
 * exponent notation for the magnitudes benchmarks produce.
 */
export function formatValue(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (Math.abs(v) >= 1000) return String(Math.round(v));
  if (v === 0) return '0';
  return String(Number(v.toPrecision(4)));
}

/** value / baseline to 3 significant digits; `NaN` when the baseline is 0 or not finite. */
export function ratio(value: number, baseline: number): number {
  if (!Number.isFinite(value) || !Number.isFinite(baseline) || baseline === 0) return Number.NaN;
  return Number((value / baseline).toPrecision(3));
}

/** The one RESULT line of a figure (without a trailing newline). */
export function resultLine(f: Figure): string {
  if (/\s/.test(f.name) || /\s/.test(f.unit)) throw new RangeError(`figure name and unit must not contain spaces: "${f.name}" "${f.unit}"`);
  return `RESULT ${f.name} ${formatValue(f.value)} ${f.unit} baseline=${formatValue(f.baseline)} ratio=${String(ratio(f.value, f.baseline))}`;
}

/** A plain text table: the first row is the header, columns padded, numbers right-aligned. */
export function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  const numeric = (s: string) => /^-?[\d.]+(e[+-]?\d+)?$|^NaN$/.test(s);
  const line = (row: string[]) =>
    row
      .map((cell, i) => (numeric(cell) ? cell.padStart(widths[i] ?? 0) : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  const out = rows.map(line);
  if (out.length > 1) out.splice(1, 0, widths.map((w) => '-'.repeat(w)).join('  '));
  return out.join('\n');
}

/** Prints a titled table of the figures, then one RESULT line per figure. */
export function printFigures(title: string, figures: Figure[], write: (s: string) => void = (s) => process.stdout.write(s)): void {
  const rows = [['figure', 'value', 'unit', 'baseline', 'ratio', 'note']];
  for (const f of figures) rows.push([f.name, formatValue(f.value), f.unit, formatValue(f.baseline), String(ratio(f.value, f.baseline)), f.note ?? '']);
  write(`\n${title}\n${table(rows)}\n\n`);
  for (const f of figures) write(resultLine(f) + '\n');
}
