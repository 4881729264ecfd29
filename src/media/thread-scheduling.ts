/**
 * Real-time scheduling for a media thread (rtp.media_thread_realtime), as telephony servers run
 * their media (Asterisk -p, FreeSWITCH -rp: SCHED_RR). Node has no binding for
 * sched_setscheduler(2), so the policy is set with util-linux's `chrt` (Essential in Debian, so in
 * every image we build) on this thread's id. Linux only; needs root or CAP_SYS_NICE, and the
 * kernel's RT throttling (sched_rt_runtime_us) still leaves other tasks 5 % of each CPU.
 *
 * Why it matters: on a busy 2-vCPU machine the media threads at normal priority waited for a CPU
 * 27-29 % of the time at 200 calls (27 % even at nice -10) and sent 89-98.8 % of frames on time;
 * under SCHED_RR they waited 0.2-0.3 % and sent 99.56-99.99 % on time (docs/media-workers.md).
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';

/** The calling thread's kernel id (from /proc/thread-self), or null where there is no such file. */
export function kernelThreadId(): number | null {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    return Number.isInteger(tid) && tid > 0 ? tid : null;
  } catch {
    return null;
  }
}

/**
 * Puts thread `tid` under SCHED_RR at `priority` (1-99).
 * @throws Error when chrt is missing or the kernel refuses (no privilege): the caller warns and
 *   leaves the thread as it was.
 */
export function setRoundRobin(tid: number, priority: number): void {
  if (!Number.isInteger(priority) || priority < 1 || priority > 99) throw new RangeError(`SCHED_RR priority must be 1-99, got ${priority}`);
  // --reset-on-fork: threads this one starts later (libuv's pool, workers) begin under the normal
  // policy instead of inheriting real-time (they make themselves real-time if they should).
  execFileSync('chrt', ['--rr', '--reset-on-fork', '--pid', String(priority), String(tid)], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 5000 });
}

interface SchedulingLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

/**
 * The daemon's threads under SCHED_RR as configured, called on the main thread before it starts
 * any of its own: the main thread at rtp.main_thread_realtime, and, when any thread is
 * real-time, the helper threads Node started before the daemon's code ran (V8's platform
 * workers, libuv's pool) one step below the highest of them. With any real-time setting or
 * media worker threads, the check for --single-threaded-gc (npm start, bin/callbridge.js and
 * the Docker image pass it).
 *
 * Why the main thread too: it runs the voice sessions the bridged calls talk to. With only the
 * media threads real-time, a single-threaded session loop gets what they leave of one CPU: at 200
 * calls on 2 vCPUs it waited for a CPU 55-70 % of the time (nice -10 did not change it: it waits
 * behind the real-time threads) and the agent's audio ran dry; at SCHED_RR 5 it waited 15-43 %.
 * Why the GC flag: V8's parallel GC helper threads stay at normal priority, and a real-time
 * thread's scavenge waits for them: with the main threads real-time too, the media threads'
 * minor GC pauses stretched to 18-35 ms (300-340 skipped frames per 15 s at 200 calls); with
 * --single-threaded-gc each thread collects on its own (80-100). At normal priority too: the
 * helpers compete with the media threads for the CPUs, and a third of the late frames at 200
 * calls overlapped the media threads' own GC pauses (up to 12 ms; 5-8 with the flag).
 * Why the helpers: even so, V8 hands some of a thread's jobs to its platform workers and the
 * thread waits for them. perf sched at 200 calls caught media threads asleep on a condition
 * variable for 5-33 ms until a helper at normal priority, kept off the CPUs by the busy machine,
 * signalled it (priority inversion). One below the highest real-time thread, a helper runs as
 * soon as that thread waits for it, and never takes a CPU from it while it has work.
 * docs/media-workers.md.
 */
