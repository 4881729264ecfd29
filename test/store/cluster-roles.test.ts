/**
 * The cluster roles (src/store/cluster-roles.ts) on a real PostgreSQL server: two "nodes" (two
 * PostgresClients, each with its own dedicated lock connection) on one database. Exactly one
 * holds each role; when the holder's connection is terminated from a superuser connection (what
 * the server sees when a node dies), the holder hears it at once and goes back to trying, and the
 * other takes over within the poll; a holder that closes hands over the same way. On SQLite every
 * role is held from the start.
 */
import net from 'node:net';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.ts';
import { PostgresClient } from '../../src/store/postgres/index.ts';
import { CLUSTER_ROLES, CLUSTER_ROLE_NAMES, clusterRolesOver, type ClusterRole, type ClusterRoles } from '../../src/store/cluster-roles.ts';
import { openTestStore, stopTestPostgres, testPostgresDatabase } from '../helpers/store-backends.ts';
import { freePort, postgresAvailability } from '../helpers/postgres.ts';
import { delay, until } from '../helpers/until.ts';

const POLL_MS = 200;
const pgAvailable = postgresAvailability();

/**
 * A TCP relay to the PostgreSQL server on a port of its own, closed until open(): a node that
 * connects through it can be cut off (close: its connections end, new ones are refused, as for
 * a dead node) or silenced (pause: nothing passes, both ends stay open, as in a partition).
 */
interface Relay {
  port: number;
  open(): Promise<void>;
  close(): Promise<void>;
  /** Stops forwarding on the connections open now; returns them. */
  pause(): net.Socket[];
}

async function relayTo(target: URL): Promise<Relay> {
  const port = await freePort();
  const sockets = new Set<net.Socket>();
  /** Paused sockets: nothing of theirs reaches the other side, not even their end. */
  const silenced = new WeakSet<net.Socket>();
  let server: net.Server | undefined;
  return {
    port,
    async open() {
      server = net.createServer((inbound) => {
        const outbound = net.connect(Number(target.port), target.hostname);
        for (const sock of [inbound, outbound]) {
          sockets.add(sock);
          sock.on('error', () => {});
          sock.on('close', () => {
            sockets.delete(sock);
            if (!silenced.has(sock)) (sock === inbound ? outbound : inbound).destroy();
          });
        }
        inbound.pipe(outbound).pipe(inbound);
      });
      await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', resolve));
    },
    async close() {
      for (const sock of sockets) sock.destroy();
      const s = server;
      server = undefined;
      if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
    },
    pause() {
      const now = [...sockets];
      for (const sock of now) {
        silenced.add(sock);
        sock.unpipe();
        sock.pause();
      }
      return now;
    },
  };
}

const via = (url: string, port: number): string => {
  const u = new URL(url);
  u.port = String(port);
  return u.toString();
};

interface Node {
  client: PostgresClient;
  roles: ClusterRoles;
  /** Every change heard by the watchers, in order. */
  events: { role: ClusterRole; held: boolean }[];
  logs: { msg: string; role?: string }[];
  holdsAll(): boolean;
  holdsNone(): boolean;
}

async function startNode(url: string): Promise<Node> {
  const client = new PostgresClient({ url, poolSize: 2 });
  const logs: Node['logs'] = [];
  const logger = createLogger('info', { write: (line: string) => void logs.push(JSON.parse(line) as Node['logs'][number]) });
  const roles = clusterRolesOver(client, { pollMs: POLL_MS, logger });
  const events: Node['events'] = [];
  for (const role of CLUSTER_ROLE_NAMES) roles.watch(role, (held) => events.push({ role, held }));
  await roles.start();
  return {
    client,
    roles,
    events,
    logs,
    holdsAll: () => CLUSTER_ROLE_NAMES.every((r) => roles.holds(r)),
    holdsNone: () => CLUSTER_ROLE_NAMES.every((r) => !roles.holds(r)),
  };
}

async function stopNode(n: Node): Promise<void> {
  await n.roles.close();
  await n.client.close();
}

