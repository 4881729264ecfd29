/**
 * Why `callbridge migrate-store` refused or failed: one line for the operator, naming what is
 * wrong (the file, the table, the URL with its password hidden), never a secret's value.
 */
import { CodedError } from '../../coded-error.ts';

/**
 * - `source`: the SQLite file is missing, unreadable, not a database, or in use;
 * - `target`: the PostgreSQL URL is not one, or its server cannot be reached or refuses us;
 * - `not-empty`: the PostgreSQL database already holds rows;
 * - `schema`: the two schemas do not match (a version or a column missing on one side);
 * - `secrets`: the sealed values do not open with the key the operator would be told to use;
 * - `copy`: an INSERT failed (rolled back: nothing written);
 * - `verify`: the copy's counts differ from the source's (rolled back).
 */
export type MigrateStoreErrorCode = 'source' | 'target' | 'not-empty' | 'schema' | 'secrets' | 'copy' | 'verify';

export class MigrateStoreError extends CodedError<MigrateStoreErrorCode> {
  constructor(code: MigrateStoreErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
    this.name = 'MigrateStoreError';
  }
}
