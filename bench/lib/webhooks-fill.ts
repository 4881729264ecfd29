/**
 * Fills a callbridge data directory's webhook outbox for bench/webhooks, through the daemon's
 * own store code, then exits. Run as a child process:
 *
 *   node --import tsx bench/lib/webhooks-fill.ts <data dir> <calls> <receiver url> <result.json>
 *
 * One organization with one endpoint at <receiver url> subscribed to call.started, call.answered
 * and call.ended; <calls> calls each written as the daemon writes one (bench/lib/webhooks-calls.ts:
 * three transactions, three outbox rows, in seq order per call). Writes <result.json>
 * (WebhooksFill: the endpoint's secret, for the receiver to verify with, and every outbox body in
 * the order written, for the unsigned baseline), then prints FILLED. (A file, not stdout: child output may be printed when a child fails.)
 */
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { openStore } from '../../src/store/index.ts';
import { newWebhookSecret } from '../../src/events/standard-webhooks.ts';
import { writeCall } from './webhooks-calls.ts';

export interface WebhooksFill {
  secret: string;
  /** The outbox rows' bodies, as the deliverer will send them. */
  bodies: string[];
  seconds: number;
}

async function fill(dataDir: string, calls: number, url: string): Promise<WebhooksFill> {
  const t0 = Date.now();
  const store = await openStore(dataDir, '');
  try {
    // The fill is not measured: a commit's fsync per transaction would only make it slow.
    store.sqlite?.pragma('synchronous = OFF');
    const { org } = await store.organizations.createKey('bench-webhooks');
    const secret = newWebhookSecret();
    await store.webhooks.insert({ id: randomUUID(), org_id: org.id, url, events: ['call.started', 'call.answered', 'call.ended'], description: 'bench', secret, created_at: new Date().toISOString() });
    for (let i = 0; i < calls; i++) await writeCall(store, org.id, i);
    const bodies = (await store.client.all<{ body: string }>('SELECT body FROM webhook_deliveries ORDER BY rowid')).map((r) => r.body);
    if (bodies.length !== 3 * calls) throw new Error(`expected ${3 * calls} outbox rows, found ${bodies.length}`);
    return { secret, bodies, seconds: (Date.now() - t0) / 1000 };
  } finally {
    await store.close();
  }
}

// A script: bench/webhooks.ts runs it as a child (and imports only its types).
const [dir, count, url, out] = process.argv.slice(2);
if (!dir || !count || !url || !out || !Number.isInteger(Number(count)) || Number(count) <= 0) {
  process.stderr.write('usage: node --import tsx bench/lib/webhooks-fill.ts <data dir> <calls> <receiver url> <result.json>\n');
  process.exit(2);
}
writeFileSync(out, JSON.stringify(await fill(dir, Number(count), url)), { mode: 0o600 });
process.stdout.write('FILLED\n');
