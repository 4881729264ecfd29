/**
 * What a failure of the PostgreSQL store looks like to the rest of callbridge: one error class
 * whose message says what failed without a password in it, with node-postgres's own error (SQLSTATE
 * `code`, `constraint`, `detail`, `table`) kept as `cause`.
 */
import { CodedError } from '../../coded-error.ts';

/**
 * - `unreachable`: no connection (refused, timed out, host unknown, connection lost; SQLSTATE
 *   classes 08 and 57P: the server shutting down, starting up, or ending our session);
 * - `refused`: the server answered but would not let us in (authentication, unknown database or
 *   role: SQLSTATE classes 28 and 3D);
 * - `query`: a statement failed (constraint, syntax...: `sqlState` says which; none when the
 *   value could not be read, e.g. an int8 beyond 2^53);
 * - `closed`: the client was closed.
 */
export type PostgresErrorCode = 'unreachable' | 'refused' | 'query' | 'closed';

export class PostgresStoreError extends CodedError<PostgresErrorCode> {
  constructor(
    code: PostgresErrorCode,
    message: string,
    /** PostgreSQL's SQLSTATE (e.g. 23505), when the server sent one. */
    readonly sqlState: string | undefined,
    cause: unknown,
  ) {
    super(code, message, { cause });
    this.name = 'PostgresStoreError';
  }
}

/** The fields of node-postgres's DatabaseError this module reads. */
interface PgErrorFields {
  code?: unknown;
  message?: unknown;
  constraint?: unknown;
  detail?: unknown;
  table?: unknown;
}

const SQLSTATE = /^[0-9A-Z]{5}$/;
/** Node's socket errors (ECONNREFUSED, ENOTFOUND, ETIMEDOUT...). */
const SYSTEM_ERROR = /^E[A-Z0-9_]+$/;
/** node-postgres's own messages when a connection could not be made or was lost. */
const CONNECTION_LOST = /^Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Connection refused/i;

/**
 * A connection URL fit for a log line or an error message: the password (and a `password`
 * query parameter) replaced by `***`. A string that is not a URL is not shown at all, since it
 * could be anything, a password included.
 */
export function redactUrl(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return '<unparseable store URL>';
  }
  if (u.password !== '') u.password = '***';
  for (const key of [...u.searchParams.keys()]) {
    if (/pass|secret|key/i.test(key)) u.searchParams.set(key, '***');
  }
  return u.toString();
}

/** The password of a URL, to make sure no message repeats it (the server never sends it back, but a DNS error may quote the URL). */
function passwordOf(url: string): string | undefined {
  try {
    const p = decodeURIComponent(new URL(url).password);
    return p === '' ? undefined : p;
  } catch {
    return undefined;
  }
}

/**
 * node-postgres's error (or a socket error) as a PostgresStoreError; `url` is the store's URL,
 * named (redacted) in the message when the connection is what failed.
 */
export function toStoreError(err: unknown, url: string): PostgresStoreError {
  if (err instanceof PostgresStoreError) return err;
  const e = (err ?? {}) as PgErrorFields;
  const message = typeof e.message === 'string' ? e.message : String(err);
  const code = typeof e.code === 'string' ? e.code : undefined;
  const sqlState = code !== undefined && SQLSTATE.test(code) ? code : undefined;
  const where = redactUrl(url);
  let out: PostgresStoreError;
  if (sqlState === undefined && !((code !== undefined && SYSTEM_ERROR.test(code)) || CONNECTION_LOST.test(message))) {
    out = new PostgresStoreError('query', `PostgreSQL: ${message}`, undefined, err);
  } else if (sqlState === undefined || sqlState.startsWith('08') || sqlState.startsWith('57P')) {
    out = new PostgresStoreError('unreachable', `PostgreSQL at ${where} is unreachable: ${message}${code ? ` (${code})` : ''}`, sqlState, err);
  } else if (sqlState.startsWith('28') || sqlState.startsWith('3D') || (sqlState === '42501' && /permission denied for database/.test(message))) {
    out = new PostgresStoreError('refused', `PostgreSQL at ${where} refused the connection: ${message} (SQLSTATE ${sqlState})`, sqlState, err);
  } else {
    const constraint = typeof e.constraint === 'string' ? `, constraint ${e.constraint}` : '';
    out = new PostgresStoreError('query', `PostgreSQL: ${message} (SQLSTATE ${sqlState}${constraint})`, sqlState, err);
  }
  const password = passwordOf(url);
  if (password !== undefined && out.message.includes(password)) {
    out.message = out.message.replaceAll(password, '***');
  }
  return out;
}

/** The node-postgres error in err's cause chain that carries a SQLSTATE, if any. */
function pgErrorIn(err: unknown): PgErrorFields | undefined {
  for (let e = err, depth = 0; e !== null && typeof e === 'object' && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as PgErrorFields).code;
    if (typeof code === 'string' && SQLSTATE.test(code)) return e as PgErrorFields;
  }
  return undefined;
}

/** The key columns of a unique violation's detail: `Key (org_id, phone_number)=(...) already exists.` */
function keyColumns(detail: unknown): string[] | undefined {
  if (typeof detail !== 'string') return undefined;
  const m = /^Key \((.+?)\)=\(/.exec(detail);
  return m?.[1]?.split(',').map((c) => c.trim().replace(/^"(.*)"$/, '$1'));
}

/**
 * True when err (a PostgresStoreError or node-postgres's error) is a unique violation (SQLSTATE
 * 23505), optionally on a given column: `column` or `table.column`, as src/store/db.ts's
 * isUniqueViolation takes it for SQLite. The column is read from the error's detail (the key's
 * columns); a server that leaves the detail out is matched on the constraint's name instead.
 */
export function isPostgresUniqueViolation(err: unknown, column?: string): boolean {
  const e = pgErrorIn(err);
  if (e?.code !== '23505') return false;
  if (column === undefined) return true;
  const dot = column.lastIndexOf('.');
  const table = dot === -1 ? undefined : column.slice(0, dot);
  const name = dot === -1 ? column : column.slice(dot + 1);
  if (table !== undefined && typeof e.table === 'string' && e.table !== table) return false;
  const columns = keyColumns(e.detail);
  if (columns !== undefined) return columns.includes(name);
  return typeof e.constraint === 'string' && e.constraint.includes(name);
}
