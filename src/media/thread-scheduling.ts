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
import { readlinkSync } from 'node:fs';

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
  execFileSync('chrt', ['--rr', '--pid', String(priority), String(tid)], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 5000 });
}
