/**
 * Failed-authentication rate limiting per source address, so a trunk's password cannot be
 * guessed online at line rate (the online dictionary attack of the Digest security
 * considerations, RFC 7616 section 5 and RFC 2617 section 4). A sliding window: a source that fails `maxFailures`
 * times within `windowMs` is blocked for `blockMs`.
 *
 *   if (limiter.isBlocked(source)) -> answer 403 (or drop), do not run digest verification
 *   result = digestServer.verify(...)
 *   result.ok                                   -> limiter.recordSuccess(source)
 *   result.action is 'forbidden' / 'bad_request' -> const o = limiter.recordFailure(source);
 *                                                 if (o.newlyBlocked) log once for this block
 *   result.action 'challenge'                   -> not a failure: a 401 is part of every login
 *
 * What counts as a source: IPv4 addresses as they are; IPv4-mapped IPv6 as the IPv4 address;
 * other IPv6 addresses by their /64 prefix (configurable), since one host commonly owns a whole
 * /64 and could otherwise rotate addresses to dodge the limit.
 *
 * Memory is bounded (`maxEntries`, LRU). When full, idle entries (no failure in the window, not
 * blocked) go first, then the least recently seen unblocked source; only when a scan finds
 * nothing else is a blocked source evicted.
 */
import { isIPv4, isIPv6 } from 'node:net';

/** A millisecond clock; injectable so tests control time. */
export interface RateLimitClock {
  now(): number;
}

export interface AuthRateLimiterOptions {
  /** Failures within the window that block a source (the Nth failure blocks). Default 10. */
  maxFailures?: number;
  /** The sliding window. Default 60 s. */
  windowMs?: number;
  /** How long a block lasts. Default 5 minutes. */
  blockMs?: number;
  /** Most sources tracked at once. Default 10,000. */
  maxEntries?: number;
  /** IPv6 addresses are grouped by this prefix length (0..128). Default 64. */
  ipv6PrefixLength?: number;
  /** Default: performance.now() (monotonic; the limiter keeps no state across restarts). */
  clock?: RateLimitClock;
}

/** What recordFailure() observed. */
export interface FailureOutcome {
  /** The source is blocked now. */
  blocked: boolean;
  /** This failure started the block: the one moment to log it. */
  newlyBlocked: boolean;
  /** Failures counted in the current window (0 right after a block starts). */
  failures: number;
  /** When the block ends, on the limiter's clock; undefined when not blocked. */
  blockedUntil: number | undefined;
}

interface Entry {
  /** Times of recent failures, oldest first, at most maxFailures. */
  failures: number[];
  /** When the current block ends; 0 when not blocked. */
  blockedUntil: number;
  /** Requests refused during the current block (refusedWhileBlocked). */
  refused: number;
}

const EVICTION_SCAN = 64;

const monotonicClock: RateLimitClock = { now: () => performance.now() };

