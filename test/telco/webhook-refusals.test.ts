/**
 * WebhookRefusalLog (src/telco/webhook-refusals.ts) on its own, with a logger whose lines the test
 * reads: per source, route and reason the first refusal of a window in full and one summary line
 * at the window's end; every refusal counted; the table bounded (sources beyond maxSources summed
 * up together).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.ts';
import { WebhookRefusalLog } from '../../src/telco/webhook-refusals.ts';

function logged(): { lines: Array<Record<string, unknown>>; log: ReturnType<typeof createLogger> } {
  const lines: Array<Record<string, unknown>> = [];
  return { lines, log: createLogger('info', { write: (l: string) => void lines.push(JSON.parse(l) as Record<string, unknown>) }) };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('WebhookRefusalLog', () => {
  const open: WebhookRefusalLog[] = [];
  afterEach(() => {
    for (const r of open.splice(0)) r.close();
  });

  it('logs the first refusal of each source, route and reason per window, then one summary with the count', async () => {
    const { lines, log } = logged();
    const counted: string[] = [];
    const r = new WebhookRefusalLog({ log, windowMs: 200, count: (route, reason) => counted.push(`${route} ${reason}`) });
    open.push(r);
    for (let i = 0; i < 30; i++) r.refused('10.0.0.1', 'voice', 'bad_signature', { to: `+1555000${i}` }, 'voice webhook refused (403)');
    for (let i = 0; i < 5; i++) r.refused('10.0.0.1', 'voice', 'body_too_large', {}, 'carrier webhook refused (413)');
    r.refused('10.0.0.2', 'voice', 'bad_signature', {}, 'voice webhook refused (403)');
    expect(counted).toHaveLength(36);
    expect(lines.map((l) => [l.source, l.reason, l.msg])).toEqual([
      ['10.0.0.1', 'bad_signature', 'voice webhook refused (403)'],
      ['10.0.0.1', 'body_too_large', 'carrier webhook refused (413)'],
      ['10.0.0.2', 'bad_signature', 'voice webhook refused (403)'],
    ]);
    expect(lines[0]!.to).toBe('+15550000');
    await sleep(350);
    const summaries = lines.slice(3);
    expect(summaries).toEqual([
      expect.objectContaining({ source: '10.0.0.1', route: 'voice', reason: 'bad_signature', refused: 29 }),
      expect.objectContaining({ source: '10.0.0.1', route: 'voice', reason: 'body_too_large', refused: 4 }),
    ]);
    // A new window: the next refusal is logged in full again.
    r.refused('10.0.0.1', 'voice', 'bad_signature', {}, 'voice webhook refused (403)');
    expect(lines.at(-1)).toMatchObject({ source: '10.0.0.1', msg: 'voice webhook refused (403)' });
  });

  it('keeps at most maxSources entries a window: further sources are summed up in one line', () => {
    const { lines, log } = logged();
    const r = new WebhookRefusalLog({ log, windowMs: 60_000, maxSources: 10, count: () => undefined });
    open.push(r);
    for (let i = 0; i < 1000; i++) r.refused(`10.0.${i >> 8}.${i & 255}`, 'status', 'bad_signature', {}, 'call status callback refused (403)');
    expect(lines).toHaveLength(10);
    r.close();
    expect(lines).toHaveLength(11);
    expect(lines[10]).toMatchObject({ source: '(other sources)', refused: 990 });
  });
});
