/**
 * How many unauthenticated refusals one source may get: a token bucket per source address,
 * taken by every 401 challenge and every 403 to a blocked source (the answers that cost us
 * nothing but the sender asks for at line rate). A scanner sending 500 INVITEs a second got 500
 * challenges a second, each a nonce HMAC and a datagram (and on UDP each retransmitted until
 * ACKed). A PBX needs one challenge per call, or fewer when it reuses a nonce.
 *
 *   const throttled = limiter.take(source);
 *   if (throttled === undefined) -> challenge (or 403) as usual
 *   else -> drop (UDP) / 503 Retry-After: throttled.retryAfterSecs (TCP, TLS);
 *           log only when throttled.log (once per logWindowMs per source, with the count of the
 *           refusals not logged since: throttled.suppressed)
 *
 * Sources are keyed like AuthRateLimiter's (sourceKey): IPv4 addresses, IPv4-mapped IPv6 as
 * IPv4, other IPv6 by their /64. Memory is bounded (`maxEntries`, least recently seen evicted
 * first: a source evicted is one that was quiet longest, whose bucket had refilled or nearly).
 * Per INVITE: one Map lookup and a little arithmetic, no allocation when a token is granted.
 */
import { sourceKey, type RateLimitClock } from './auth-rate-limit.ts';

export interface ChallengeRateLimiterOptions {
  /** Tokens added per second (the steady challenge rate). Default 20. */
  ratePerSecond?: number;
  /** Bucket size: challenges a quiet source may get at once. Default 40. */
  burst?: number;
  /** A throttled source is reported for logging at most once per this window. Default 60 s. */
  logWindowMs?: number;
  /** Most sources tracked at once. Default 10,000. */
  maxEntries?: number;
  /** IPv6 addresses are grouped by this prefix length. Default 64. */
  ipv6PrefixLength?: number;
  /** Default performance.now() (monotonic). */
  clock?: RateLimitClock;
}

/** A refusal: the source has no token left. */
export interface Throttled {
  /** Log this one: the first refusal of the source, or the first one logWindowMs after the last logged. */
  log: boolean;
  /** Refusals not logged since the last logged one (reported with this one when `log`). */
  suppressed: number;
  /** Whole seconds until the source has a token again (Retry-After), at least 1. */
  retryAfterSecs: number;
}

interface Bucket {
  tokens: number;
  /** Clock time of `tokens`. */
  at: number;
  /** When a refusal of this source was last reported for logging; -Infinity: never. */
  loggedAt: number;
  /** Refusals since then. */
  suppressed: number;
}

const monotonicClock: RateLimitClock = { now: () => performance.now() };

export class ChallengeRateLimiter {
  readonly ratePerSecond: number;
  readonly burst: number;
  readonly logWindowMs: number;
  readonly maxEntries: number;
  readonly ipv6PrefixLength: number;
  readonly #perMs: number;
  readonly #clock: RateLimitClock;
  readonly #buckets = new Map<string, Bucket>();

  /** @throws RangeError on an out-of-range option. */
  constructor(options: ChallengeRateLimiterOptions = {}) {
    this.ratePerSecond = options.ratePerSecond ?? 20;
    this.burst = options.burst ?? 40;
    this.logWindowMs = options.logWindowMs ?? 60_000;
    this.maxEntries = options.maxEntries ?? 10_000;
    this.ipv6PrefixLength = options.ipv6PrefixLength ?? 64;
    if (!(this.ratePerSecond > 0) || !Number.isFinite(this.ratePerSecond)) throw new RangeError('ratePerSecond must be positive');
    if (!(this.burst >= 1) || !Number.isFinite(this.burst)) throw new RangeError('burst must be at least 1');
    if (!(this.logWindowMs >= 0)) throw new RangeError('logWindowMs must not be negative');
    if (!Number.isInteger(this.maxEntries) || this.maxEntries < 1) throw new RangeError('maxEntries must be a positive integer');
    this.#perMs = this.ratePerSecond / 1000;
    this.#clock = options.clock ?? monotonicClock;
  }

  /** Sources tracked now (never more than maxEntries). */
  get size(): number {
    return this.#buckets.size;
  }

  /** Takes a token for `address`: undefined when granted, else how to refuse. */
  take(address: string): Throttled | undefined {
    const key = sourceKey(address, this.ipv6PrefixLength);
    const now = this.#clock.now();
    let b = this.#buckets.get(key);
    if (b === undefined) {
      if (this.#buckets.size >= this.maxEntries) {
        // Least recently seen first (Map order, refreshed below).
        const oldest = this.#buckets.keys().next().value;
        if (oldest !== undefined) this.#buckets.delete(oldest);
      }
      b = { tokens: this.burst, at: now, loggedAt: -Infinity, suppressed: 0 };
    } else {
      this.#buckets.delete(key);
      b.tokens = Math.min(this.burst, b.tokens + (now - b.at) * this.#perMs);
      b.at = now;
    }
    this.#buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return undefined;
    }
    const retryAfterSecs = Math.max(1, Math.ceil((1 - b.tokens) / this.ratePerSecond));
    if (now - b.loggedAt >= this.logWindowMs) {
      const suppressed = b.suppressed;
      b.loggedAt = now;
      b.suppressed = 0;
      return { log: true, suppressed, retryAfterSecs };
    }
    b.suppressed++;
    return { log: false, suppressed: b.suppressed, retryAfterSecs };
  }

  /** Forgets everything. */
  clear(): void {
    this.#buckets.clear();
  }
}
