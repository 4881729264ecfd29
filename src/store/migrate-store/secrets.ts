/**
 * The two secrets a PostgreSQL node must be configured with, found where the SQLite installation
 * took them from: its configuration when set there, else the file the daemon generated into its
 * data directory (src/store/data-dir-secrets.ts). The copied sealed values (trunk passwords,
 * carrier auth tokens) open only with the installation's encryption key, and the command checks
 * that they do before anything is written. Values are never printed: the operator is told which
 * file or setting holds them.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { SecretBox } from '../secret-box.ts';
import type { Database } from '../sqlite-driver.ts';
import { MigrateStoreError } from './errors.ts';
import { quoteIdent } from './postgres-target.ts';
import type { SourceTable } from './sqlite-source.ts';

/** The generated secrets' files in a data directory (src/store/index.ts, src/session/tokens.ts). */
export const ENCRYPTION_KEY_FILE = 'encryption-key';
export const TOKEN_SECRET_FILE = 'token-secret';

/** Where a secret comes from: the installation's configuration, a file in its data directory, or nowhere yet. */
export type SecretOrigin = { from: 'configured' } | { from: 'file'; file: string } | { from: 'none' };

export interface FoundSecret {
  origin: SecretOrigin;
  value: Buffer | undefined;
}

/** The secret the SQLite daemon used: the configured one wins over the file, as at its start. */
export function findSecret(dataDir: string, file: string, configured: string): FoundSecret {
  if (configured !== '') return { origin: { from: 'configured' }, value: Buffer.from(configured, 'base64') };
  const path = join(dataDir, file);
  if (!existsSync(path)) return { origin: { from: 'none' }, value: undefined };
  let value: Buffer;
  try {
    value = Buffer.from(readFileSync(path, 'utf8').trim(), 'base64');
  } catch (err) {
    throw new MigrateStoreError('secrets', `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, { cause: err });
  }
  if (value.length !== 32) throw new MigrateStoreError('secrets', `${path} does not hold a 32-byte base64 secret`);
  return { origin: { from: 'file', file: path }, value };
}

/** The columns that hold sealed values: the store names them `*_enc` (sip-trunks.ts, telco-numbers.ts). */
const isSealedColumn = (column: string) => column.endsWith('_enc');

/** How the operator would recognise the key, for an error message (never its value). */
function describe(origin: SecretOrigin): string {
  if (origin.from === 'configured') return 'the configured security.encryption_key (CALLBRIDGE_ENCRYPTION_KEY)';
  if (origin.from === 'file') return `the key in ${origin.file}`;
  return 'no key';
}

/**
 * Opens every sealed value of the tables with the key; the number opened. Throws when
 * there are sealed values and no key, or one does not open (another key, or damaged).
 */
export function checkSealedValues(source: Database, tables: readonly SourceTable[], key: FoundSecret): number {
  const box = key.value === undefined ? undefined : new SecretBox(key.value);
  let opened = 0;
  for (const table of tables) {
    for (const column of table.columns.filter(isSealedColumn)) {
      const values = source.prepare(`SELECT ${quoteIdent(column)} AS v FROM ${quoteIdent(table.name)} WHERE ${quoteIdent(column)} IS NOT NULL`).pluck().all() as string[];
      for (const sealed of values) {
        if (box === undefined) {
          throw new MigrateStoreError('secrets', `${table.name}.${column} holds sealed values but there is no encryption key: neither security.encryption_key (CALLBRIDGE_ENCRYPTION_KEY) is set nor does the data directory hold ${ENCRYPTION_KEY_FILE}`);
        }
        try {
          box.open(sealed);
        } catch (err) {
          throw new MigrateStoreError(
            'secrets',
            `${table.name}.${column} holds a value that does not open with ${describe(key.origin)}: set CALLBRIDGE_ENCRYPTION_KEY to the key the SQLite node ran with`,
            { cause: err },
          );
        }
        opened += 1;
      }
    }
  }
  return opened;
}
