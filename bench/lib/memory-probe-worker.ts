/**
 * Preloaded into each media worker of bench/soak's daemon (DaemonOptions.mediaWorkerPreload):
 * answers the main thread's memory requests (bench/lib/memory-probe.ts).
 */
import { workerData } from 'node:worker_threads';
import { answerMemoryRequests } from './memory-probe.ts';

answerMemoryRequests(`media-${(workerData as { index: number }).index}`);
