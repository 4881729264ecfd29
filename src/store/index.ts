/**
 * The store: a repository per resource over one SqlClient (the embedded SQLite database; the
 * repositories are written once for any SqlClient, docs/decisions.md "Store: one set of
 * repositories, two databases").
 */
import { openSqliteClient } from './db.ts';
import { OrganizationRepo, type KeyCache } from './organizations.ts';
import { AgentRepo, type StoredAgent } from './agents.ts';
import { VersionRepo } from './versions.ts';
import { TelcoNumberRepo } from './telco-numbers.ts';
import { SipTrunkRepo } from './sip-trunks.ts';
import { AssignmentRepo } from './assignments.ts';
import { CallRepo } from './calls.ts';
import { SessionRepo } from './sessions.ts';
import { RegistrationRepo } from './registrations.ts';
import { SecretBox } from './secret-box.ts';
import { loadOrCreateSecret } from './data-dir-secrets.ts';
import type { SqlClient } from './sql-client.ts';
import type { Database } from './sqlite-driver.ts';

export { SQLITE_DRIVER_PACKAGE } from './sqlite-driver.ts';
export type { SqlClient } from './sql-client.ts';

export interface Store {
  /** The client every repository goes through (bound to the transaction in a Store given by tx). */
  readonly client: SqlClient;
  /**
   * The raw better-sqlite3 handle when the database is the embedded SQLite (undefined on any
   * other): for what only SQLite has (pragmas, bulk loads in the benchmarks, tests that read SQL).
   * Statements made on it bypass the client's transaction lock.
   */
  readonly sqlite?: Database;
  secretBox: SecretBox;
  organizations: OrganizationRepo;
  agents: AgentRepo;
  versions: VersionRepo;
  telcoNumbers: TelcoNumberRepo;
  sipTrunks: SipTrunkRepo;
  assignments: AssignmentRepo;
  calls: CallRepo;
  sessions: SessionRepo;
  /** REGISTER bindings of PBXs on digest trunks (callbridge as their registrar). */
  registrations: RegistrationRepo;
  /**
   * Runs fn in one transaction: all of the writes fn makes through the store it is given commit
   * together or none does (fn's rejection rolls back and is rethrown). Writes through this store
   * (not the one given to fn) are not part of it: on SQLite they wait until it has ended.
   */
  tx<T>(fn: (store: Store) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** Opens the data directory's SQLite database (schema brought up to date) and its repositories. */
export async function openStore(dataDir: string, encryptionKey: string): Promise<Store> {
  // The database first: opening it creates the data directory (0700) the key file goes in.
  const client = await openSqliteClient(dataDir);
  let secretBox: SecretBox;
  try {
    secretBox = new SecretBox(loadOrCreateSecret(dataDir, 'encryption-key', encryptionKey));
  } catch (err) {
    await client.close();
    throw err;
  }
  return storeOver(client, secretBox, { sqlite: client.db });
}

interface SharedCaches {
  agents: Map<string, StoredAgent>;
  keys: KeyCache;
}

/** The repositories over any SqlClient (the PostgreSQL backend builds its Store here too). */
export function storeOver(client: SqlClient, secretBox: SecretBox, options: { sqlite?: Database } = {}): Store {
  return build(client, secretBox, { agents: new Map(), keys: new Map() }, false, options.sqlite);
}

function build(client: SqlClient, secretBox: SecretBox, caches: SharedCaches, inTransaction: boolean, sqlite: Database | undefined): Store {
  const agents = new AgentRepo(client, { cache: caches.agents, inTransaction });
  const store: Store = {
    client,
    ...(sqlite !== undefined ? { sqlite } : {}),
    secretBox,
    organizations: new OrganizationRepo(client, caches.keys),
    agents,
    versions: new VersionRepo(client),
    telcoNumbers: new TelcoNumberRepo(client, secretBox),
    sipTrunks: new SipTrunkRepo(client, secretBox),
    assignments: new AssignmentRepo(client),
    calls: new CallRepo(client),
    sessions: new SessionRepo(client),
    registrations: new RegistrationRepo(client),
    tx: async <T>(fn: (store: Store) => Promise<T>): Promise<T> => {
      let inner: Store | undefined;
      try {
        return await client.transaction((tx) => {
          inner = build(tx, secretBox, caches, true, sqlite);
          return fn(inner);
        });
      } finally {
        // Committed or rolled back: what the transaction wrote is read afresh from now on.
        inner?.agents.forgetWritten();
      }
    },
    close: () => client.close(),
  };
  return store;
}
