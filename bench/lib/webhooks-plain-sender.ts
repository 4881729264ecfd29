/**
 * The baseline of bench/webhooks' delivery rate: the bodies the outbox holds, POSTed to the same
 * receiver with the same concurrency (webhooks.max_in_flight), unsigned and without the store:
 * what HTTP alone costs. It posts with the deliverer's own HTTP code (src/events/http-post.ts:
 * the destination check, the pinned address, the deadline), so what the daemon adds over it is
 * the outbox (claim, lease, outcome writes), the secret's unsealing and the signature. A child
 * process, as the daemon is (the receiver, in the bench's process, serves both alike):
 *
 *   node --import tsx bench/lib/webhooks-plain-sender.ts <fill.json> <receiver url> <concurrency>
 *
 * Posts every body once, then prints `SENT <answers that were not 2xx>`. The receiver times the
 * run, from its first request to its last.
 */
import { readFileSync } from 'node:fs';
import { postJson } from '../../src/events/http-post.ts';
import type { WebhooksFill } from './webhooks-fill.ts';

/** The daemon's default webhooks.timeout_ms. */
const TIMEOUT_MS = 5000;

async function send(bodies: string[], url: string, concurrency: number): Promise<number> {
  let next = 0;
  let failed = 0;
  const worker = async () => {
    for (let i = next++; i < bodies.length; i = next++) {
      const answer = await postJson(url, bodies[i]!, { policy: { allowPrivate: true }, timeoutMs: TIMEOUT_MS, maxResponseBytes: 1024 });
      if (answer.status < 200 || answer.status >= 300) failed++;
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return failed;
}

// A script: bench/webhooks.ts runs it as a child.
const [fillPath, url, concurrency] = process.argv.slice(2);
if (!fillPath || !url || !concurrency || !Number.isInteger(Number(concurrency)) || Number(concurrency) <= 0) {
  process.stderr.write('usage: node --import tsx bench/lib/webhooks-plain-sender.ts <fill.json> <receiver url> <concurrency>\n');
  process.exit(2);
}
const { bodies } = JSON.parse(readFileSync(fillPath, 'utf8')) as WebhooksFill;
process.stdout.write(`SENT ${await send(bodies, url, Number(concurrency))}\n`);
