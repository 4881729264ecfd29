/**
 * Stores each complete agent turn's timeline (a TurnTimelineObserver), off the conversation's
 * path: turnComplete only queues it, and the turns completed within one event-loop turn are
 * written together, in one transaction, once that loop turn is over (setImmediate). A failed
 * write is reported and dropped: a timeline is diagnostics, never worth holding a call for.
 */
import type { TurnTimeline, TurnTimelineObserver } from '../domain/turn-latency.ts';
import type { TurnTimelineRepo } from './turn-timelines.ts';

export class TurnTimelineWriter implements TurnTimelineObserver {
  readonly #repo: () => TurnTimelineRepo | undefined;
  readonly #onError: (err: unknown, turns: number) => void;
  #queue: Array<{ callId: string; turn: TurnTimeline }> = [];
  #scheduled = false;
  #writing: Promise<void> = Promise.resolve();

  /** `repo`: read at each write (the composition root builds the runtime before it opens the store). */
  constructor(repo: () => TurnTimelineRepo | undefined, onError: (err: unknown, turns: number) => void) {
    this.#repo = repo;
    this.#onError = onError;
  }

  turnComplete(callId: string, turn: TurnTimeline): void {
    this.#queue.push({ callId, turn: { ...turn, marks: { ...turn.marks } } });
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => this.#flush());
  }

  /** Resolves once everything queued so far is written (shutdown: before the store closes). */
  async drain(): Promise<void> {
    if (this.#scheduled) this.#flush();
    await this.#writing;
  }

  #flush(): void {
    this.#scheduled = false;
    const batch = this.#queue;
    if (batch.length === 0) return;
    this.#queue = [];
    const repo = this.#repo();
    // Writes follow each other: a batch never overtakes the one before it.
    this.#writing = this.#writing.then(async () => {
      try {
        if (repo === undefined) throw new Error('the store is not open');
        await repo.add(batch);
      } catch (err) {
        this.#onError(err, batch.length);
      }
    });
  }
}
