/**
 * glibc's malloc arenas and the media threads' memory.
 *
 * glibc gives each thread that meets contention an arena of its own (up to 8 per core) and keeps
 * an arena's high-water mark: memory freed in the middle of an arena is not given back. The media
 * threads allocate a Buffer per RTP packet, so with the default every arena they touch climbs with
 * each new concurrency peak. Measured (bench/soak, an hour of ~100 calls with churn): the default
 * arenas grew 61.9 -> 73.1 MB and the RSS after a full GC 11.9 MB/h from minute 20; with
 * MALLOC_ARENA_MAX=2 the arenas stayed at 35.8 MB and the RSS rose 4.9 MB/h from minute 20
 * (docs/media-workers.md "Memory"). Node cannot call mallopt(), so the setting must be in the
 * environment before node starts: npm start and the Docker image set it; this warns otherwise.
 */
import { report } from 'node:process';

interface ArenaLog {
  warn(obj: object, msg: string): void;
}

/** True when this process runs on glibc (musl and other platforms have no such arenas). */
function onGlibc(): boolean {
  const header = (report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  return typeof header?.glibcVersionRuntime === 'string';
}

/** Warns once at start when media threads run with glibc's default number of malloc arenas. */
export function warnOnDefaultMallocArenas(mediaThreads: number, log: ArenaLog, env: NodeJS.ProcessEnv = process.env): void {
  if (mediaThreads === 0 || (env.MALLOC_ARENA_MAX ?? '') !== '' || !onGlibc()) return;
  log.warn({}, "MALLOC_ARENA_MAX is not set: with glibc's default malloc arenas the media threads' memory climbs for hours under call churn; set MALLOC_ARENA_MAX=2 as npm start and the Docker image do (docs/media-workers.md)");
}