/** Expands an IPv6 address (validated by isIPv6, no zone) into 8 16-bit groups. */
function ipv6Groups(ip: string): number[] | undefined {
  let text = ip;
  // An embedded IPv4 tail (::ffff:192.0.2.1, 64:ff9b::192.0.2.1) becomes two hex groups.
  const lastColon = text.lastIndexOf(':');
  const last = text.slice(lastColon + 1);
  if (last.includes('.')) {
    if (!isIPv4(last)) return undefined;
    const [a = 0, b = 0, c = 0, d = 0] = last.split('.').map(Number);
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const parse = (part: string): number[] => (part === '' ? [] : part.split(':').map((g) => Number.parseInt(g, 16)));
  const head = parse(halves[0] ?? '');
  const rest = halves.length === 2 ? parse(halves[1] ?? '') : [];
  const known = head.length + rest.length;
  if (halves.length === 1 ? known !== 8 : known > 7) return undefined;
  const groups = [...head, ...new Array<number>(8 - known).fill(0), ...rest];
  if (groups.some((g) => !Number.isInteger(g) || g < 0 || g > 0xffff)) return undefined;
  return groups;
}

/**
 * The key a source address is counted under: the IPv4 address, or the IPv6 prefix
 * (`2001:db8:0:1::/64`), or the trimmed lower-cased text for anything else.
 */
export function sourceKey(address: string, ipv6PrefixLength = 64): string {
  let ip = address.trim().toLowerCase();
  if (ip.startsWith('[') && ip.endsWith(']')) ip = ip.slice(1, -1);
  const zone = ip.indexOf('%');
  if (zone >= 0) ip = ip.slice(0, zone);
  if (isIPv4(ip)) return ip;
  if (!isIPv6(ip)) return ip;
  const groups = ipv6Groups(ip);
  if (groups === undefined) return ip;
  // IPv4-mapped (::ffff:a.b.c.d, RFC 4291 section 2.5.5.2): the IPv4 address.
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    const hi = groups[6] ?? 0;
    const lo = groups[7] ?? 0;
    return `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`;
  }
  let bits = ipv6PrefixLength;
  const masked = groups.map((g) => {
    const keep = Math.max(0, Math.min(16, bits));
    bits -= 16;
    return keep === 0 ? 0 : g & ((0xffff << (16 - keep)) & 0xffff);
  });
  return `${masked.map((g) => g.toString(16)).join(':')}/${ipv6PrefixLength}`;
}

/** Counts failed authentications per source and blocks sources that fail too often. */
export class AuthRateLimiter {
  readonly maxFailures: number;
  readonly windowMs: number;
  readonly blockMs: number;
  readonly maxEntries: number;
  readonly ipv6PrefixLength: number;
  readonly #clock: RateLimitClock;
  readonly #entries = new Map<string, Entry>();

  /** @throws RangeError on an out-of-range option. */
  constructor(options: AuthRateLimiterOptions = {}) {
    this.maxFailures = options.maxFailures ?? 10;
    this.windowMs = options.windowMs ?? 60_000;
    this.blockMs = options.blockMs ?? 300_000;
    this.maxEntries = options.maxEntries ?? 10_000;
    this.ipv6PrefixLength = options.ipv6PrefixLength ?? 64;
    if (!Number.isInteger(this.maxFailures) || this.maxFailures < 1) throw new RangeError('maxFailures must be a positive integer');
    if (!(this.windowMs > 0)) throw new RangeError('windowMs must be positive');
    if (!(this.blockMs > 0)) throw new RangeError('blockMs must be positive');
    if (!Number.isInteger(this.maxEntries) || this.maxEntries < 1) throw new RangeError('maxEntries must be a positive integer');
    if (!Number.isInteger(this.ipv6PrefixLength) || this.ipv6PrefixLength < 0 || this.ipv6PrefixLength > 128) {
      throw new RangeError('ipv6PrefixLength must be 0..128');
    }
    this.#clock = options.clock ?? monotonicClock;
  }

  /** Sources tracked now (never more than maxEntries). */
  get size(): number {
    return this.#entries.size;
  }

  /** The key an address is counted under (see sourceKey()). */
  keyOf(address: string): string {
    return sourceKey(address, this.ipv6PrefixLength);
  }

  /** Whether the source is blocked now. */
  isBlocked(address: string): boolean {
    return this.blockedUntil(address) !== undefined;
  }

