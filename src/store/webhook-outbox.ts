/**
 * The webhook outbox (table webhook_deliveries, migration 16; docs/webhooks.md): one row per
 * event and subscribed endpoint, written in the transaction of the change that caused the event
 * (addCallEvent), so an event exists exactly when its change committed. The deliverer
 * (events/webhook-deliverer.ts) claims due rows with a lease, on any node sharing the store.
 *
 * Times compared here are epoch ms on the database's clock (dbNowMs), as the node leases are, so
 * nodes whose clocks disagree still agree on which rows are due and whose lease has run out.
 */
import { randomUUID } from 'node:crypto';
import type { SqlClient } from './sql-client.ts';
import type { SecretBox } from './secret-box.ts';
import { dbNowMs } from './db-clock.ts';
import { toCall, type CallRecord } from '../domain/call.ts';
import type { CallEventBody, CallEventType } from '../domain/webhook.ts';

/**
 * Writes `type` for the call to the outbox of every endpoint of its organization subscribed to
 * it, through `tx` (the transaction that made the change: the event commits with it or not at
 * all). `snapshot` reads the call as it is now in that transaction; it is called only when an
 * endpoint subscribes, so an organization without webhooks pays one indexed read. Returns how
 * many rows were written. The body's `data.call` is the call exactly as GET /v1/calls/{id} shows it;
 * `extra` goes into `data` beside it (recording.ready's recording_url).
 */
export async function addCallEvent(
  tx: SqlClient,
  type: CallEventType,
  orgId: string,
  snapshot: () => Promise<CallRecord | undefined>,
  extra: Omit<CallEventBody['data'], 'call'> = {},
): Promise<number> {
  const endpoints = (await tx.all<{ id: string; events: string }>('SELECT id, events FROM webhook_endpoints WHERE org_id = ?', [orgId])).filter((e) =>
    (JSON.parse(e.events) as string[]).includes(type),
  );
  if (endpoints.length === 0) return 0;
  const call = await snapshot();
  if (!call) return 0;
  const event: CallEventBody = { type, id: randomUUID(), created_at: new Date().toISOString(), data: { call: toCall(call), ...extra } };
  const body = JSON.stringify(event);
  const now = dbNowMs(tx);
  for (const e of endpoints) {
    // seq: after the endpoint's earlier events of this call. Every call event is written with a
    // change of the call's row, whose lock orders the transactions that compute it.
    await tx.run(
      `INSERT INTO webhook_deliveries (id, event_id, endpoint_id, org_id, event_type, order_key, seq, body, next_attempt_at, event_ms, created_at)
       VALUES (?, ?, ?, ?, ?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM webhook_deliveries WHERE endpoint_id = ? AND order_key = ?), ?, ${now}, ${now}, ?)`,
      [randomUUID(), event.id, e.id, orgId, type, call.id, e.id, call.id, body, event.created_at],
    );
  }
  return endpoints.length;
}

/** A row the deliverer holds the lease of: what to send, where, and the secret to sign with. */
export interface ClaimedDelivery {
  id: string;
  event_id: string;
  event_type: string;
  endpoint_id: string;
  body: string;
  url: string;
  secret: string;
  /** Attempts so far, this one included. */
  attempts: number;
  /** When the event happened and when the claim was made (database clock, ms). */
  event_ms: number;
  claimed_ms: number;
}

export type DeliveryStatus = 'pending' | 'delivered' | 'failed';

/** One row of GET /v1/webhooks/{id}/deliveries. */
export interface DeliveryRecord {
  id: string;
  event_id: string;
  event_type: string;
  call_id: string;
  status: DeliveryStatus;
  attempts: number;
  last_status_code: number | null;
  last_error: string | null;
  /** The next attempt (ISO), while pending. */
  next_attempt_at: string | null;
  created_at: string;
  finished_at: string | null;
}

interface DeliveryRow {
  id: string;
  event_id: string;
  event_type: string;
  order_key: string;
  status: DeliveryStatus;
  attempts: number;
  last_status_code: number | null;
  last_error: string | null;
  next_attempt_at: number | string;
  created_at: string;
  finished_at: string | null;
}

/** The longest error text kept per row (a network error's message, a refused destination). */
const MAX_ERROR_LENGTH = 500;

export class WebhookDeliveryRepo {
  constructor(
    private readonly db: SqlClient,
    private readonly box: SecretBox,
  ) {}

