/** Benchmark knobs from environment variables, checked so a typo fails loudly instead of silently. */

/** A positive number from `name`, else `fallback`. @throws RangeError for anything else. */
export function envNumber(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) throw new RangeError(`${name} must be a positive number, got "${raw}"`);
  return n;
}

/** Comma-separated positive integers from `name` (else `fallback`), deduplicated and ascending. */
export function envIntegerList(name: string, fallback: string): number[] {
  const raw = process.env[name] ?? fallback;
  const list = raw.split(',').map((s) => Number(s.trim()));
  if (list.length === 0 || list.some((n) => !Number.isInteger(n) || n <= 0)) throw new RangeError(`${name} must be positive integers separated by commas, got "${raw}"`);
  return [...new Set(list)].sort((a, b) => a - b);
}
