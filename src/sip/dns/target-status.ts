/**
 * Which resolved targets (protocol, address, port) are out of service, and since when:
 *
 * - a target an INVITE or REGISTER failed over from (no response in time, connection refused,
 *   503) is dead for `deadMs` (sip.dead_target_secs), then tried in its normal place again;
 * - a target the OPTIONS pings report down stays down until a ping is answered again.
 *
 * Targets that are out are not dropped: `order` moves them behind the live ones, so when every
 * target is out the call still tries them (a dead mark may be stale) instead of failing unsent.
 * Any answer from a target (a final response, even an error one) puts it back at once.
 */
import type { Endpoint } from '../transport/index.ts';

export function endpointKey(e: Endpoint): string {
  return `${e.protocol}:${e.address.includes(':') ? `[${e.address}]` : e.address}:${e.port}`;
}

export interface TargetStatusOptions {
  /** How long a failed target is tried last. */
  deadMs: number;
  now?: () => number;
}

export class TargetStatus {
  readonly #deadMs: number;
  readonly #now: () => number;
  /** Failed targets: key -> time their dead mark ends. */
  readonly #deadUntil = new Map<string, number>();
  /** Targets the OPTIONS pings report down. */
  readonly #pingDown = new Set<string>();

  constructor(o: TargetStatusOptions) {
    if (!(o.deadMs >= 0) || !Number.isFinite(o.deadMs)) throw new RangeError(`deadMs must be a non-negative number, got ${o.deadMs}`);
    this.#deadMs = o.deadMs;
    this.#now = o.now ?? Date.now;
  }

  /** A request to `e` failed in a way that fails over (timeout, refused connection, 503). */
  failed(e: Endpoint): void {
    if (this.#deadMs === 0) return;
    const now = this.#now();
    // Expired marks are dropped when read; sweep them too once there are many (DNS churn).
    if (this.#deadUntil.size >= 1024) for (const [k, until] of this.#deadUntil) if (until <= now) this.#deadUntil.delete(k);
    this.#deadUntil.set(endpointKey(e), now + this.#deadMs);
  }

  /** `e` answered (any final response, or an OPTIONS ping). */
  answered(e: Endpoint): void {
    const k = endpointKey(e);
    this.#deadUntil.delete(k);
    this.#pingDown.delete(k);
  }

  /** The OPTIONS pings' verdict on `e`. */
  pinged(e: Endpoint, up: boolean): void {
    if (up) this.answered(e);
    else this.#pingDown.add(endpointKey(e));
  }

  /** True while `e` is remembered dead or its pings say down. */
  isOut(e: Endpoint): boolean {
    const k = endpointKey(e);
    if (this.#pingDown.has(k)) return true;
    const until = this.#deadUntil.get(k);
    if (until === undefined) return false;
    if (until > this.#now()) return true;
    this.#deadUntil.delete(k);
    return false;
  }

  /** `targets` with those out of service moved to the end, each group in its given order. */
  order<T extends { destination: Endpoint }>(targets: readonly T[]): T[] {
    const live: T[] = [];
    const out: T[] = [];
    for (const t of targets) (this.isOut(t.destination) ? out : live).push(t);
    return [...live, ...out];
  }

  /** Forgets ping verdicts of targets no longer pinged (a trunk deleted, DNS changed). */
  keepPinged(keys: ReadonlySet<string>): void {
    for (const k of this.#pingDown) if (!keys.has(k)) this.#pingDown.delete(k);
  }
}
