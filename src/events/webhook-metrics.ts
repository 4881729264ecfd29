/**
 * Prometheus metrics of webhook delivery (on the daemon's registry, served at /metrics): counted
 * per attempt and per delivery, labelled by event type and failure kind only (never by endpoint
 * or URL: the label set stays bounded whatever the organizations configure).
 */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** Why an attempt failed: a non-2xx answer, or no answer (http-post.ts PostFailure). */
export type AttemptFailure = 'status' | 'timeout' | 'network' | 'destination';

export interface WebhookMetrics {
  /** A 2xx answer; `latencyMs` from the event to it (retries included). */
  delivered(eventType: string, latencyMs: number): void;
  failedAttempt(eventType: string, reason: AttemptFailure): void;
  givenUp(eventType: string): void;
}

/** `pending`: the store's count of deliveries neither delivered nor given up, read at each scrape. */
export function createWebhookMetrics(registry: Registry, pending: () => Promise<number>): WebhookMetrics {
  const delivered = new Counter({ name: 'callbridge_webhook_deliveries_total', help: 'Webhook deliveries an endpoint acknowledged (2xx), by event type.', labelNames: ['event_type'] as const, registers: [registry] });
  const failed = new Counter({
    name: 'callbridge_webhook_failed_attempts_total',
    help: 'Webhook attempts that failed (status: non-2xx answer; timeout, network: no answer; destination: refused by the destination policy), by event type and reason.',
    labelNames: ['event_type', 'reason'] as const,
    registers: [registry],
  });
  const givenUp = new Counter({ name: 'callbridge_webhook_given_up_total', help: 'Webhook deliveries given up after webhooks.retry_max_hours of failed attempts, by event type.', labelNames: ['event_type'] as const, registers: [registry] });
  const latency = new Histogram({
    name: 'callbridge_webhook_delivery_latency_seconds',
    help: 'From an event to its acknowledged delivery (retries included), seconds.',
    buckets: [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15, 60, 300, 3600],
    registers: [registry],
  });
  new Gauge({
    name: 'callbridge_webhook_deliveries_pending',
    help: 'Webhook deliveries waiting in the store (neither delivered nor given up), across every node sharing it.',
    registers: [registry],
    async collect() {
      this.set(await pending());
    },
  });
  return {
    delivered(eventType, latencyMs) {
      delivered.inc({ event_type: eventType });
      latency.observe(Math.max(0, latencyMs) / 1000);
    },
    failedAttempt(eventType, reason) {
      failed.inc({ event_type: eventType, reason });
    },
    givenUp(eventType) {
      givenUp.inc({ event_type: eventType });
    },
  };
}
