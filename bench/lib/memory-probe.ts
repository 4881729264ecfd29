/**
 * Memory of a daemon's threads, for bench/soak (bench/soak-server.ts answers with it): the
 * process's RSS split into anonymous and file-backed pages (/proc/self/status), and per thread
 * that runs callbridge code (the main thread, each media worker) its V8 heap
 * (process.memoryUsage() in a worker is that worker's isolate), its `external` and
 * `arrayBuffers` (Buffers, typed arrays, WASM memories) and the size of each WASM heap callbridge
 * keeps there (the speex resampler's, RNNoise's): a WebAssembly.Memory grows and never shrinks,
 * so a leak on it shows as a size that climbs flood after flood.
 *
 * Media workers load bench/lib/memory-probe-worker.ts (DaemonOptions.mediaWorkerPreload), which
 * answers `take` requests over a BroadcastChannel; `gc: true` runs a full collection on every
 * thread first (the daemon must run with --expose-gc), so what is left is what is still held.
 */
import { readFileSync } from 'node:fs';
import { getHeapSpaceStatistics } from 'node:v8';
import { BroadcastChannel, isMainThread, threadId } from 'node:worker_threads';
import { speexModule } from '../../src/media/resampler-speex.ts';
import { rnnoiseHeapBytes } from '../../src/agent/providers/noise/rnnoise.ts';

export const MEMORY_CHANNEL = 'callbridge-bench-soak-memory';

const MB = 2 ** 20;
const mb = (bytes: number): number => Number((bytes / MB).toFixed(2));

/** One thread's memory, MB. */
export interface ThreadMemory {
  thread: string;
  heapUsed: number;
  heapTotal: number;
  /** Of heapTotal, V8's young generation (new_space, committed): it grows under allocation pressure and stays. */
  newSpace: number;
  /** Of heapUsed, compiled code (code_space + code_large_object_space): grows as V8 optimizes more functions. */
  codeUsed: number;
  external: number;
  arrayBuffers: number;
  /** The speex resampler's WASM heap in this thread (0 when not loaded here). */
  speexHeap: number;
  /** RNNoise's WASM heap (main thread only; 0 when not loaded). */
  rnnoiseHeap: number;
}

/** This thread's figures; `gc` first when asked and exposed. */
export function threadMemory(name: string, gc = false): ThreadMemory {
  const g = (globalThis as { gc?: () => void }).gc;
  if (gc && g) g();
  const m = process.memoryUsage();
  const young = getHeapSpaceStatistics().filter((x) => x.space_name === 'new_space' || x.space_name === 'new_large_object_space').reduce((a, x) => a + x.space_size, 0);
  const code = getHeapSpaceStatistics().filter((x) => x.space_name.startsWith('code_')).reduce((a, x) => a + x.space_used_size, 0);
  const speex = speexModule('simd');
  const rn = isMainThread ? rnnoiseHeapBytes() : 0;
  return {
    thread: name,
    heapUsed: mb(m.heapUsed),
    heapTotal: mb(m.heapTotal),
    newSpace: mb(young),
    codeUsed: mb(code),
    external: mb(m.external),
    arrayBuffers: mb(m.arrayBuffers),
    speexHeap: speex ? mb(speex.HEAP16.buffer.byteLength) : 0,
    rnnoiseHeap: mb(rn),
  };
}

export interface ProcessMemory {
  rss: number;
  /** Anonymous resident memory: heaps, malloc, WASM. */
  anon: number;
  /** File-backed: code, mapped files. */
  file: number;
  /**
   * With `detail`, anonymous resident memory by kind of mapping (/proc/<pid>/smaps): `wasm` the
   * mappings of 4 GiB and more (V8 reserves each WebAssembly.Memory with guard regions that large),
   * `brk` the main malloc arena ([heap]: the main thread's mallocs), `arenas` glibc's malloc
   * arenas of the other threads (64 MiB-aligned heaps), `other` the rest (V8 heap pages, thread
   * stacks, mmapped large allocations).
   */
  wasm?: number;
  brk?: number;
  arenas?: number;
  other?: number;
}

