/**
 * The post-call analyses running on this node (docs/calls.md "Post-call analysis"). Each is asked
 * of the session's runtime after the session ended, off the call's path: the call is over and
 * its record complete before it starts, and a failure is logged and leaves the record without
 * analysis. What it found is stored once (CallRepo.setAnalysis). At shutdown the ones still
 * running get a short grace, then are aborted, so no write reaches a closed store.
 */
import type { Logger } from '../log.ts';
import type { CallAnalysis } from '../domain/call.ts';

/** How long analyses still running at shutdown may take before they are aborted. */
export const ANALYSIS_SHUTDOWN_GRACE_MS = 2000;

export interface AnalysisStore {
  setAnalysis(id: string, analysis: CallAnalysis, at: string): Promise<boolean>;
}

export class PostCallAnalyses {
  readonly #running = new Map<Promise<void>, AbortController>();
  readonly #store: AnalysisStore;
  readonly #iso: () => string;
  #closed = false;

  constructor(store: AnalysisStore, iso: () => string) {
    this.#store = store;
    this.#iso = iso;
  }

  /** How many are running (tests, shutdown). */
  get running(): number {
    return this.#running.size;
  }

  /** Runs one call's analysis and stores its result; never throws, never rejects. */
  start(callId: string, log: Logger, analyze: (signal: AbortSignal) => Promise<CallAnalysis | undefined>): void {
    if (this.#closed) return;
    const abort = new AbortController();
    const t0 = Date.now();
    const done = (async () => {
      try {
        const analysis = await analyze(abort.signal);
        if (analysis === undefined) return;
        if (abort.signal.aborted) throw new Error('aborted: the daemon is shutting down');
        const stored = await this.#store.setAnalysis(callId, analysis, this.#iso());
        log.info({ ms: Date.now() - t0, stored, fields: analysis.extracted_variables.length, summary: analysis.summary !== null }, 'post-call analysis done');
      } catch (err) {
        log.warn({ err, ms: Date.now() - t0 }, 'post-call analysis failed: the call record keeps no analysis');
      }
    })();
    this.#running.set(done, abort);
    void done.then(() => this.#running.delete(done));
  }

  /** Shutdown: no new analyses; the running ones get graceMs, then are aborted; resolves once all settled. */
  async close(graceMs = ANALYSIS_SHUTDOWN_GRACE_MS): Promise<void> {
    this.#closed = true;
    if (this.#running.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    const all = Promise.all([...this.#running.keys()]);
    await Promise.race([all, new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
    clearTimeout(timer);
    for (const abort of this.#running.values()) abort.abort();
    // An analysis that ignores its signal is not waited for longer than the grace again.
    await Promise.race([all, new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)))]);
    clearTimeout(timer);
  }
}
