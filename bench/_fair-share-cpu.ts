/**
 * Not a benchmark (the leading `_`): the in-process A/B behind http.fair_share_ms's default
 * (docs/benchmarks.md, bench/signaling). A daemon in this process with 100 agents, autocannon in
 * a child process saturating `GET /v1/agents?limit=100` from 100 connections for 2 s (warm-up)
 * then 5 s; prints the requests per second, this process's CPU time per request and its
 * event-loop delay (the length of its turns).
 *
 *   for fs in 0 1 2 4; do FS=$fs node --single-threaded-gc --import tsx bench/_fair-share-cpu.ts; done
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { startDaemon, INITIAL_KEY_FILE } from '../src/main.ts';

const budget = Number(process.env.FS ?? 1);
const dir = mkdtempSync(join(tmpdir(), 'callbridge-fair-share-'));
const config = loadConfig({ data_dir: dir, http: { host: '127.0.0.1', port: 0, fair_share_ms: budget }, sip: { host: '127.0.0.1', port: 0 }, log_level: 'silent' }, {});
const daemon = await startDaemon(config, createLogger('silent'), () => {}, { runtimeFactory: null });
try {
  const key = readFileSync(join(dir, INITIAL_KEY_FILE), 'utf8').trim();
  for (let i = 0; i < 100; i++) {
    await fetch(`${daemon.url}/v1/agents`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: `a${i}` }) });
  }
  const bin = createRequire(import.meta.url).resolve('autocannon/autocannon.js');
  const load = (secs: number) =>
    new Promise<{ requests: { total: number; average: number }; latency: { p99: number } }>((resolve, reject) => {
      const p = spawn(process.execPath, [bin, '-c', '100', '-d', String(secs), '-j', '-H', `authorization=Bearer ${key}`, `${daemon.url}/v1/agents?limit=100`], { stdio: ['ignore', 'pipe', 'ignore'] });
      let out = '';
      p.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
      p.on('close', () => {
        try {
          resolve(JSON.parse(out.trim().split('\n').pop() ?? ''));
        } catch (err) {
          reject(err instanceof Error ? err : new Error(String(err)));
        }
      });
    });
  await load(2);
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  const cpu0 = process.cpuUsage();
  const r = await load(5);
  delay.disable();
  const cpu = process.cpuUsage(cpu0);
  const ms = (ns: number) => (ns / 1e6).toFixed(2);
  process.stdout.write(
    `fair_share_ms ${budget}: ${r.requests.average} req/s (p99 ${r.latency.p99} ms), CPU ${((cpu.user + cpu.system) / 5e6).toFixed(2)} of a core, ` +
      `${((cpu.user + cpu.system) / r.requests.total).toFixed(0)} us per request; event-loop delay p50 ${ms(delay.percentile(50))} p99 ${ms(delay.percentile(99))} max ${ms(delay.max)} ms\n`,
  );
} finally {
  await daemon.close();
  rmSync(dir, { recursive: true, force: true });
}
process.exit(0);