  /**
   * Leases up to `limit` due rows to `owner` for `leaseMs`: pending, due, not leased (or the lease
   * ran out: its node died mid-attempt), and the first pending one of their endpoint and call
   * (seq order). One conditional UPDATE decides: of two nodes racing for a row, the second finds
   * it leased and skips it. Each claim counts an attempt.
   */
  async claim(owner: string, leaseMs: number, limit: number): Promise<ClaimedDelivery[]> {
    const now = dbNowMs(this.db);
    const free = `status = 'pending' AND (lease_until IS NULL OR lease_until <= ${now})`;
    const rows = await this.db.all<{ id: string; event_id: string; event_type: string; endpoint_id: string; body: string; attempts: number; event_ms: number | string; claimed_ms: number | string }>(
      `UPDATE webhook_deliveries SET lease_owner = ?, lease_until = ${now} + ?, attempts = attempts + 1
       WHERE id IN (
         SELECT d.id FROM webhook_deliveries d
         WHERE d.finished_at IS NULL AND d.status = 'pending' AND d.next_attempt_at <= ${now} AND (d.lease_until IS NULL OR d.lease_until <= ${now})
           AND NOT EXISTS (SELECT 1 FROM webhook_deliveries p WHERE p.endpoint_id = d.endpoint_id AND p.order_key = d.order_key AND p.seq < d.seq AND p.status = 'pending')
         ORDER BY d.next_attempt_at LIMIT ?)
         AND ${free}
       RETURNING id, event_id, event_type, endpoint_id, body, attempts, event_ms, lease_until - ? AS claimed_ms`,
      [owner, leaseMs, limit, leaseMs],
    );
    if (rows.length === 0) return [];
    const endpoints = new Map<string, { url: string; secret: string }>();
    for (const endpointId of new Set(rows.map((r) => r.endpoint_id))) {
      const e = await this.db.get<{ url: string; secret_enc: string }>('SELECT url, secret_enc FROM webhook_endpoints WHERE id = ?', [endpointId]);
      if (e) endpoints.set(endpointId, { url: e.url, secret: this.box.open(e.secret_enc) });
    }
    // A row whose endpoint was deleted after the claim went with it (cascade): nothing to send.
    return rows.flatMap((r) => {
      const e = endpoints.get(r.endpoint_id);
      return e ? [{ ...r, ...e, event_ms: Number(r.event_ms), claimed_ms: Number(r.claimed_ms) }] : [];
    });
  }

  /** The endpoint answered 2xx. */
  async delivered(id: string, statusCode: number): Promise<void> {
    await this.db.run(
      "UPDATE webhook_deliveries SET status = 'delivered', last_status_code = ?, last_error = NULL, lease_owner = NULL, lease_until = NULL, finished_at = ? WHERE id = ? AND status = 'pending'",
      [statusCode, new Date().toISOString(), id],
    );
  }

  /** The attempt failed; the next one in `delayMs`. */
  async retryLater(id: string, failure: { statusCode: number | null; error: string | null }, delayMs: number): Promise<void> {
    const now = dbNowMs(this.db);
    await this.db.run(
      `UPDATE webhook_deliveries SET next_attempt_at = ${now} + ?, last_status_code = ?, last_error = ?, lease_owner = NULL, lease_until = NULL WHERE id = ? AND status = 'pending'`,
      [Math.round(delayMs), failure.statusCode, clip(failure.error), id],
    );
  }

  /** The attempt failed and the retry window (webhooks.retry_max_hours) is over: given up. */
  async giveUp(id: string, failure: { statusCode: number | null; error: string | null }): Promise<void> {
    await this.db.run(
      "UPDATE webhook_deliveries SET status = 'failed', last_status_code = ?, last_error = ?, lease_owner = NULL, lease_until = NULL, finished_at = ? WHERE id = ? AND status = 'pending'",
      [failure.statusCode, clip(failure.error), new Date().toISOString(), id],
    );
  }

  /** The endpoint's deliveries, newest first, at most `limit`. */
  async listForEndpoint(endpointId: string, limit: number): Promise<DeliveryRecord[]> {
    const rows = await this.db.all<DeliveryRow>(
      'SELECT id, event_id, event_type, order_key, status, attempts, last_status_code, last_error, next_attempt_at, created_at, finished_at FROM webhook_deliveries WHERE endpoint_id = ? ORDER BY created_at DESC, seq DESC LIMIT ?',
      [endpointId, limit],
    );
    return rows.map((r) => ({
      id: r.id,
      event_id: r.event_id,
      event_type: r.event_type,
      call_id: r.order_key,
      status: r.status,
      attempts: Number(r.attempts),
      last_status_code: r.last_status_code,
      last_error: r.last_error,
      next_attempt_at: r.status === 'pending' ? new Date(Number(r.next_attempt_at)).toISOString() : null,
      created_at: r.created_at,
      finished_at: r.finished_at,
    }));
  }

  /** Rows not yet delivered nor given up, across the store (the pending gauge). */
  async pendingCount(): Promise<number> {
    return Number((await this.db.get<{ n: number | string }>("SELECT count(*) AS n FROM webhook_deliveries WHERE finished_at IS NULL"))?.n ?? 0);
  }

  /** Deletes delivered and given-up rows finished before `before` (ISO). Returns how many. */
  async prune(before: string): Promise<number> {
    return (await this.db.run("DELETE FROM webhook_deliveries WHERE finished_at IS NOT NULL AND finished_at < ?", [before])).changes;
  }
}

const clip = (s: string | null): string | null => (s === null ? null : s.slice(0, MAX_ERROR_LENGTH));
