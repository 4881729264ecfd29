/**
 * CPU stalls: times a CPU did not run a real-time thread that wanted it. One sleeper thread per
 * CPU, pinned to it (util-linux taskset), under SCHED_RR 99 when the bench may (root), wakes every
 * 1 ms and records each wake-up more than STALL_MS late. No thread of the bench or the daemon can
 * hold off such a thread; what can:
 *   - the hypervisor not running that vCPU (this VM reports no steal time): perf found the whole
 *     VM without a context switch for 80 ms, both media threads 103 ms late at once, and later one
 *     vCPU alone silent for 7 ms while the other ran idle with a media thread queued on the
 *     silent one (which a single unpinned sleeper does not see: it runs on the other CPU);
 *   - kernel work that cannot be preempted (this kernel runs preempt=none): perf found kdamond
 *     (the VM's memory monitor) running 2-6 ms on a CPU at a time, a virtio-vsock kworker 6.7 ms;
 *   - the kernel's real-time throttling while sched_rt_runtime_us >= 0 (bench/bridge prints it):
 *     perf found this thread and a media thread runnable 42 ms while their CPU ran idle.
 * A step that misses during one is reported as such; the verdict is not changed by it
 * (docs/benchmarks.md).
 *
 * Without the privilege the threads run at normal priority and their gaps include waiting for a
 * CPU; `realtime` says which.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/**
 * A wake-up later than this counts: less than the 5 ms a frame may be late, more than the
 * sleeper's own lateness on a busy machine (~0.1 ms; cyclictest: 6 ms worst on an idle one, the
 * vCPU waking from halt).
 */
export const STALL_MS = 4;
const SLOTS = 4096;

const WORKER = `
const { workerData, parentPort } = require('node:worker_threads');
const { execFileSync } = require('node:child_process');
const { readlinkSync } = require('node:fs');
const { stop, count, log, cpu } = workerData;
const tid = readlinkSync('/proc/thread-self').split('/').pop();
let pinned = false;
try {
  execFileSync('taskset', ['--pid', '--cpu-list', String(cpu), tid], { stdio: 'ignore', timeout: 5000 });
  pinned = true;
} catch {}
let realtime = false;
try {
  execFileSync('chrt', ['--rr', '--pid', '99', tid], { stdio: 'ignore', timeout: 5000 });
  realtime = true;
} catch {}
parentPort.postMessage({ realtime, pinned });
const nap = new Int32Array(new SharedArrayBuffer(4));
let prev = performance.now();
while (Atomics.load(stop, 0) === 0) {
  Atomics.wait(nap, 0, 0, 1);
  const now = performance.now();
  const late = now - prev - 1;
  if (late > ${STALL_MS}) {
    const i = Atomics.load(count, 0) % ${SLOTS};
    log[2 * i] = performance.timeOrigin + prev;
    log[2 * i + 1] = late;
    Atomics.add(count, 0, 1);
  }
  prev = now;
}
`;

export interface CpuStalls {
  /** Whether the sleepers run under SCHED_RR 99 (else their gaps include CPU waits). */
  readonly realtime: boolean;
  /** Whether each sleeper is pinned to its CPU (else a stall of one vCPU may go unseen). */
  readonly pinned: boolean;
  /** Stalls that began in [fromMs, toMs) (this thread's performance.now()), all CPUs. */
  between(fromMs: number, toMs: number): { count: number; maxMs: number; totalMs: number };
  /**
   * The same stalls as spans: from the sleeper's last wake-up to its late one, epoch ms (the
   * clock the bridge's late frames are stamped on), with the CPU each was seen on.
   */
  spans(fromMs: number, toMs: number): StallSpan[];
  stop(): Promise<void>;
}

export interface StallSpan {
  cpu: number;
  startMs: number;
  endMs: number;
}

export async function startCpuStallProbe(): Promise<CpuStalls> {
  const probes = await Promise.all(Array.from({ length: availableParallelism() }, (_, cpu) => startSleeper(cpu)));
  const spans = (fromMs: number, toMs: number): StallSpan[] => probes.flatMap((p) => p.spans(fromMs, toMs)).sort((x, y) => x.startMs - y.startMs);
  return {
    realtime: probes.every((p) => p.realtime),
    pinned: probes.every((p) => p.pinned),
    between(fromMs, toMs) {
      const lengths = spans(fromMs, toMs).map((x) => x.endMs - x.startMs - 1);
      return { count: lengths.length, maxMs: Math.max(0, ...lengths), totalMs: lengths.reduce((t, x) => t + x, 0) };
    },
    spans,
    async stop() {
      await Promise.all(probes.map((p) => p.stop()));
    },
  };
}

/** One sleeper pinned to `cpu`. */
async function startSleeper(cpu: number): Promise<Pick<CpuStalls, 'realtime' | 'pinned' | 'spans' | 'stop'>> {
  const stop = new Int32Array(new SharedArrayBuffer(4));
  const count = new Int32Array(new SharedArrayBuffer(4));
  const log = new Float64Array(new SharedArrayBuffer(8 * 2 * SLOTS));
  const worker = new Worker(WORKER, { eval: true, workerData: { stop, count, log, cpu } });
  /** Stalls that began in [fromMs, toMs) (performance.now() of this thread). */
  const spans = (fromMs: number, toMs: number): StallSpan[] => {
    const found: StallSpan[] = [];
    const total = Atomics.load(count, 0);
    for (let k = Math.max(0, total - SLOTS); k < total; k++) {
      const i = k % SLOTS;
      // The worker logs wall-clock milliseconds (its own performance.now() has another origin):
      // its last wake-up, and how much later than 1 ms after it the next one came.
      const startMs = log[2 * i]!;
      const at = startMs - performance.timeOrigin;
      if (at < fromMs || at >= toMs) continue;
      found.push({ cpu, startMs, endMs: startMs + 1 + log[2 * i + 1]! });
    }
    return found;
  };
  worker.unref();
  const { realtime, pinned } = await new Promise<{ realtime: boolean; pinned: boolean }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  return {
    realtime,
    pinned,
    spans,
    async stop() {
      Atomics.store(stop, 0, 1);
      await worker.terminate();
    },
  };
}
