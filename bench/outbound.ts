/**
 * bench/outbound: what dialling an outbound run costs (docs/outbound.md), against the same calls
 * dialled through POST /v1/agents/{id}/dial.
 *
 * One daemon in this process (test/helpers/daemon.ts: SQLite, loopback), one SIPp UAS answering
 * every call (test/interop/scenarios/uas-dialer-callee.xml) and hanging up after
 * BENCH_OUTBOUND_CALL_MS (1000) ms. bridge.max_calls_per_org is set very high so that every call
 * holds a call slot from its dial to its end: the slots held are the calls up (ringing or
 * bridged), sampled every 5 ms.
 *
 * - run: a list of BENCH_OUTBOUND_CONTACTS (1,000) contacts and a run with max_concurrent
 *   BENCH_OUTBOUND_CONCURRENCY (20), no calls_per_minute; timed from the run's creation to its
 *   last call placed.
 * - baseline: the same number of calls through POST dial, a client here keeping the same number
 *   of calls up (it dials whenever the slots held drop below the concurrency).
 *
 * Figures: dials per second sustained, the most calls up at once (against the configured
 * concurrency), and this process's CPU per call (the daemon is most of it; the sampling and the
 * client are the same small share in both arms). Validity (else run() throws): every contact is
 * called once (max_attempts 1; completed or failed), and the run never has more calls up than max_concurrent.
 * Reported, not asserted.
 */
import { cpus, loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import { printFigures, type Figure } from './lib/result.ts';
import { envNumber } from './lib/env.ts';
import { startTestDaemon, type TestDaemon } from '../test/helpers/daemon.ts';
import { startSipp, type SippProcess } from '../test/interop/sipp.ts';

const log = (s: string) => process.stdout.write(s);
const CALLER_ID = '+15550001111';

interface Arm {
  seconds: number;
  dialsPerSec: number;
  maxUp: number;
  cpuUsPerCall: number;
}

/** Samples the calls up (slots held) until stopped; returns the most seen. */
function sampleUp(d: TestDaemon): { stop(): Promise<number>; now(): Promise<number> } {
  let max = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      max = Math.max(max, await d.daemon.bridge.slotsHeld());
      await new Promise((r) => setTimeout(r, 5));
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return max;
    },
    now: () => d.daemon.bridge.slotsHeld(),
  };
}

const number = (i: number, base: number) => `+1555${String(base + i).padStart(7, '0')}`;

async function runArm(d: TestDaemon, agentId: string, trunkId: string, n: number, concurrency: number): Promise<Arm> {
  const contacts = Array.from({ length: n }, (_, i) => ({ phone_number: number(i, 1_000_000) }));
  const list = await d.api('POST', '/v1/outbound-lists', { name: 'bench', agent_id: agentId, sip_trunk_id: trunkId, caller_id: CALLER_ID, contacts });
  if (list.status !== 201) throw new Error(`list: ${list.text}`);
  const sampler = sampleUp(d);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const run = await d.api('POST', `/v1/outbound-lists/${list.body.id}/runs`, { max_concurrent: concurrency, retry: { max_attempts: 1, backoff_secs: 0, on: [] } });
  if (run.status !== 201) throw new Error(`run: ${run.text}`);
  let lastPlaced = t0;
  let completed: number | undefined;
  for (;;) {
    const r = (await d.api('GET', `/v1/outbound-lists/${list.body.id}/runs/${run.body.id}`)).body;
    if (r.counts.pending > 0 || r.counts.dialing > 0) lastPlaced = performance.now();
    if (r.status === 'completed') {
      // A callee that hangs up before the voice session connected ends failed (its record's
      // end_status): on a loaded machine some short calls do, in both arms. Every contact once is what counts here.
      if (r.counts.completed + r.counts.failed !== n) throw new Error(`run completed with ${JSON.stringify(r.counts)}`);
      completed = r.counts.completed;
      break;
    }
    await new Promise((res) => setTimeout(res, 50));
  }
  const cpu = process.cpuUsage(cpu0);
  const maxUp = await sampler.stop();
  const calls = await d.api('GET', `/v1/calls?outbound_list_run_id=${run.body.id}&page_size=1`);
  if (calls.body.pagination.total !== n) throw new Error(`the run placed ${calls.body.pagination.total} calls for ${n} contacts`);
  const seconds = (lastPlaced - t0) / 1000;
  log(`run: ${completed ?? 0} of ${n} calls completed (the others ended before their voice session connected)\n`);
  return { seconds, dialsPerSec: n / seconds, maxUp, cpuUsPerCall: (cpu.user + cpu.system) / n };
}

