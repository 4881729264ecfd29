import { describe, expect, it } from 'vitest';
import { warnOnDefaultMallocArenas } from '../../src/media/malloc-arenas.ts';

function collect() {
  const lines: string[] = [];
  return { lines, log: { warn: (_obj: object, msg: string) => lines.push(msg) } };
}

// This machine runs glibc (Debian), which is what the warning is about.
const glibc = typeof (process.report.getReport() as { header: { glibcVersionRuntime?: string } }).header.glibcVersionRuntime === 'string';

describe('warnOnDefaultMallocArenas', () => {
  it.runIf(glibc)('warns when media threads run with glibc default arenas', () => {
    const { lines, log } = collect();
    warnOnDefaultMallocArenas(2, log, {});
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain('MALLOC_ARENA_MAX=2');
  });

  it('is quiet when MALLOC_ARENA_MAX is set, or with no media threads', () => {
    const { lines, log } = collect();
    warnOnDefaultMallocArenas(2, log, { MALLOC_ARENA_MAX: '2' });
    warnOnDefaultMallocArenas(2, log, { MALLOC_ARENA_MAX: '4' });
    warnOnDefaultMallocArenas(0, log, {});
    expect(lines).toEqual([]);
  });

  it.runIf(glibc)('treats an empty MALLOC_ARENA_MAX as unset (glibc ignores it)', () => {
    const { lines, log } = collect();
    warnOnDefaultMallocArenas(1, log, { MALLOC_ARENA_MAX: '' });
    expect(lines).toHaveLength(1);
  });
});
