/**
 * The work that runs once per cluster, not once per node, and which node runs it
 * (docs/store-postgres.md, "Once per cluster"). Each job is a role; a node runs a role's work
 * while it holds the role.
 *
 * On PostgreSQL a role is a session-level advisory lock on a connection of the node's own
 * (postgres/advisory-locks.ts): one node holds it; when that node dies or loses the database,
 * another node's next try (every cluster.singleton_poll_secs) takes it over. On SQLite one node
 * owns the database: every role is held from the start, no lock, no connection.
 */
import type { Logger } from '../log.ts';
import { AdvisoryLockHolder, PostgresClient } from './postgres/index.ts';
import type { SqlClient } from './sql-client.ts';

/**
 * The roles, their advisory lock keys and the work each stands for. A key is the ASCII bytes of
 * an 8-letter name read as a big-endian 64-bit integer, like the migration lock's ("cbschema",
 * 7161413228262944097, postgres/migrate.ts); a new role takes a new name.
 */
export const CLUSTER_ROLES = {
  /** "cbcarreg" */
  carrier_registration: { key: '7161395627655587175', work: "registering with carriers (trunks with register: true)" },
  /** "cbsipswp" */
  sip_registration_sweep: { key: '7161413254167885680', work: 'deleting expired REGISTER bindings of PBXs' },
  /** "cbtokswp" */
  session_token_sweep: { key: '7161414379365431152', work: 'marking the calls of session tokens that expired unused, and deleting expired carrier stream grants' },
} as const;

export type ClusterRole = keyof typeof CLUSTER_ROLES;
export const CLUSTER_ROLE_NAMES = Object.keys(CLUSTER_ROLES) as ClusterRole[];

export interface ClusterRoles {
  /** True when other nodes may share the database (PostgreSQL): roles can move between nodes. */
  readonly shared: boolean;
  /** Whether this node runs the role's work now. */
  holds(role: ClusterRole): boolean;
  /** fn(held) on every change of the role from now on (gained: true; lost or released: false). */
  watch(role: ClusterRole, fn: (held: boolean) => void): void;
  /** Takes what it can at once (a lone node holds every role once this resolves), then keeps trying. */
  start(): Promise<void>;
  /** Gives every role up (the watchers hear it first) for another node to take. Idempotent. */
  close(): Promise<void>;
}

export interface ClusterRolesOptions {
  /** How often a role not held is tried, and a held one's connection checked, ms. */
  pollMs: number;
  logger: Logger;
}

/** The roles over the store's database: advisory locks on PostgreSQL, always held on SQLite. */
export function clusterRolesOver(client: SqlClient, o: ClusterRolesOptions): ClusterRoles {
  return client instanceof PostgresClient ? advisoryLockRoles(client, o) : SINGLE_NODE_ROLES;
}

/** One node owns the database: every role is its own, for good. */
export const SINGLE_NODE_ROLES: ClusterRoles = {
  shared: false,
  holds: () => true,
  watch: () => {},
  start: async () => {},
  close: async () => {},
};

/**
 * How long the database server waits for a silent node before it ends its session (and frees its
 * roles), as a multiple of the poll: longer than the holder needs to notice the silence itself (a
 * check every poll, failing after one more), so a node cut off from the database has stopped its
 * work before another node can be granted the role.
 */
export const SERVER_DEAD_PEER_POLLS = 6;
/** The shortest wait for the roles' connection to open, ms. */
const MIN_CONNECT_TIMEOUT_MS = 5000;

function advisoryLockRoles(client: PostgresClient, o: ClusterRolesOptions): ClusterRoles {
  const log = o.logger.child({ component: 'cluster' });
  const watchers = new Map<ClusterRole, ((held: boolean) => void)[]>();
  const pollSecs = o.pollMs / 1000;
  let unreachableSaid = false;
  const holder = new AdvisoryLockHolder({
    async open() {
      const session = await client.openDedicatedSession({
        queryTimeoutMs: o.pollMs,
        // Connecting is not bounded by the overlap reasoning: a slow server may take its time.
        connectTimeoutMs: Math.max(o.pollMs, MIN_CONNECT_TIMEOUT_MS),
        serverDeadPeerSecs: Math.ceil(SERVER_DEAD_PEER_POLLS * pollSecs),
      });
      // Reached again: the next outage gets its own line.
      unreachableSaid = false;
      return session;
    },
    keys: new Map(CLUSTER_ROLE_NAMES.map((r) => [r, CLUSTER_ROLES[r].key])),
    pollMs: o.pollMs,
    onChange(name, held, why) {
      const role = name as ClusterRole;
      const { key, work } = CLUSTER_ROLES[role];
      if (held) log.info({ role, lockKey: key }, `cluster role ${role} taken: this node now runs ${work}`);
      else if (why === 'released') log.info({ role, lockKey: key }, `cluster role ${role} released: another node takes over ${work}`);
      else log.warn({ role, lockKey: key, why }, `cluster role ${role} lost: this node stopped ${work}; trying to take it again every ${pollSecs} s`);
      for (const fn of watchers.get(role) ?? []) {
        try {
          fn(held);
        } catch (err) {
          log.error({ err, role }, 'a cluster role watcher threw');
        }
      }
    },
    onUnreachable(err) {
      // Once per outage: the poll goes on quietly until it reaches the database again.
      if (unreachableSaid) return;
      unreachableSaid = true;
      log.warn({ err: err.message }, `cluster roles: cannot reach the database to take roles; trying every ${pollSecs} s`);
    },
  });
  return {
    shared: true,
    holds: (role) => holder.holds(role),
    watch(role, fn) {
      watchers.set(role, [...(watchers.get(role) ?? []), fn]);
    },
    start: () => holder.start(),
    close: () => holder.close(),
  };
}