async function dialArm(d: TestDaemon, agentId: string, trunkId: string, n: number, concurrency: number): Promise<Arm> {
  const sampler = sampleUp(d);
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let placed = 0;
  let inFlight = 0;
  while (placed < n) {
    // Keep `concurrency` calls up: dial while fewer are (counting the dials being placed).
    const room = concurrency - (await sampler.now()) - inFlight;
    const batch = Math.min(room, n - placed);
    if (batch <= 0) {
      await new Promise((res) => setTimeout(res, 5));
      continue;
    }
    await Promise.all(
      Array.from({ length: batch }, async () => {
        inFlight++;
        const to = number(placed++, 2_000_000);
        const r = await d.api('POST', `/v1/agents/${agentId}/dial?number=${encodeURIComponent(to)}&sipTrunkId=${trunkId}&callerId=${encodeURIComponent(CALLER_ID)}`);
        inFlight--;
        if (r.status !== 200) throw new Error(`dial: ${r.status} ${r.text}`);
      }),
    );
  }
  const lastPlaced = performance.now();
  while ((await sampler.now()) > 0) await new Promise((res) => setTimeout(res, 20));
  const cpu = process.cpuUsage(cpu0);
  const maxUp = await sampler.stop();
  const seconds = (lastPlaced - t0) / 1000;
  return { seconds, dialsPerSec: n / seconds, maxUp, cpuUsPerCall: (cpu.user + cpu.system) / n };
}

export async function run(): Promise<void> {
  const n = Math.round(envNumber('BENCH_OUTBOUND_CONTACTS', 1000));
  const concurrency = Math.round(envNumber('BENCH_OUTBOUND_CONCURRENCY', 20));
  const callMs = envNumber('BENCH_OUTBOUND_CALL_MS', 1000);
  log(`${n} calls, ${concurrency} at once, ${callMs} ms each; ${cpus().length} CPUs, load ${loadavg().map((l) => l.toFixed(2)).join(' ')}\n`);
  let callees: SippProcess | undefined;
  let d: TestDaemon | undefined;
  try {
    callees = await startSipp({ scenario: 'uas-dialer-callee', rtpEcho: true, calls: 10 * n, durationMs: callMs, timeoutMs: 60 * 60_000 });
    await callees.ready;
    d = await startTestDaemon({ rtp: { address: '127.0.0.1' }, bridge: { max_calls_per_org: 1_000_000 }, outbound: { tick_ms: 50 } });
    const agentId = (await d.api('POST', '/v1/agents', { name: 'Bench dialer', first_message: 'Hello.' })).body.id;
    const trunkId = (await d.api('POST', '/v1/sip-trunks', { pbx: 'generic', name: 'callees', inbound_auth_type: 'none', outbound_host: `127.0.0.1:${callees.localPort}` })).body.id;
    await d.api('POST', `/v1/sip-trunks/${trunkId}/assignments`, { agent_id: agentId, number: '7000' });
    const base = await dialArm(d, agentId, trunkId, n, concurrency);
    log(`POST dial: ${base.seconds.toFixed(1)} s, ${base.dialsPerSec.toFixed(1)} dials/s, at most ${base.maxUp} up, ${Math.round(base.cpuUsPerCall)} us CPU per call\n`);
    const arm = await runArm(d, agentId, trunkId, n, concurrency);
    log(`run:       ${arm.seconds.toFixed(1)} s, ${arm.dialsPerSec.toFixed(1)} dials/s, at most ${arm.maxUp} up, ${Math.round(arm.cpuUsPerCall)} us CPU per call\n`);
    if (arm.maxUp > concurrency) throw new Error(`the run had ${arm.maxUp} calls up, max_concurrent ${concurrency}`);
    const figures: Figure[] = [
      { name: 'outbound_run_dials_per_sec', value: arm.dialsPerSec, unit: 'dials/s', baseline: base.dialsPerSec, note: `run of ${n}, max_concurrent ${concurrency}, vs POST dial keeping as many up` },
      { name: 'outbound_run_max_up', value: arm.maxUp, unit: 'calls', baseline: concurrency, note: 'most calls up at once vs max_concurrent' },
      { name: 'outbound_run_cpu_per_call', value: arm.cpuUsPerCall, unit: 'us', baseline: base.cpuUsPerCall, note: 'this process (the daemon) per call, vs POST dial' },
    ];
    printFigures('bench/outbound', figures);
  } finally {
    callees?.kill();
    await d?.close();
  }
}