export function scheduleProcessThreads(priorities: { main: number; media: number; mediaThreads: number }, log: SchedulingLog): void {
  const main = kernelThreadId();
  if (priorities.main > 0) {
    try {
      if (main === null) throw new Error('no /proc/thread-self');
      setRoundRobin(main, priorities.main);
      log.info({ priority: priorities.main }, 'main thread real-time (SCHED_RR)');
    } catch (err) {
      log.warn({ priority: priorities.main, reason: (err as Error).message.split('\n')[0] }, 'could not make the main thread real-time; running under the normal policy');
    }
  }
  const highest = Math.max(priorities.main, priorities.media);
  // Only from the process's main thread: elsewhere (a daemon in a test worker) the other threads
  // are not Node's helpers.
  if (highest > 0 && main !== null && isMainThread) {
    const priority = Math.max(1, highest - 1);
    const helpers = helperThreadIds(main);
    try {
      for (const tid of helpers) setRoundRobin(tid, priority);
      log.info({ priority, threads: helpers.length }, "Node's helper threads real-time (SCHED_RR), below the daemon's own");
    } catch (err) {
      log.warn({ priority, reason: (err as Error).message.split('\n')[0] }, "could not make Node's helper threads real-time; a real-time thread's GC may wait for them");
    }
  }
  const throttling = highest > 0 ? kernelRtThrottling() : null;
  if (throttling !== null && throttling.runtimeUs >= 0 && throttling.runtimeUs < throttling.periodUs) {
    const stopMs = (throttling.periodUs - throttling.runtimeUs) / 1000;
    log.warn(
      { sched_rt_runtime_us: throttling.runtimeUs, sched_rt_period_us: throttling.periodUs },
      `the kernel throttles real-time threads: once they have used ${throttling.runtimeUs / 1000} ms of a CPU in ${throttling.periodUs / 1000} ms they stop for the rest of it (up to ${stopMs} ms); for media that must not stop, set sysctl kernel.sched_rt_runtime_us=-1 (docs/media-workers.md)`,
    );
  }
  if (!process.execArgv.includes('--single-threaded-gc')) {
    if (highest > 0) {
      log.warn({}, 'real-time threads without --single-threaded-gc: their garbage collection is shared out to V8\'s helper threads and waits for them; start node with --single-threaded-gc');
    } else if (priorities.mediaThreads > 0) {
      // Measured (bench/bridge, 150-200 calls on 2 vCPUs, normal priority): 99.42-99.79 % of
      // frames on time without the flag, 99.88-99.97 % at 150 and 99.08-99.32 % at 200 with it.
      log.warn({}, 'media threads without --single-threaded-gc: V8\'s GC helper threads compete with them for the CPUs and a media thread\'s collection waits for them; start node with --single-threaded-gc as npm start and the Docker image do (docs/media-workers.md)');
    }
  }
}

/**
 * The kernel's real-time bandwidth limit (sched_rt_runtime_us of every sched_rt_period_us; runtime
 * -1: none), or null where /proc has no such files.
 *
 * Why the daemon looks: with the default 950 ms per 1 s, real-time threads that have used 95 % of a
 * CPU within a second stop on that CPU for the rest of it. perf caught it at 200 calls on 2 vCPUs:
 * a SCHED_RR 99 thread and a media thread runnable for 42 ms while that CPU ran idle and a
 * normal-priority task. Kernels since 6.12 keep 5 % for normal tasks with the deadline fair server
 * whatever this setting, which makes -1 safe there (docs/media-workers.md).
 */
export function kernelRtThrottling(read: (path: string) => string = (path) => readFileSync(path, 'utf8')): { runtimeUs: number; periodUs: number } | null {
  try {
    const runtimeUs = Number(read('/proc/sys/kernel/sched_rt_runtime_us').trim());
    const periodUs = Number(read('/proc/sys/kernel/sched_rt_period_us').trim());
    return Number.isInteger(runtimeUs) && Number.isInteger(periodUs) && periodUs > 0 ? { runtimeUs, periodUs } : null;
  } catch {
    return null;
  }
}

/** This process's threads other than `main` (Linux /proc; none elsewhere). */
function helperThreadIds(main: number): number[] {
  try {
    return readdirSync('/proc/self/task')
      .map(Number)
      .filter((tid) => tid !== main);
  } catch {
    return [];
  }
}