describe.skipIf(pgAvailable.skip)(`cluster roles on PostgreSQL${pgAvailable.skip ? `: skipped, ${pgAvailable.reason}` : ''}`, () => {
  let url: string;
  let admin: pg.Client;

  beforeAll(async () => {
    ({ url } = await testPostgresDatabase('cluster_roles'));
    admin = new pg.Client({ connectionString: url });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.end();
    await stopTestPostgres();
  });

  /** The server backends holding each role's lock (pg_locks shows a bigint key as classid:objid). */
  async function lockHolders(): Promise<Map<ClusterRole, number[]>> {
    const out = new Map<ClusterRole, number[]>();
    for (const role of CLUSTER_ROLE_NAMES) {
      const key = BigInt(CLUSTER_ROLES[role].key);
      const r = await admin.query<{ pid: number }>(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid = $1 AND objid = $2",
        [String(key >> 32n), String(key & 0xffffffffn)],
      );
      out.set(role, r.rows.map((x) => x.pid));
    }
    return out;
  }

  it('one node holds each role; a dead holder is replaced within the poll; a terminated holder hears it at once and tries again', async () => {
    const relay = await relayTo(new URL(url));
    await relay.open();
    // A reaches the server through the relay (so it can "die"), B directly.
    const a = await startNode(via(url, relay.port));
    const b = await startNode(url);
    try {
      // A started first on an empty cluster: every role is A's from its first try; B holds none.
      expect(a.holdsAll()).toBe(true);
      expect(b.holdsNone()).toBe(true);
      expect(a.events).toEqual(CLUSTER_ROLE_NAMES.map((role) => ({ role, held: true })));
      expect(a.logs.filter((l) => l.msg.includes('taken')).map((l) => l.role).sort()).toEqual([...CLUSTER_ROLE_NAMES].sort());
      // Several polls later nothing has moved.
      await delay(3 * POLL_MS);
      expect(b.holdsNone()).toBe(true);
      const holders = await lockHolders();
      const aPids = new Set(CLUSTER_ROLE_NAMES.flatMap((r) => holders.get(r)!));
      expect(aPids.size, JSON.stringify([...holders])).toBe(1);
      for (const role of CLUSTER_ROLE_NAMES) expect(holders.get(role)).toHaveLength(1);

      // A "dies": its connection ends and it cannot reach the server any more. B takes every
      // role over on its next tries.
      await relay.close();
      await until(() => a.holdsNone(), 'A to notice it lost its roles', 10 * POLL_MS);
      expect(a.events.slice(CLUSTER_ROLE_NAMES.length)).toEqual(CLUSTER_ROLE_NAMES.map((role) => ({ role, held: false })));
      expect(a.logs.some((l) => l.msg.includes('lost') && l.msg.includes('trying to take it again'))).toBe(true);
      await until(() => b.holdsAll(), 'B to take the roles over', 10 * POLL_MS);
      const afterDeath = await lockHolders();
      for (const role of CLUSTER_ROLE_NAMES) expect(afterDeath.get(role)).toHaveLength(1);
      const [bPid] = afterDeath.get('carrier_registration')!;
      expect(aPids).not.toContain(bPid);

      // A is back (it kept trying): B still holds everything, A nothing.
      await relay.open();
      await delay(4 * POLL_MS);
      expect(b.holdsAll()).toBe(true);
      expect(a.holdsNone()).toBe(true);

      // B's session is terminated from a superuser connection: B hears it at once (not at its
      // next check), and each role ends up with exactly one of the two nodes.
      await admin.query('SELECT pg_terminate_backend($1)', [bPid]);
      await until(() => b.events.filter((e) => !e.held).length === CLUSTER_ROLE_NAMES.length, 'B to notice its session was terminated', 10 * POLL_MS);
      await until(() => CLUSTER_ROLE_NAMES.every((r) => a.roles.holds(r) !== b.roles.holds(r)), 'every role held by exactly one node again', 10 * POLL_MS);
      const afterTerminate = await lockHolders();
      for (const role of CLUSTER_ROLE_NAMES) expect(afterTerminate.get(role)).toHaveLength(1);

      // A graceful close hands everything to the other node.
      const [leaving, staying] = a.roles.holds('carrier_registration') ? [a, b] : [b, a];
      await leaving.roles.close();
      expect(leaving.holdsNone()).toBe(true);
      await until(() => staying.holdsAll(), 'the other node to take every role after a close', 10 * POLL_MS);
    } finally {
      await stopNode(a);
      await stopNode(b);
      await relay.close();
    }
  });

  it('a node started while the database is unreachable holds nothing, says so once, and takes its roles when it answers; a silent connection makes it give them up by itself', async () => {
    const relay = await relayTo(new URL(url));
    const client = new PostgresClient({ url: via(url, relay.port), poolSize: 1 });
    const logs: { msg: string }[] = [];
    const logger = createLogger('info', { write: (line: string) => void logs.push(JSON.parse(line) as { msg: string }) });
    const roles = clusterRolesOver(client, { pollMs: POLL_MS, logger });
    const holdsAll = () => CLUSTER_ROLE_NAMES.every((r) => roles.holds(r));
    const holdsNone = () => CLUSTER_ROLE_NAMES.every((r) => !roles.holds(r));
    try {
      // Nothing listens on the relay's port yet: connection refused, round after round.
      await roles.start();
      expect(holdsNone()).toBe(true);
      await delay(3 * POLL_MS);
      expect(logs.filter((l) => l.msg.includes('cannot reach the database')), JSON.stringify(logs)).toHaveLength(1);
      await relay.open();
      await until(holdsAll, 'the roles once the database answers', 10 * POLL_MS);

      // The network goes silent both ways (a partition): the holder's check times out after a
      // poll and it gives its roles up by itself, though the server still keeps its session.
      const frozen = relay.pause();
      await until(holdsNone, 'the holder to give its roles up on a silent connection', 10 * POLL_MS);
      // Its new connection is refused the locks while the server keeps the old session (here the
      // relay's end answers the server's keep-alives): never two holders.
      await delay(4 * POLL_MS);
      expect(holdsNone()).toBe(true);
      // The old session ends: the roles are free and taken again.
      for (const sock of frozen) sock.destroy();
      await until(holdsAll, 'the roles once the old session is gone', 10 * POLL_MS);
    } finally {
      await roles.close();
      await client.close();
      await relay.close();
    }
  });
});

describe('cluster roles on SQLite', () => {
  it('holds every role from the start, with nothing to share', async () => {
    const t = await openTestStore('sqlite');
    try {
      const roles = clusterRolesOver(t.store.client, { pollMs: POLL_MS, logger: createLogger('silent') });
      await roles.start();
      expect(roles.shared).toBe(false);
      for (const role of CLUSTER_ROLE_NAMES) expect(roles.holds(role)).toBe(true);
      await roles.close();
      // Closing changes nothing for a lone node's daemon, which closes its roles last.
      for (const role of CLUSTER_ROLE_NAMES) expect(roles.holds(role)).toBe(true);
    } finally {
      await t.dispose();
    }
  });
});
