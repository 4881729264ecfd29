/**
 * Delivers the webhook outbox (store/webhook-outbox.ts) at least once: every poll it claims due
 * rows with a lease (on any node sharing the store; the claim decides who sends), signs each
 * with its endpoint's secret (Standard Webhooks; webhook-id = the event id, the same on every
 * retry), POSTs it to the address the destination policy allows (http-post.ts), and records the
 * outcome: 2xx delivered; anything else retried with exponential backoff and jitter until
 * webhooks.retry_max_hours after the event, then given up. A node that dies mid-attempt leaves
 * its rows leased; the lease runs out and another node (or this one, restarted) sends them again.
 *
 * Order: the claim only takes the first pending event of an endpoint and call, so event n + 1 of a
 * call goes to an endpoint after n was delivered or given up (docs/webhooks.md).
 */
import { randomBytes } from 'node:crypto';
import type { ClaimedDelivery, WebhookDeliveryRepo } from '../store/webhook-outbox.ts';
import type { DestinationPolicy } from './destination.ts';
import { PostError, postJson } from './http-post.ts';
import { signWebhook } from './standard-webhooks.ts';
import type { AttemptFailure, WebhookMetrics } from './webhook-metrics.ts';

/** The longest wait between two attempts, whatever the backoff has grown to. */
const MAX_BACKOFF_MS = 60 * 60 * 1000;
/** How often finished rows older than the retention are deleted. */
const PRUNE_EVERY_MS = 60 * 1000;
/** Beyond the attempt's own deadline, how long the lease covers the store writes around it. */
const LEASE_MARGIN_MS = 10_000;

export interface WebhookDelivererOptions {
  deliveries: Pick<WebhookDeliveryRepo, 'claim' | 'delivered' | 'retryLater' | 'giveUp' | 'prune'>;
  /** This node's name in the lease (cluster.node_id); a random suffix tells this run apart. */
  nodeId: string;
  policy: DestinationPolicy;
  timeoutMs: number;
  retryBaseMs: number;
  retryMaxMs: number;
  pollIntervalMs: number;
  maxInFlight: number;
  retentionMs: number;
  metrics?: WebhookMetrics;
  logger: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void; debug(obj: object, msg: string): void };
  /** Jitter source in [0, 1); tests may fix it. */
  random?: () => number;
}

/** The delay before retry n (n >= 1): base * 2^(n - 1), capped, drawn between half and all of it. */
export function backoffMs(attempt: number, baseMs: number, random: () => number = Math.random): number {
  const full = Math.min(baseMs * 2 ** Math.min(attempt - 1, 40), MAX_BACKOFF_MS);
  return Math.round(full * (0.5 + random() * 0.5));
}

interface Failure {
  kind: AttemptFailure;
  statusCode: number | null;
  error: string;
}

export class WebhookDeliverer {
  readonly #o: WebhookDelivererOptions;
  readonly #owner: string;
  readonly #inFlight = new Set<Promise<void>>();
  #timer: NodeJS.Timeout | undefined;
  #polling: Promise<void> | undefined;
  /** A poll was asked for while one ran: run another after it. */
  #again = false;
  #stopped = false;
  #lastPrune = 0;

  constructor(o: WebhookDelivererOptions) {
    this.#o = o;
    this.#owner = `${o.nodeId}/${randomBytes(4).toString('hex')}`;
  }

  start(): void {
    if (this.#stopped || this.#timer) return;
    this.#timer = setInterval(() => this.poll(), this.#o.pollIntervalMs);
    this.#timer.unref();
    this.poll();
  }

  /** Looks for due rows now (besides the interval). */
  poll(): void {
    if (this.#stopped) return;
    if (this.#polling) {
      this.#again = true;
      return;
    }
    this.#polling = this.#claimAndSend()
      .catch((err: unknown) => this.#o.logger.error({ err }, 'webhooks: claiming due deliveries failed'))
      .finally(() => {
        this.#polling = undefined;
        if (this.#again) {
          this.#again = false;
          this.poll();
        }
      });
  }

  /**
   * Stops claiming; resolves once the attempts under way have ended and their outcome is stored
   * (each is bounded by webhooks.timeout_ms). Nothing is lost: a row not yet delivered stays
   * pending in the store for the next run or another node. Idempotent.
   */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    // A claim under way may still hand out rows: their attempts are waited for too.
    while (this.#polling !== undefined || this.#inFlight.size > 0) {
      await this.#polling;
      await Promise.all([...this.#inFlight]);
    }
  }

  async #claimAndSend(): Promise<void> {
    await this.#prune();
    const room = this.#o.maxInFlight - this.#inFlight.size;
    if (room <= 0 || this.#stopped) return;
    const claimed = await this.#o.deliveries.claim(this.#owner, this.#o.timeoutMs + LEASE_MARGIN_MS, room);
    for (const d of claimed) {
      // An outcome that could not be stored (the store is down): the row stays leased and is
      // attempted again once the lease runs out (at least once, never lost).
      const attempt = this.#attempt(d).catch((err: unknown) => this.#o.logger.error({ err, deliveryId: d.id }, 'webhooks: an attempt\'s outcome could not be stored; retried when its lease runs out'));
      this.#inFlight.add(attempt);
      void attempt.finally(() => {
        this.#inFlight.delete(attempt);
        // A slot is free, and the call's next event may be due now that this one is done.
        this.poll();
      });
    }
  }

  async #attempt(d: ClaimedDelivery): Promise<void> {
    const started = Date.now();
    let failure: Failure;
    try {
      const headers = signWebhook(d.secret, d.event_id, d.body);
      const answer = await postJson(d.url, d.body, { policy: this.#o.policy, timeoutMs: this.#o.timeoutMs, headers, maxResponseBytes: 1024 });
      if (answer.status >= 200 && answer.status < 300) {
        await this.#o.deliveries.delivered(d.id, answer.status);
        // Latency from the event (database clock at the claim, plus the attempt on ours).
        this.#o.metrics?.delivered(d.event_type, d.claimed_ms - d.event_ms + (Date.now() - started));
        return;
      }
      failure = { kind: 'status', statusCode: answer.status, error: `HTTP ${answer.status}` };
    } catch (err) {
      if (!(err instanceof PostError)) throw err;
      failure = { kind: err.kind, statusCode: null, error: `${err.kind}: ${err.message}` };
    }
    this.#o.metrics?.failedAttempt(d.event_type, failure.kind);
    const delay = backoffMs(d.attempts, this.#o.retryBaseMs, this.#o.random);
    const log = { deliveryId: d.id, eventId: d.event_id, endpointId: d.endpoint_id, attempts: d.attempts, failure: failure.error };
    if (d.claimed_ms + delay > d.event_ms + this.#o.retryMaxMs) {
      await this.#o.deliveries.giveUp(d.id, failure);
      this.#o.metrics?.givenUp(d.event_type);
      this.#o.logger.warn(log, 'webhooks: delivery given up (webhooks.retry_max_hours)');
      return;
    }
    await this.#o.deliveries.retryLater(d.id, failure, delay);
    this.#o.logger.debug({ ...log, retryInMs: delay }, 'webhooks: attempt failed, retried later');
  }

  async #prune(): Promise<void> {
    const now = Date.now();
    if (now - this.#lastPrune < PRUNE_EVERY_MS) return;
    this.#lastPrune = now;
    await this.#o.deliveries.prune(new Date(now - this.#o.retentionMs).toISOString());
  }
}
