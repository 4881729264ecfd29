/** Polling helpers for tests that wait on sockets and timers they do not control. */

export const delay = (ms: number): Promise<void> => new Promise<void>((r) => setTimeout(r, ms));

/** Resolves once `cond()` holds (checked every 5 ms); rejects naming `what` after `ms`. */
export async function until(cond: () => boolean, what: string, ms = 3000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await delay(5);
  }
}

/** As until(), for a condition read asynchronously (a store, an API): checked every 20 ms. */
export async function untilAsync(cond: () => boolean | Promise<boolean>, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await delay(20);
  }
}
