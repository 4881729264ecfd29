/**
 * `callbridge migrate-store --from sqlite:<path> --to postgres://...`: the command line around
 * src/store/migrate-store/. stdout: the per-table summary, the total time, and what every node on
 * the new database must be configured with (which files hold the secrets, never their values).
 * stderr: one line saying what is wrong. Exit 0 copied, 1 refused or failed (nothing written),
 * 2 usage.
 */
import { loadConfig } from './config.ts';
import { migrateStore, MigrateStoreError, type MigrateStoreReport, type SecretOrigin } from './store/migrate-store/index.ts';

export const MIGRATE_STORE_USAGE = `callbridge migrate-store --from sqlite:<data directory or file> --to postgres://user:password@host:port/database
                                      copy a single node's SQLite store into an empty PostgreSQL database`;

/** `--from X --to Y` in either order, nothing else; undefined when the arguments are not that. */
function parseArgs(args: readonly string[]): { from: string; to: string } | undefined {
  if (args.length !== 4) return undefined;
  const value = (flag: string) => {
    const i = args.indexOf(flag);
    return i >= 0 && i % 2 === 0 ? args[i + 1] : undefined;
  };
  const from = value('--from');
  const to = value('--to');
  return from === undefined || to === undefined ? undefined : { from, to };
}

export async function migrateStoreCommand(args: readonly string[]): Promise<number> {
  const parsed = parseArgs(args);
  if (parsed === undefined) {
    process.stderr.write(`callbridge migrate-store: --from and --to are required\nusage: ${MIGRATE_STORE_USAGE}\n`);
    return 2;
  }
  // The secrets the SQLite node ran with, when its configuration set them (else its data directory's files).
  const config = loadConfig();
  let report: MigrateStoreReport;
  try {
    report = await migrateStore({ ...parsed, configured: { encryptionKey: config.security.encryption_key, tokenSecret: config.security.token_secret } });
  } catch (err) {
    if (!(err instanceof MigrateStoreError)) throw err;
    process.stderr.write(`callbridge migrate-store: ${err.message}\n`);
    return 1;
  }
  process.stdout.write(summary(report));
  return 0;
}

function summary(r: MigrateStoreReport): string {
  const width = Math.max(5, ...r.tables.map((t) => t.table.length));
  const lines = [
    `${r.file} (schema version ${r.schemaVersion}) -> ${r.target}`,
    `${'table'.padEnd(width)}  ${'rows'.padStart(9)}`,
    ...r.tables.map((t) => `${t.table.padEnd(width)}  ${String(t.rows).padStart(9)}${t.derived ? '  (kept by triggers: copied with them off, equal row for row)' : ''}`),
  ];
  if (r.sqliteOnly.length > 0) lines.push(`not copied (SQLite's own search index; PostgreSQL searches with pg_trgm): ${r.sqliteOnly.join(', ')}`);
  const seconds = r.ms / 1000;
  lines.push(`${r.rows} rows copied and counted in ${seconds.toFixed(2)} s (${Math.round(r.rows / Math.max(seconds, 0.001))} rows/s); committed`);
  lines.push(`${r.sealedValues} sealed values (trunk passwords, carrier tokens) open with the encryption key below`);
  lines.push('', 'Run every node on this database with, the same on each:', `  CALLBRIDGE_STORE_URL=${r.target} (with its password)`);
  lines.push(`  CALLBRIDGE_ENCRYPTION_KEY=${secretSource(r.encryptionKey, 'security.encryption_key')}`);
  lines.push(`  CALLBRIDGE_TOKEN_SECRET=${secretSource(r.tokenSecret, 'security.token_secret')}`);
  return lines.join('\n') + '\n';
}

/** Where the operator finds a secret's value (the value itself is never printed). */
function secretSource(origin: SecretOrigin, setting: string): string {
  if (origin.from === 'file') return `<the contents of ${origin.file}>`;
  if (origin.from === 'configured') return `<the ${setting} the SQLite node is configured with now>`;
  return '<a new secret: 32 random bytes, base64 (openssl rand -base64 32); the SQLite node had none yet>';
}