  /** When the source's block ends (clock ms), or undefined when it is not blocked. */
  blockedUntil(address: string): number | undefined {
    const key = this.keyOf(address);
    const entry = this.#entries.get(key);
    if (entry === undefined || entry.blockedUntil === 0) return undefined;
    if (entry.blockedUntil > this.#clock.now()) return entry.blockedUntil;
    // The block is over: a fresh start.
    this.#entries.delete(key);
    return undefined;
  }

  /**
   * Counts a failed authentication. The failure that reaches maxFailures within the window
   * blocks the source (newlyBlocked true, exactly once per block). Failures while blocked do not
   * extend the block, so a misconfigured PBX recovers once its password is fixed.
   */
  recordFailure(address: string): FailureOutcome {
    const key = this.keyOf(address);
    const now = this.#clock.now();
    let entry = this.#entries.get(key);
    if (entry !== undefined && entry.blockedUntil !== 0) {
      if (entry.blockedUntil > now) {
        this.#touch(key, entry);
        return { blocked: true, newlyBlocked: false, failures: 0, blockedUntil: entry.blockedUntil };
      }
      entry.blockedUntil = 0;
      entry.failures = [];
    }
    if (entry === undefined) {
      this.#makeRoom(now);
      entry = { failures: [], blockedUntil: 0, refused: 0 };
    }
    this.#dropOld(entry, now);
    entry.failures.push(now);
    this.#touch(key, entry);
    if (entry.failures.length >= this.maxFailures) {
      entry.failures = [];
      entry.blockedUntil = now + this.blockMs;
      entry.refused = 0;
      return { blocked: true, newlyBlocked: true, failures: 0, blockedUntil: entry.blockedUntil };
    }
    return { blocked: false, newlyBlocked: false, failures: entry.failures.length, blockedUntil: undefined };
  }

  /**
   * Counts a request refused because the source is blocked. `first` is true for the first one of
   * the block: log that one, count the rest (a blocked flooder must not write a line per INVITE).
   * Undefined when the source is not blocked.
   */
  refusedWhileBlocked(address: string): { first: boolean; refused: number } | undefined {
    if (this.blockedUntil(address) === undefined) return undefined;
    const entry = this.#entries.get(this.keyOf(address))!;
    entry.refused++;
    return { first: entry.refused === 1, refused: entry.refused };
  }

  /**
   * A successful authentication clears the source's failures. An active block stays: a source
   * that is blocked is not supposed to be verified at all.
   */
  recordSuccess(address: string): void {
    const key = this.keyOf(address);
    const entry = this.#entries.get(key);
    if (entry === undefined) return;
    if (entry.blockedUntil > this.#clock.now()) entry.failures = [];
    else this.#entries.delete(key);
  }

  /** Lifts a block and forgets the source's failures (an operator's action). */
  unblock(address: string): void {
    this.#entries.delete(this.keyOf(address));
  }

  /** Drops entries with nothing left to remember; returns how many went. */
  prune(): number {
    const now = this.#clock.now();
    let removed = 0;
    for (const [key, entry] of this.#entries) {
      if (this.#idle(entry, now)) {
        this.#entries.delete(key);
        removed++;
      }
    }
    return removed;
  }

  /** Forgets everything. */
  clear(): void {
    this.#entries.clear();
  }

  #dropOld(entry: Entry, now: number): void {
    const from = now - this.windowMs;
    let i = 0;
    while (i < entry.failures.length && (entry.failures[i] ?? 0) <= from) i++;
    if (i > 0) entry.failures.splice(0, i);
  }

  #idle(entry: Entry, now: number): boolean {
    if (entry.blockedUntil > now) return false;
    const newest = entry.failures[entry.failures.length - 1];
    return newest === undefined || newest <= now - this.windowMs;
  }

  #touch(key: string, entry: Entry): void {
    this.#entries.delete(key);
    this.#entries.set(key, entry);
  }

  #makeRoom(now: number): void {
    if (this.#entries.size < this.maxEntries) return;
    // Least recently seen first (Map order); look at a bounded number so a full table of
    // blocked sources does not make every new source cost a full scan.
    let firstUnblocked: string | undefined;
    let scanned = 0;
    for (const [key, entry] of this.#entries) {
      if (this.#idle(entry, now)) {
        this.#entries.delete(key);
        return;
      }
      if (firstUnblocked === undefined && !(entry.blockedUntil > now)) firstUnblocked = key;
      if (++scanned >= EVICTION_SCAN) break;
    }
    const victim = firstUnblocked ?? this.#entries.keys().next().value;
    if (victim !== undefined) this.#entries.delete(victim);
  }
}
