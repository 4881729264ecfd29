/**
 * `?` parameters (the portable SQL of src/store/sql-client.ts) to PostgreSQL's `$1`, `$2`, ...
 *
 * A `?` is a parameter only where PostgreSQL would read it as an operator token: outside
 * 'string literals' (with '' inside, and E'...' strings with backslash escapes), "quoted
 * identifiers", $tag$ dollar-quoted bodies $tag$, -- line comments and (nested) block comments.
 * PostgreSQL's jsonb operators `?`, `?|` and `?&` therefore cannot be written in portable SQL:
 * use jsonb_exists(), jsonb_exists_any(), jsonb_exists_all() (docs/store-postgres.md).
 */

export interface RewrittenSql {
  /** The statement with `$1..$n`. */
  text: string;
  /** How many parameters it takes. */
  count: number;
}

/** The rewrites of the statements seen so far: a repository's SQL is a handful of fixed texts. */
const cache = new Map<string, RewrittenSql>();
/** Past this many distinct texts (SQL built with values inlined, a bug) the cache starts over. */
const CACHE_LIMIT = 2000;

export function rewritePlaceholders(sql: string): RewrittenSql {
  const hit = cache.get(sql);
  if (hit !== undefined) return hit;
  const rewritten = rewrite(sql);
  if (cache.size >= CACHE_LIMIT) cache.clear();
  cache.set(sql, rewritten);
  return rewritten;
}

/** A dollar-quote opening tag at i (`$$` or `$name$`), or undefined. */
function dollarTagAt(sql: string, i: number): string | undefined {
  const m = /^\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$/.exec(sql.slice(i, i + 64));
  return m?.[0];
}

function rewrite(sql: string): RewrittenSql {
  let out = '';
  let count = 0;
  let i = 0;
  const n = sql.length;
  while (i < n) {
    const c = sql[i]!;
    const next = sql[i + 1];
    if (c === '?') {
      out += `$${++count}`;
      i++;
      continue;
    }
    let end: number;
    if (c === "'") {
      // E'...' (or e'...') allows backslash escapes; a plain literal only doubles the quote.
      const prev = sql[i - 1];
      const escapes = (prev === 'E' || prev === 'e') && !/[A-Za-z0-9_]/.test(sql[i - 2] ?? '');
      end = endOfQuoted(sql, i, "'", escapes);
    } else if (c === '"') {
      end = endOfQuoted(sql, i, '"', false);
    } else if (c === '-' && next === '-') {
      const nl = sql.indexOf('\n', i);
      end = nl === -1 ? n : nl + 1;
    } else if (c === '/' && next === '*') {
      end = endOfBlockComment(sql, i);
    } else if (c === '$' && !/[A-Za-z0-9_]/.test(sql[i - 1] ?? '')) {
      const tag = dollarTagAt(sql, i);
      if (tag === undefined) {
        out += c;
        i++;
        continue;
      }
      const close = sql.indexOf(tag, i + tag.length);
      end = close === -1 ? n : close + tag.length;
    } else {
      out += c;
      i++;
      continue;
    }
    out += sql.slice(i, end);
    i = end;
  }
  return { text: out, count };
}

/** The index after the quote that closes the one at start (doubled quotes stay inside). */
function endOfQuoted(sql: string, start: number, quote: string, backslashEscapes: boolean): number {
  let i = start + 1;
  while (i < sql.length) {
    const c = sql[i];
    if (backslashEscapes && c === '\\') {
      i += 2;
      continue;
    }
    if (c === quote) {
      if (sql[i + 1] === quote) {
        i += 2;
        continue;
      }
      return i + 1;
    }
    i++;
  }
  return sql.length;
}

/** PostgreSQL's block comments nest. */
function endOfBlockComment(sql: string, start: number): number {
  let depth = 0;
  let i = start;
  while (i < sql.length) {
    if (sql[i] === '/' && sql[i + 1] === '*') {
      depth++;
      i += 2;
    } else if (sql[i] === '*' && sql[i + 1] === '/') {
      depth--;
      i += 2;
      if (depth === 0) return i;
    } else {
      i++;
    }
  }
  return sql.length;
}
