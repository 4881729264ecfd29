import { describe, expect, it } from 'vitest';
import { kernelRtThrottling } from '../../src/media/thread-scheduling.ts';

/** A /proc/sys reader over the given files; a missing one throws as readFileSync does. */
const procWith = (files: Record<string, string>) => (path: string): string => {
  const text = files[path];
  if (text === undefined) throw Object.assign(new Error(`ENOENT: ${path}`), { code: 'ENOENT' });
  return text;
};

describe('kernelRtThrottling', () => {
  it('reads the real-time runtime and period the kernel allows', () => {
    const read = procWith({ '/proc/sys/kernel/sched_rt_runtime_us': '950000\n', '/proc/sys/kernel/sched_rt_period_us': '1000000\n' });
    expect(kernelRtThrottling(read)).toEqual({ runtimeUs: 950_000, periodUs: 1_000_000 });
  });

  it('reports -1 (no throttling) as it is', () => {
    const read = procWith({ '/proc/sys/kernel/sched_rt_runtime_us': '-1\n', '/proc/sys/kernel/sched_rt_period_us': '1000000\n' });
    expect(kernelRtThrottling(read)).toEqual({ runtimeUs: -1, periodUs: 1_000_000 });
  });

  it('is null where the files are missing or unreadable', () => {
    expect(kernelRtThrottling(procWith({}))).toBeNull();
    expect(kernelRtThrottling(procWith({ '/proc/sys/kernel/sched_rt_runtime_us': 'x', '/proc/sys/kernel/sched_rt_period_us': '1000000' }))).toBeNull();
    expect(kernelRtThrottling(procWith({ '/proc/sys/kernel/sched_rt_runtime_us': '950000', '/proc/sys/kernel/sched_rt_period_us': '0' }))).toBeNull();
  });

  it.runIf(process.platform === 'linux')('reads this machine\'s files on Linux', () => {
    const got = kernelRtThrottling();
    expect(got).not.toBeNull();
    expect(got!.periodUs).toBeGreaterThan(0);
  });
});
