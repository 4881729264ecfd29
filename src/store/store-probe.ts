/**
 * Whether the store's database answers, for /readyz: a `SELECT 1` every few seconds in the
 * background, so the readiness check itself (synchronous, served between REST turns) reads a
 * flag instead of waiting on the network. Meant for PostgreSQL, a server that can go away; the
 * embedded SQLite is a file and is not probed.
 */
import type { SqlClient } from './sql-client.ts';

export const PROBE_INTERVAL_MS = 5000;
/** A probe that has not answered by then counts as a failure (the pool may wait 10 s for a connection). */
export const PROBE_TIMEOUT_MS = 3000;

export class StoreProbe {
  #failure: string | undefined;
  #timer: NodeJS.Timeout | undefined;
  #inFlight = false;

  constructor(
    private readonly client: Pick<SqlClient, 'get'>,
    private readonly intervalMs = PROBE_INTERVAL_MS,
    private readonly timeoutMs = PROBE_TIMEOUT_MS,
  ) {}

  /** Why the last probe failed (the store's message: no password in it), or undefined when it answered. */
  get failure(): string | undefined {
    return this.#failure;
  }

  start(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => void this.probe(), this.intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** One probe now (skipped while the previous one is still out); resolves once its verdict is in. */
  async probe(): Promise<void> {
    if (this.#inFlight) return;
    this.#inFlight = true;
    let timer: NodeJS.Timeout | undefined;
    try {
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${this.timeoutMs} ms`)), this.timeoutMs);
      });
      await Promise.race([this.client.get('SELECT 1 AS ok'), timeout]);
      this.#failure = undefined;
    } catch (err) {
      this.#failure = (err as Error).message;
    } finally {
      clearTimeout(timer);
      this.#inFlight = false;
    }
  }
}
