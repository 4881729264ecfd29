/**
 * The PostgreSQL backend of the store (docs/store-postgres.md): what the rest of store/ uses.
 */
export { PostgresClient, DEFAULT_POOL_SIZE, APPLICATION_NAME, type PostgresClientOptions } from './client.ts';
export { PostgresStoreError, isPostgresUniqueViolation, redactUrl, type PostgresErrorCode } from './errors.ts';
export { migratePostgres, MIGRATION_LOCK_KEY } from './migrate.ts';
export { POSTGRES_MIGRATIONS } from './migrations.ts';
export type { DedicatedSession, DedicatedSessionOptions } from './dedicated-session.ts';
export { AdvisoryLockHolder, type AdvisoryLockHolderOptions } from './advisory-locks.ts';
