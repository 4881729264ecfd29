/**
 * Refused carrier webhooks (a signature that does not verify, a body over the limits), logged so
 * that nobody without a carrier's auth token can flood the log: per source address, route and
 * reason, the first refusal of a window is logged in full (its fields clipped by the caller); the
 * others of that window are only counted, and summed up in one line when the window ends (or the
 * daemon stops). So at most 2 lines per source, route and reason per window, however many arrive.
 * Every refusal is counted by the caller's `count` (a Prometheus counter with a `reason` label).
 *
 * The table is bounded too: beyond `maxSources` entries in one window, further sources are counted
 * together in one line, so a spread of addresses cannot grow memory either.
 */
import type { Logger } from '../log.ts';

/** Why a webhook was refused (the metric's `reason` label). */
export type WebhookRefusalReason = 'bad_signature' | 'body_too_large' | 'too_many_parameters';

/** Which webhook route (the metric's `route` label). */
export type WebhookRoute = 'voice' | 'status';

export interface WebhookRefusalOptions {
  log: Logger;
  /** Called for every refusal, logged or not. */
  count(route: WebhookRoute, reason: WebhookRefusalReason): void;
  /** The window of one full line per source (default 60 s). */
  windowMs?: number;
  /** Sources tracked per window (default 1,000); the rest are summed up together. */
  maxSources?: number;
}

interface Suppressed {
  source: string;
  route: WebhookRoute;
  reason: WebhookRefusalReason;
  /** Refusals after the window's first. */
  count: number;
}

export const REFUSAL_LOG_WINDOW_MS = 60_000;
const DEFAULT_MAX_SOURCES = 1000;
/** The source under which entries beyond maxSources are counted together. */
const OTHER_SOURCES = '(other sources)';

export class WebhookRefusalLog {
  readonly #o: WebhookRefusalOptions;
  readonly #windowMs: number;
  readonly #maxSources: number;
  /** This window's refusals by source, route and reason. */
  readonly #window = new Map<string, Suppressed>();
  readonly #timer: NodeJS.Timeout;

  constructor(o: WebhookRefusalOptions) {
    this.#o = o;
    this.#windowMs = o.windowMs ?? REFUSAL_LOG_WINDOW_MS;
    this.#maxSources = o.maxSources ?? DEFAULT_MAX_SOURCES;
    this.#timer = setInterval(() => this.flush(), this.#windowMs);
    this.#timer.unref();
  }

  /**
   * One refused webhook from `source` (the peer's address). `fields` must be bounded already
   * (clipForLog): they are logged as given, with the source, when this is the first refusal of
   * its source, route and reason in the window.
   */
  refused(source: string, route: WebhookRoute, reason: WebhookRefusalReason, fields: Record<string, unknown>, message: string): void {
    this.#o.count(route, reason);
    let key = `${source} ${route} ${reason}`;
    let seen = this.#window.get(key);
    if (seen === undefined && this.#window.size >= this.#maxSources) {
      key = `${OTHER_SOURCES} ${route} ${reason}`;
      seen = this.#window.get(key) ?? { source: OTHER_SOURCES, route, reason, count: 0 };
      this.#window.set(key, seen);
    }
    if (seen === undefined) {
      this.#window.set(key, { source, route, reason, count: 0 });
      this.#o.log.warn({ ...fields, source, route, reason }, message);
      return;
    }
    seen.count++;
  }

  /** Ends the window: one summary line per source, route and reason with refusals not logged. */
  flush(): void {
    const windowSecs = Math.round(this.#windowMs / 1000);
    for (const { source, route, reason, count } of this.#window.values()) {
      if (count === 0) continue;
      this.#o.log.warn({ source, route, reason, refused: count, windowSecs }, `carrier webhooks refused: ${count} more from ${source} (${route}, ${reason}) in this window, not logged one by one`);
    }
    this.#window.clear();
  }

  /** Stops the window's timer, summing up what is counted (the daemon stops). */
  close(): void {
    clearInterval(this.#timer);
    this.flush();
  }
}
