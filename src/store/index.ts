/**
 * The store: a repository per resource over one SqlClient, the embedded SQLite database (the
 * default) or PostgreSQL (store.url; docs/store-postgres.md). The repositories are written once
 * for any SqlClient (docs/decisions.md "Store: one set of repositories, two databases").
 */
import { mkdirSync } from 'node:fs';
import { openSqliteClient } from './db.ts';
import { migratePostgres, PostgresClient, POSTGRES_MIGRATIONS, redactUrl, type PostgresStoreError } from './postgres/index.ts';
import { OrganizationRepo, type KeyCache } from './organizations.ts';
import { AgentRepo, type StoredAgent } from './agents.ts';
import { VersionRepo } from './versions.ts';
import { TelcoNumberRepo } from './telco-numbers.ts';
import { SipTrunkRepo } from './sip-trunks.ts';
import { AssignmentRepo } from './assignments.ts';
import { CallRepo } from './calls.ts';
import { SessionRepo } from './sessions.ts';
import { RegistrationRepo } from './registrations.ts';
import { ClusterNodeRepo } from './cluster-nodes.ts';
import { CallSlotRepo } from './call-slots.ts';
import { StreamGrantRepo } from './stream-grants.ts';
import { WebhookEndpointRepo } from './webhooks.ts';
import { WebhookDeliveryRepo } from './webhook-outbox.ts';
import { TurnTimelineRepo } from './turn-timelines.ts';
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
  /** The agent turns' timelines of each call (docs/latency.md). */
  turnTimelines: TurnTimelineRepo;
  sessions: SessionRepo;
  /** REGISTER bindings of PBXs on digest trunks (callbridge as their registrar). */
  registrations: RegistrationRepo;
  /** Node leases (docs/store-postgres.md "Several nodes"). */
  clusterNodes: ClusterNodeRepo;
  /** Calls counted against the per-trunk and per-organization limits, across nodes. */
  callSlots: CallSlotRepo;
  /** The carrier media streams' one-time grants (and outbound carrier dials' state), across nodes. */
  streamGrants: StreamGrantRepo;
  /** Webhook endpoints of organizations (docs/webhooks.md); also the tool calls' ToolCallTargets. */
  webhooks: WebhookEndpointRepo;
  /** The webhook outbox: one row per event and endpoint, claimed by the deliverer on any node. */
  webhookDeliveries: WebhookDeliveryRepo;
  /** This node's cluster.node_id: stamped on the call rows it writes (null: none given, e.g. a CLI). */
  readonly nodeId: string | null;
  /**
   * Runs fn in one transaction: all of the writes fn makes through the store it is given commit
   * together or none does (fn's rejection rolls back and is rethrown). Writes through this store
   * (not the one given to fn) are not part of it: on SQLite they wait until it has ended.
   */
  tx<T>(fn: (store: Store) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/** Where the store's database is: the settings store.url and store.pool_size. */
export interface StoreBackendOptions {
  /** Empty or absent: the embedded SQLite database in the data directory; postgres://...: PostgreSQL. */
  url?: string;
  /** PostgreSQL: connections the pool may open (default 10). */
  poolSize?: number;
  /** PostgreSQL: an idle pooled connection failed (the pool replaces it); default: ignored. */
  onIdleError?: (err: PostgresStoreError) => void;
  /** cluster.node_id of the daemon: the node its call rows carry (absent: none, e.g. a CLI command). */
  nodeId?: string;
  /** http.public_url: the base of the links events carry (recording.ready's recording_url); absent or empty: paths. */
  publicUrl?: string;
}

/** True when the store URL names PostgreSQL (src/config.ts refuses any other non-empty URL). */
export const isPostgresUrl = (url: string | undefined): url is string => url !== undefined && /^postgres(ql)?:\/\//i.test(url);

/** The store's database for a log line: `sqlite` with its directory, or `postgres` with the URL, password hidden. */
export function describeStoreBackend(dataDir: string, backend: StoreBackendOptions = {}): { store: 'sqlite' | 'postgres'; storeLocation: string } {
  return isPostgresUrl(backend.url) ? { store: 'postgres', storeLocation: redactUrl(backend.url) } : { store: 'sqlite', storeLocation: dataDir };
}

/**
 * Opens the store's database, brings its schema up to date and builds the repositories.
 * SQLite (no URL): the data directory's database; an empty encryptionKey is generated once into
 * the data directory. PostgreSQL: migrated under the migration lock (several nodes may start at
 * once); encryptionKey must be given, the same on every node (a generated one would be this
 * node's alone).
 */
export async function openStore(dataDir: string, encryptionKey: string, backend: StoreBackendOptions = {}): Promise<Store> {
  if (isPostgresUrl(backend.url)) {
    // Nothing of the store is in it, but the node's own files are (the initial key, recordings).
    mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    return openPostgresStore(backend.url, encryptionKey, backend);
  }
  if (backend.url !== undefined && backend.url !== '') throw new Error('store.url must be empty (the embedded SQLite database) or a postgres:// or postgresql:// URL');
  // The database first: opening it creates the data directory (0700) the key file goes in.
  const client = await openSqliteClient(dataDir);
  let secretBox: SecretBox;
  try {
    secretBox = new SecretBox(loadOrCreateSecret(dataDir, 'encryption-key', encryptionKey));
  } catch (err) {
    await client.close();
    throw err;
  }
  return storeOver(client, secretBox, { sqlite: client.db, nodeId: backend.nodeId, publicUrl: backend.publicUrl });
}

async function openPostgresStore(url: string, encryptionKey: string, backend: StoreBackendOptions): Promise<Store> {
  if (encryptionKey === '') throw new Error('a PostgreSQL store needs security.encryption_key set (the same on every node): none is generated');
  const secretBox = new SecretBox(Buffer.from(encryptionKey, 'base64'));
  const client = new PostgresClient({ url, ...(backend.poolSize !== undefined ? { poolSize: backend.poolSize } : {}), ...(backend.onIdleError ? { onIdleError: backend.onIdleError } : {}) });
  try {
    await migratePostgres(client, POSTGRES_MIGRATIONS);
  } catch (err) {
    await client.close();
    throw err;
  }
  return storeOver(client, secretBox, { nodeId: backend.nodeId, publicUrl: backend.publicUrl });
}

interface SharedCaches {
  agents: Map<string, StoredAgent>;
  keys: KeyCache;
}

/** The repositories over any SqlClient (the PostgreSQL backend builds its Store here too). */
export function storeOver(client: SqlClient, secretBox: SecretBox, options: { sqlite?: Database; nodeId?: string | undefined; publicUrl?: string | undefined } = {}): Store {
  return build(client, secretBox, { agents: new Map(), keys: new Map() }, false, options.sqlite, options.nodeId ?? null, options.publicUrl ?? '');
}

function build(client: SqlClient, secretBox: SecretBox, caches: SharedCaches, inTransaction: boolean, sqlite: Database | undefined, nodeId: string | null, publicUrl: string): Store {
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
    calls: new CallRepo(client, nodeId, { publicUrl }),
    turnTimelines: new TurnTimelineRepo(client),
    sessions: new SessionRepo(client, nodeId),
    registrations: new RegistrationRepo(client),
    clusterNodes: new ClusterNodeRepo(client),
    callSlots: new CallSlotRepo(client),
    streamGrants: new StreamGrantRepo(client, secretBox),
    webhooks: new WebhookEndpointRepo(client, secretBox),
    webhookDeliveries: new WebhookDeliveryRepo(client, secretBox),
    nodeId,
    tx: async <T>(fn: (store: Store) => Promise<T>): Promise<T> => {
      let inner: Store | undefined;
      try {
        return await client.transaction((tx) => {
          inner = build(tx, secretBox, caches, true, sqlite, nodeId, publicUrl);
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