/** The process's resident memory, MB (smaps breakdown with `detail`: reading it takes a few ms). */
export function processMemory(pid: number | 'self' = 'self', detail = false): ProcessMemory {
  try {
    const s = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+) kB`).exec(s)?.[1] ?? Number.NaN) / 1024;
    const out: ProcessMemory = { rss: Number(kb('VmRSS').toFixed(2)), anon: Number(kb('RssAnon').toFixed(2)), file: Number(kb('RssFile').toFixed(2)) };
    if (detail) Object.assign(out, smapsBreakdown(pid));
    return out;
  } catch {
    return { rss: Number.NaN, anon: Number.NaN, file: Number.NaN };
  }
}

function smapsBreakdown(pid: number | 'self'): { wasm: number; brk: number; arenas: number; other: number } {
  // A WebAssembly.Memory is one reservation of 8-10 GiB: its committed pages an rw VMA, the rest
  // an adjacent PROT_NONE VMA. Anonymous resident memory per VMA first, classified after.
  const vmas: { start: number; end: number; perms: string; anon: boolean; path: string; mb: number }[] = [];
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ (\d+)\s*(.*)$/.exec(line);
    if (head) {
      const path = head[5]!.trim();
      vmas.push({ start: Number.parseInt(head[1]!, 16), end: Number.parseInt(head[2]!, 16), perms: head[3]!, anon: head[4] === '0' && (path === '' || path.startsWith('[')), path, mb: 0 });
    } else if (line.startsWith('Anonymous:') && vmas.length > 0) {
      vmas[vmas.length - 1]!.mb += Number(/(\d+)/.exec(line)?.[1] ?? 0) / 1024;
    }
  }
  let wasm = 0;
  let brk = 0;
  let arenas = 0;
  let other = 0;
  const ARENA = 64 * 2 ** 20;
  for (let i = 0; i < vmas.length; i++) {
    const v = vmas[i]!;
    if (v.mb === 0) continue;
    const next = vmas[i + 1];
    const reservation = next !== undefined && next.start === v.end && next.anon && next.perms.startsWith('---') ? next.end - v.start : v.end - v.start;
    if (v.path === '[heap]') brk += v.mb;
    else if (v.anon && reservation >= 4 * 2 ** 30) wasm += v.mb;
    // glibc's per-thread malloc arenas: 64 MiB-aligned heaps of 64 MiB (the used part rw, the rest PROT_NONE).
    else if (v.anon && v.start % ARENA === 0 && reservation === ARENA) arenas += v.mb;
    else other += v.mb;
  }
  const r = (x: number) => Number(x.toFixed(2));
  return { wasm: r(wasm), brk: r(brk), arenas: r(arenas), other: r(other) };
}

/** Worker side: answer the main thread's requests on the channel (unref'd: keeps nothing alive). */
export function answerMemoryRequests(name: string): void {
  const channel = new BroadcastChannel(MEMORY_CHANNEL);
  channel.unref();
  channel.onmessage = (event) => {
    const m = (event as MessageEvent).data as { t: string; id: number; gc?: boolean };
    if (m.t === 'take') channel.postMessage({ t: 'memory', id: m.id, memory: threadMemory(name, m.gc === true) });
  };
}

/** Main side: asks every worker that loaded the probe and collects the answers (up to `waitMs`). */
export function createMemoryCollector(expectedWorkers: () => number, waitMs = 2000): (gc: boolean) => Promise<ThreadMemory[]> {
  const channel = new BroadcastChannel(MEMORY_CHANNEL);
  channel.unref();
  let nextId = 1;
  const waiting = new Map<number, { got: ThreadMemory[]; done: () => void }>();
  channel.onmessage = (event) => {
    const m = (event as MessageEvent).data as { t: string; id: number; memory: ThreadMemory };
    const w = m.t === 'memory' ? waiting.get(m.id) : undefined;
    if (w === undefined) return;
    w.got.push(m.memory);
    if (w.got.length >= expectedWorkers()) w.done();
  };
  return async (gc) => {
    const n = expectedWorkers();
    if (n === 0) return [];
    const id = nextId++;
    const entry = { got: [] as ThreadMemory[], done: () => {} };
    const done = new Promise<void>((resolve) => {
      entry.done = resolve;
      setTimeout(resolve, waitMs).unref();
    });
    waiting.set(id, entry);
    channel.postMessage({ t: 'take', id, gc });
    await done;
    waiting.delete(id);
    return entry.got.sort((a, b) => a.thread.localeCompare(b.thread));
  };
}

export const thisThreadName = (): string => (isMainThread ? 'main' : `worker-${threadId}`);
