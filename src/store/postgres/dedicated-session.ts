/**
 * One PostgreSQL connection of its own, outside the store's pool, kept open for as long as its
 * owner wants: for session-level state that must live exactly as long as this process's link to
 * the server (the cluster roles' advisory locks, src/store/cluster-roles.ts). It is not taken
 * from the pool, so it never competes with the repositories' statements for a connection.
 *
 * The server must notice when the other end is gone (a node killed, its machine powered off),
 * or it would keep the session, and its locks, until the kernel's TCP keep-alive gives up (two
 * hours by default). The session therefore asks the server for short keep-alives of its own
 * (tcp_keepalives_*, tcp_user_timeout: settings any role may change for its own session; they
 * do nothing on a unix socket, where a dead peer is seen at once anyway).
 */
import pg from 'pg';
import { PostgresStoreError, toStoreError } from './errors.ts';
import { STORE_TYPES } from './types.ts';

export interface DedicatedSessionOptions {
  /** A statement not answered by then fails (and the session is to be treated as lost), ms. */
  queryTimeoutMs: number;
  /** Connecting gives up after this long, ms. */
  connectTimeoutMs: number;
  /**
   * How long the server waits for a silent peer before it ends the session, seconds: idle time
   * before its first keep-alive probe, the rest spread over three probes.
   */
  serverDeadPeerSecs: number;
}

export interface DedicatedSession {
  /** One statement without parameters on this connection; its rows. */
  query<T>(sql: string): Promise<T[]>;
  /**
   * fn is called once when the connection is lost (the server ended it, the network failed),
   * never for close().
   */
  onLost(fn: (err: PostgresStoreError) => void): void;
  /** Ends the session (what it held on the server goes with it). Never rejects. */
  close(): Promise<void>;
}

/** Probes the server sends to a silent peer before it gives up on it. */
const SERVER_KEEPALIVE_PROBES = 3;

/** Opens the session (PostgresClient.openDedicatedSession gives it the store's URL and name). */
export async function openDedicatedSession(url: string, applicationName: string, options: DedicatedSessionOptions): Promise<DedicatedSession> {
  const client = new pg.Client({
    connectionString: url,
    application_name: applicationName,
    connectionTimeoutMillis: options.connectTimeoutMs,
    query_timeout: options.queryTimeoutMs,
    types: STORE_TYPES,
  });
  let lost: ((err: PostgresStoreError) => void) | undefined;
  let ended = false;
  const loseOnce = (err: unknown): void => {
    if (ended) return;
    ended = true;
    lost?.(toStoreError(err, url));
  };
  // Without an 'error' listener node-postgres would throw it from the socket and end the process.
  client.on('error', loseOnce);
  client.on('end', () => loseOnce(new Error('Connection terminated')));
  try {
    await client.connect();
    const idle = Math.max(1, Math.floor(options.serverDeadPeerSecs / 2));
    const interval = Math.max(1, Math.floor((options.serverDeadPeerSecs - idle) / SERVER_KEEPALIVE_PROBES));
    await client.query(
      `SET tcp_keepalives_idle = ${idle}; SET tcp_keepalives_interval = ${interval}; SET tcp_keepalives_count = ${SERVER_KEEPALIVE_PROBES}; SET tcp_user_timeout = ${options.serverDeadPeerSecs * 1000}`,
    );
  } catch (err) {
    ended = true;
    await client.end().catch(() => {});
    throw toStoreError(err, url);
  }
  return {
    async query<T>(sql: string): Promise<T[]> {
      if (ended) throw new PostgresStoreError('closed', 'this dedicated PostgreSQL session has ended', undefined, undefined);
      try {
        return (await client.query(sql)).rows as T[];
      } catch (err) {
        throw toStoreError(err, url);
      }
    },
    onLost(fn) {
      lost = fn;
    },
    async close() {
      // Also after a loss: the socket may still need releasing.
      ended = true;
      await client.end().catch(() => {});
    },
  };
}
