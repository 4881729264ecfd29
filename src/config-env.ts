/**
 * Environment variables that look like settings but are none: a misspelled `CALLBRIDGE_*` name
 * (`CALLBRIDGE_HTPP_PORT`) is otherwise ignored without a word, and the daemon runs on the
 * default the operator meant to change. The known names are every setting's env var in the
 * convict schema (src/config.ts), CALLBRIDGE_CONFIG (the file the schema is loaded from), and the
 * CALLBRIDGE_TEST_ prefix, which the test suite reserves for its own knobs. Values are never read:
 * they may be secrets.
 */
import { configSchema } from './config.ts';

/** Variables the code reads besides the schema's. */
const OTHER_VARIABLES = ['CALLBRIDGE_CONFIG'];
/** Reserved for the test suite (CALLBRIDGE_TEST_PG_BIN, ...): set in CI, not for the daemon. */
const TEST_PREFIX = 'CALLBRIDGE_TEST_';
const PREFIX = 'CALLBRIDGE_';

export interface UnknownVariable {
  /** The variable as set. */
  name: string;
  /** The known variable nearest to it by edit distance. */
  closest: string;
  /** The setting `closest` sets (its path in the schema), when it is a setting's. */
  setting?: string;
}

/** Every setting's env var and the setting's path, from the schema. */
export function settingVariables(): Map<string, string> {
  const vars = new Map<string, string>();
  const walk = (node: Record<string, unknown>, path: string[]): void => {
    for (const [key, value] of Object.entries(node)) {
      if (value === null || typeof value !== 'object') continue;
      const leaf = value as { doc?: unknown; env?: unknown };
      if ('doc' in leaf) {
        if (typeof leaf.env === 'string') vars.set(leaf.env, [...path, key].join('.'));
      } else {
        walk(value as Record<string, unknown>, [...path, key]);
      }
    }
  };
  walk(configSchema as unknown as Record<string, unknown>, []);
  return vars;
}

/** The CALLBRIDGE_* variables of `env` that nothing reads, each with the closest known name. */
export function unknownVariables(env: NodeJS.ProcessEnv): UnknownVariable[] {
  const settings = settingVariables();
  const known = [...settings.keys(), ...OTHER_VARIABLES];
  const unknown: UnknownVariable[] = [];
  for (const name of Object.keys(env).sort()) {
    if (!name.startsWith(PREFIX) || name.startsWith(TEST_PREFIX) || settings.has(name) || OTHER_VARIABLES.includes(name)) continue;
    let closest = known[0]!;
    let best = Infinity;
    for (const candidate of known) {
      const d = editDistance(name, candidate);
      if (d < best) [closest, best] = [candidate, d];
    }
    const setting = settings.get(closest);
    unknown.push(setting === undefined ? { name, closest } : { name, closest, setting });
  }
  return unknown;
}

/** The warning for one unknown variable (its name and the closest known one; never its value). */
export function describeUnknownVariable(u: UnknownVariable): string {
  return `${u.name} is set but is not a callbridge setting, so it is ignored; did you mean ${u.closest}${u.setting ? ` (${u.setting})` : ''}?`;
}

/** Levenshtein distance: insertions, deletions and substitutions, one each. */
export function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min(previous[j]! + 1, current[j - 1]! + 1, previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length]!;
}
