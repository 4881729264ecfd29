/**
 * The timers of the transaction layer, under their RFC names (RFC 3261 17 and table 4 of
 * appendix A; RFC 6026 8.1 adds L and M), and the injectable timer functions the layer runs them
 * on, so tests drive transactions on virtual time with T1 shortened.
 *
 *   timer   value                     what it bounds                             section
 *   T1      500 ms                    RTT estimate
 *   T2      4 s                       longest retransmit interval (non-INVITE requests,
 *                                     INVITE responses)
 *   T4      5 s                       how long a message may stay in the network
 *   A       T1, doubling              INVITE request retransmit, UDP only        17.1.1.2
 *   B       64*T1                     INVITE client transaction timeout          17.1.1.2
 *   D       >= 32 s UDP, 0 reliable   wait for response retransmissions          17.1.1.2
 *   E       T1, doubling up to T2     non-INVITE request retransmit, UDP only    17.1.2.2
 *   F       64*T1                     non-INVITE client transaction timeout      17.1.2.2
 *   G       T1, doubling up to T2     INVITE response retransmit, UDP only       17.2.1
 *   H       64*T1                     wait for ACK                               17.2.1
 *   I       T4 UDP, 0 reliable        wait for ACK retransmissions               17.2.1
 *   J       64*T1 UDP, 0 reliable     wait for non-INVITE request retransmits    17.2.2
 *   K       T4 UDP, 0 reliable        wait for response retransmissions          17.1.2.2
 *   L       64*T1                     wait for INVITE retransmissions after 2xx  RFC 6026 7.1
 *   M       64*T1                     wait for 2xx retransmissions (forks too)   RFC 6026 7.2
 *
 * Two timers without a letter: `Trying` (200 ms, RFC 3261 17.2.1: the INVITE server transaction
 * sends 100 Trying unless the TU answers within 200 ms) and `Cancel` (64*T1, RFC 3261 9.1: a
 * CANCELled INVITE whose final response never comes is considered cancelled).
 */

/** Names of the timers a transaction state machine starts and stops. */
export type TimerName = 'A' | 'B' | 'D' | 'E' | 'F' | 'G' | 'H' | 'I' | 'J' | 'K' | 'L' | 'M' | 'Trying' | 'Cancel';

/** Timer settings of the layer, in milliseconds. Every field is optional; tests shorten them. */
export interface TransactionTimerConfig {
  /** RTT estimate (default 500). */
  t1?: number;
  /** Longest retransmit interval of non-INVITE requests and INVITE responses (default 4000). */
  t2?: number;
  /** How long a message may stay in the network (default 5000). */
  t4?: number;
  /**
   * Timer D on unreliable transports. RFC 3261 17.1.1.2: "at least 32 seconds"; the default is
   * max(32000, 64*T1) so that a larger T1 keeps it above the server's retransmission window.
   */
  timerD?: number;
  /** How long the INVITE server transaction waits for the TU before sending 100 Trying (default 200). */
  tryingDelay?: number;
}

export const DEFAULT_T1 = 500;
export const DEFAULT_T2 = 4000;
export const DEFAULT_T4 = 5000;
export const DEFAULT_TRYING_DELAY = 200;

/**
 * The durations a transaction uses, for one transport (reliable or not). `A`, `E` and `G` are
 * only meaningful when `reliable` is false: the machines do not start them on reliable
 * transports (RFC 3261 17.1.1.2, 17.1.2.2, 17.2.1). `D`, `I`, `J`, `K` are zero on reliable
 * transports, and a machine entering a state whose timer is zero moves on at once.
 */
export interface TimerValues {
  readonly reliable: boolean;
  readonly T1: number;
  readonly T2: number;
  readonly T4: number;
  readonly A: number;
  readonly B: number;
  readonly D: number;
  readonly E: number;
  readonly F: number;
  readonly G: number;
  readonly H: number;
  readonly I: number;
  readonly J: number;
  readonly K: number;
  readonly L: number;
  readonly M: number;
  readonly Trying: number;
  readonly Cancel: number;
}

function positive(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new RangeError(`${name} must be a positive number of milliseconds, got ${String(v)}`);
  return v;
}

/**
 * Resolved timer settings: the defaults filled in and checked.
 * @throws RangeError when a value is not a positive number, or T2 < T1.
 */
export function resolveTimerConfig(config: TransactionTimerConfig = {}): Required<TransactionTimerConfig> {
  const t1 = positive('t1', config.t1, DEFAULT_T1);
  const t2 = positive('t2', config.t2, DEFAULT_T2);
  const t4 = positive('t4', config.t4, DEFAULT_T4);
  if (t2 < t1) throw new RangeError(`t2 (${t2}) must not be smaller than t1 (${t1})`);
  const timerD = positive('timerD', config.timerD, Math.max(32_000, 64 * t1));
  const tryingDelay = positive('tryingDelay', config.tryingDelay, DEFAULT_TRYING_DELAY);
  return { t1, t2, t4, timerD, tryingDelay };
}

/**
 * The timer values for a transaction over a reliable or an unreliable transport (RFC 3261
 * appendix A, table 4; RFC 6026 8.1).
 * @throws RangeError as resolveTimerConfig.
 */
export function timerValues(config: TransactionTimerConfig, reliable: boolean): TimerValues {
  const { t1, t2, t4, timerD, tryingDelay } = resolveTimerConfig(config);
  const t64 = 64 * t1;
  return {
    reliable,
    T1: t1,
    T2: t2,
    T4: t4,
    A: t1,
    B: t64,
    D: reliable ? 0 : timerD,
    E: t1,
    F: t64,
    G: t1,
    H: t64,
    I: reliable ? 0 : t4,
    J: reliable ? 0 : t64,
    K: reliable ? 0 : t4,
    L: t64,
    M: t64,
    Trying: tryingDelay,
    Cancel: t64,
  };
}

/** Timer functions, injectable so tests run transactions on virtual time. */
export interface TransactionTimers {
  setTimeout(callback: () => void, delayMs: number): unknown;
  clearTimeout(handle: unknown): void;
}

/** Node's timers, unref'd: pending transactions alone do not keep the process alive. */
export const systemTransactionTimers: TransactionTimers = {
  setTimeout: (callback, delayMs) => setTimeout(callback, delayMs).unref(),
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};
