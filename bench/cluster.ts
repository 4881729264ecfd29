/**
 * bench/cluster: callbridge as a cluster on PostgreSQL behind Kamailio, in one run:
 *
 *   1. Store: INVITE->200 of one node on SQLite (the baseline) beside one node on PostgreSQL,
 *      same machine, same configuration but the store. SIPp calls each node directly (no
 *      Kamailio) at BENCH_CLUSTER_LATENCY_RATE calls/s for BENCH_CLUSTER_LATENCY_SECS, the two
 *      nodes taking turns BENCH_CLUSTER_LATENCY_ROUNDS times (a busy neighbour weighs on both
 *      alike; each round in the other order), after 15 unmeasured calls to each node
 *      (--quick: 8). INVITE->200 per call: first transmission of the INVITE to the first 200,
 *      from SIPp's microsecond message trace (bench/lib/sipp-trace.ts).
 *   2. Cluster: 1, 2 and 3 nodes on ONE PostgreSQL database behind Kamailio running the shipped
 *      deploy/kamailio/kamailio.cfg (test/cluster/dispatcher-kamailio.ts); a node joins as an
 *      operator adds one (dispatcher.list + kamcmd dispatcher.reload). Per node count:
 *      - setups/s: a fixed offered-rate ramp (BENCH_CLUSTER_RATES), each step
 *        BENCH_CLUSTER_STEP_SECS long, every call held BENCH_CLUSTER_SETUP_HOLD_MS with RTP.
 *        A step is sustained with < 1 % failed calls and >= 95 % of its rate completed (200 OKs
 *        per second, first to last, from SIPp's trace); the ramp stops at the first step that is
 *        not. The figure: the highest sustained step's measured setups/s. Why a fixed ramp and
 *        not a search for the highest rate: on a 2-core machine shared with other work, a
 *        closed-loop search chases the neighbours' load; fixed steps give the same offered load
 *        to 1, 2 and 3 nodes, and the step size is the figure's resolution.
 *      - calls held: BENCH_CLUSTER_HELD (concurrency steps) calls placed at
 *        BENCH_CLUSTER_HELD_RATE calls/s, all kept up through a settle time (3 s) and the
 *        window (BENCH_CLUSTER_WINDOW_SECS); the window starts when all are up (at most
 *        LATE_RAMP_MS after the planned time: a busy machine ramps late). A step is held when
 *        SIPp has no failed call, the nodes' callbridge_bridge_calls_active add up to all of
 *        them at the window's start and end, and
 *        every call's agent spoke its first message (callbridge_tts_first_byte_seconds_count
 *        grew by at least the calls; the local eSpeak voice, local/echo). Steps go on while held.
 *        The figure: the highest step held.
 *      - CPU per call per node: each node's user+system CPU over the window (/proc/<pid>/stat)
 *        divided by its call-seconds (its active calls, mean of the window's start and end, x
 *        the window), ms of CPU per second of
 *        call, at the highest held step. The RESULT figure is the cluster's (all nodes' CPU /
 *        all call-seconds); each node's is in the table, beside its idle CPU (% of a core over
 *        IDLE_SECS with no call up, before the node count's first step).
 *      RESULT baselines: the 1-node figure of the same run.
 *
 * Calls: SIPp (bench/lib/caller-sipp.ts) places them through an ACL trunk admitting 127.0.0.1
 * (Kamailio's address, and SIPp's for phase 1) to one agent (first message "Hello.", local/echo,
 * the embedded eSpeak voice: each node runs its agents' sessions in-process, as a default
 * deployment does), and plays the caller's RTP itself: a quiet tone (about -60 dBFS) that the
 * agent's VAD does not take for speech, so the agent speaks its first message and then sends
 * silence frames: RTP both ways for the whole call (the agent's silence timeout is off, so a
 * quiet caller is not prompted and hung up). Nodes: `node bin/callbridge.js start`
 * children (test/cluster/callbridge-node.ts), log level warn, the same sip.digest_secret,
 * token secret and encryption key; nodes 2 and 3 use the first node's API key (the store is
 * shared: only the first node creates one).
 *
 * Options (after the name): `npm run bench -- cluster --quick` is a smoke run (2.6 min): two
 * short rounds of phase 1, two rate steps and one held step per node count. The full run took
 * 18 min on 2 vCPUs (longer the more steps are sustained). Environment: the BENCH_CLUSTER_* above, BENCH_CLUSTER_NODES (1,2,3).
 * Needs SIPp (sip-tester), Kamailio (kamailio) and PostgreSQL (postgresql) from Debian; binds
 * 127.0.0.1 only; every process it starts is stopped by PID.
 */
import { cpus, loadavg } from 'node:os';
import { randomBytes } from 'node:crypto';
import { startCallbridgeNode, type CallbridgeNode } from '../test/cluster/callbridge-node.ts';
import { dispatcherFrontAvailable, startDispatcherFront, type DispatcherFront } from '../test/cluster/dispatcher-kamailio.ts';
import { postgresAvailability, startPostgres, type PostgresServer } from '../test/helpers/postgres.ts';
import { sippAvailable, ulawTone } from '../test/interop/sipp.ts';
import { spawnCallerSipp } from './lib/caller-sipp.ts';
import { cpuSeconds } from './lib/child.ts';
import { envIntegerList, envNumber } from './lib/env.ts';
import { formatValue, printFigures, table, type Figure } from './lib/result.ts';
import { inviteTo200Ms, parseShortMessages, spanRate } from './lib/sipp-trace.ts';

const HOST = '127.0.0.1';
const NUMBER = '+15550025100';
const FIRST_MESSAGE = 'Hello.';
/** A step is sustained with at most this share of failed calls... */
const MAX_FAILED_SHARE = 0.01;
/** ...and at least this share of its rate completed. */
const KEEP_UP = 0.95;
const SETTLE_MS = 3000;
/** How much longer than planned a held step's ramp may take before its window starts anyway. */
const LATE_RAMP_MS = 8000;
const IDLE_SECS = 3;
/** Each node's RTP ports: its own slice above SIPp's (-mp 20000-24000 and up, bench/lib/caller-sipp.ts). */
const RTP_BASE = 26000;
const RTP_SLICE = 800;

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const log = (s: string) => process.stdout.write(s + '\n');
const quantile = (sorted: Float64Array, q: number) => (sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!);
const load = () => loadavg().map((l) => l.toFixed(2)).join(' ');

interface Plan {
  latencyRate: number;
  latencySecs: number;
  latencyRounds: number;
  nodeCounts: number[];
  rates: number[];
  stepSecs: number;
  setupHoldMs: number;
  held: number[];
  heldRate: number;
  windowSecs: number;
  /** Unmeasured calls to each fresh node. */
  warmUpCalls: number;
}

function plan(): Plan {
  const quick = process.argv.includes('--quick');
  return {
    latencyRate: envNumber('BENCH_CLUSTER_LATENCY_RATE', 10),
    latencySecs: envNumber('BENCH_CLUSTER_LATENCY_SECS', quick ? 4 : 15),
    latencyRounds: Math.round(envNumber('BENCH_CLUSTER_LATENCY_ROUNDS', quick ? 2 : 3)),
    nodeCounts: envIntegerList('BENCH_CLUSTER_NODES', '1,2,3'),
    rates: envIntegerList('BENCH_CLUSTER_RATES', quick ? '5,10' : '5,10,15,20,30,40,50'),
    stepSecs: envNumber('BENCH_CLUSTER_STEP_SECS', quick ? 4 : 12),
    setupHoldMs: Math.round(envNumber('BENCH_CLUSTER_SETUP_HOLD_MS', 1000)),
    held: envIntegerList('BENCH_CLUSTER_HELD', quick ? '10' : '20,40,60,80,100'),
    heldRate: envNumber('BENCH_CLUSTER_HELD_RATE', 10),
    windowSecs: envNumber('BENCH_CLUSTER_WINDOW_SECS', quick ? 5 : 15),
    warmUpCalls: quick ? 8 : 15,
  };
}

// ---------------------------------------------------------------------------------------------
// Nodes and their metrics

/** Sum of a Prometheus metric's samples over all its label sets (`name` or `name{...}`). */
function metricSum(text: string, name: string): number {
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'gm'))) sum += Number(m[1]);
  return sum;
}

interface NodeCounters {
  setups: number;
  spoke: number;
  active: number;
  cpu: number;
}

async function counters(node: CallbridgeNode): Promise<NodeCounters> {
  const res = await fetch(`http://${HOST}:${node.httpPort}/metrics`);
  const text = await res.text();
  if (!res.ok) throw new Error(`${node.name} /metrics: HTTP ${res.status}`);
  return {
    setups: metricSum(text, 'callbridge_bridge_call_setups_total'),
    spoke: metricSum(text, 'callbridge_tts_first_byte_seconds_count'),
    active: metricSum(text, 'callbridge_bridge_calls_active'),
    cpu: cpuSeconds(node.pid),
  };
}

const allCounters = (nodes: readonly CallbridgeNode[]) => Promise.all(nodes.map(counters));

async function post(node: CallbridgeNode, path: string, body: unknown): Promise<{ id: string }> {
  const res = await node.api('POST', path, body);
  if (res.status !== 201) throw new Error(`${node.name} POST ${path}: HTTP ${res.status} ${res.text}`);
  return res.body as { id: string };
}

/** The agent, an ACL trunk admitting 127.0.0.1 (Kamailio; SIPp in phase 1) and NUMBER routed to the agent. */
async function provision(node: CallbridgeNode): Promise<void> {
  // No silence timeout (0: never): the quiet callers would otherwise be prompted and hung up.
  const agent = await post(node, '/v1/agents', { name: 'bench cluster', first_message: FIRST_MESSAGE, vad_settings: { silence_timeout_secs: 0 } });
  const trunk = await post(node, '/v1/sip-trunks', { pbx: 'generic', name: 'bench cluster front', inbound_auth_type: 'acl', inbound_acl: [`${HOST}/32`] });
  await post(node, `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, alternate_number: NUMBER });
}

interface Cluster {
  env: Record<string, string>;
  nodes: CallbridgeNode[];
}

let nodeSeq = 0;
/** A node with its own RTP port slice; `apiKey`: a node joining a shared store uses the first node's key. */
async function startNode(c: Cluster, name: string, env: Record<string, string>, apiKey?: string): Promise<CallbridgeNode> {
  const rtpMin = RTP_BASE + RTP_SLICE * nodeSeq++;
  const node = await startCallbridgeNode({ name, env: { ...c.env, ...env }, rtpPorts: [rtpMin, rtpMin + RTP_SLICE - 1], startTimeoutMs: 60_000, ...(apiKey === undefined ? {} : { apiKey }) });
  c.nodes.push(node);
  return node;
}

// ---------------------------------------------------------------------------------------------
// SIPp runs

interface CallRun {
  calls: number;
  failed: number;
  /** 200 OKs per second, first to last. */
  setupsPerSec: number;
  /** INVITE->200, ms, ascending. */
  inviteTo200: Float64Array;
  describe: string;
}

let callerSeq = 0;
/** `calls` calls to `remote` at `rate` calls/s, each held `holdMs`; resolves when SIPp is done. */
async function placeCalls(bin: string, remote: string, calls: number, rate: number, holdMs: number, during?: (elapsedMs: () => number) => Promise<void>): Promise<CallRun> {
  const sipp = spawnCallerSipp({
    bin,
    realtime: 0,
    remote,
    number: NUMBER,
    media: CALLER_AUDIO,
    csv: Array.from({ length: calls }, () => `+1555400${String(++callerSeq % 10000).padStart(4, '0')};0`),
    calls,
    periodMs: 1000 / rate,
    holdMs,
    timeoutMs: (calls / rate) * 1000 + holdMs + 60_000,
    traceMessages: true,
  });
  const t0 = Date.now();
  try {
    if (during) await during(() => Date.now() - t0);
    const { code, failed } = await sipp.done();
    const trace = parseShortMessages(sipp.messages());
    const oks = [...trace.values()].flatMap((c) => (c.okAt === undefined ? [] : [c.okAt]));
    return { calls, failed: code === null ? calls : failed, setupsPerSec: spanRate(oks), inviteTo200: inviteTo200Ms(trace), describe: sipp.describe() };
  } finally {
    await sipp.stop();
  }
}

/** The caller's audio, looped by SIPp: a 440 Hz tone at about -60 dBFS (below the energy VAD). */
const CALLER_AUDIO = ulawTone(3, 440, 30);

/**
 * A few calls straight to a fresh node, not measured: its first calls compile code paths (tsx,
 * the JIT), open store connections and start the local voice; a cold node's INVITE->200 is
 * hundreds of ms above a warm one's.
 */
async function warmUp(bin: string, p: Plan, node: CallbridgeNode): Promise<void> {
  const r = await placeCalls(bin, `${HOST}:${node.sipPort}`, p.warmUpCalls, 5, 500);
  log(`  warm-up ${node.name}: ${r.calls - r.failed}/${r.calls} calls ok`);
}

// ---------------------------------------------------------------------------------------------
// Phase 1: INVITE->200, SQLite vs PostgreSQL

interface LatencyResult {
  name: string;
  samples: Float64Array;
  calls: number;
  failed: number;
}

async function latencyPhase(bin: string, p: Plan, targets: { name: string; node: CallbridgeNode }[]): Promise<LatencyResult[]> {
  const acc = targets.map(() => ({ samples: [] as number[], calls: 0, failed: 0 }));
  const calls = Math.max(2, Math.round(p.latencyRate * p.latencySecs));
  for (let round = 1; round <= p.latencyRounds; round++) {
    // Each round in the other order: neither target always runs right after the other.
    const order = [...targets.entries()];
    if (round % 2 === 0) order.reverse();
    for (const [i, t] of order) {
      const r = await placeCalls(bin, `${HOST}:${t.node.sipPort}`, calls, p.latencyRate, p.setupHoldMs);
      const a = acc[i]!;
      a.samples.push(...r.inviteTo200);
      a.calls += r.calls;
      a.failed += r.failed;
      log(`  round ${round}, ${t.name}: ${r.calls - r.failed}/${r.calls} calls ok, INVITE->200 p50 ${formatValue(quantile(r.inviteTo200, 0.5))} ms, p99 ${formatValue(quantile(r.inviteTo200, 0.99))} ms`);
      if (r.failed > 0) log(r.describe);
    }
  }
  return targets.map((t, i) => ({ name: t.name, samples: Float64Array.from(acc[i]!.samples).sort(), calls: acc[i]!.calls, failed: acc[i]!.failed }));
}

// ---------------------------------------------------------------------------------------------
// Phase 2: through Kamailio

interface SetupStep {
  rate: number;
  run: CallRun;
  /** Calls Kamailio dispatched to each node in the step, in node order. */
  spread: number[];
  /** INVITEs Kamailio sent on to another node after one did not answer in time or answered 503. */
  failovers: number;
  sustained: boolean;
}

interface HeldStep {
  calls: number;
  failed: number;
  /** Bridged calls per node at the window's end. */
  active: number[];
  /** First messages spoken per node during the step (TTS requests that produced audio). */
  spoke: number[];
  /** CPU ms per second of call, per node, over the window. */
  cpuMsPerCallSec: number[];
  /** All nodes' CPU / all call-seconds. */
  clusterCpuMsPerCallSec: number;
  held: boolean;
}

interface NodeCountResult {
  n: number;
  /** Each node's CPU with no call up, % of a core: what a node costs before its first call. */
  idlePct: number[];
  setups: SetupStep[];
  heldSteps: HeldStep[];
}

const dispatchCount = (front: DispatcherFront, from: number, node: CallbridgeNode) => front.log().slice(from).split(`dispatch INVITE `).filter((l) => new RegExp(`^\\S+ to ${node.sipUri.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(\\s|$)`).test(l)).length;

/** Each node's CPU over IDLE_SECS with no call up (the last step's calls have ended), % of a core. */
async function idleCpu(nodes: readonly CallbridgeNode[]): Promise<number[]> {
  await sleep(1000);
  const c0 = nodes.map((n) => cpuSeconds(n.pid));
  await sleep(IDLE_SECS * 1000);
  return nodes.map((n, i) => (100 * (cpuSeconds(n.pid) - c0[i]!)) / IDLE_SECS);
}

async function setupSteps(bin: string, p: Plan, front: DispatcherFront, nodes: readonly CallbridgeNode[]): Promise<SetupStep[]> {
  const out: SetupStep[] = [];
  for (const rate of p.rates) {
    const from = front.log().length;
    const calls = Math.max(2, Math.round(rate * p.stepSecs));
    const run = await placeCalls(bin, `${HOST}:${front.port}`, calls, rate, p.setupHoldMs);
    const spread = nodes.map((node) => dispatchCount(front, from, node));
    const failovers = front.log().slice(from).split('(failover: ').length - 1;
    const sustained = run.failed <= calls * MAX_FAILED_SHARE && run.setupsPerSec >= rate * KEEP_UP;
    out.push({ rate, run, spread, failovers, sustained });
    log(
      `  ${nodes.length} node(s) @ ${rate} calls/s: ${calls - run.failed}/${calls} ok, ${formatValue(run.setupsPerSec)} setups/s, INVITE->200 p50 ${formatValue(quantile(run.inviteTo200, 0.5))} ms p99 ${formatValue(quantile(run.inviteTo200, 0.99))} ms, per node ${spread.join('/')}, failovers ${failovers}${sustained ? '' : ' -- NOT SUSTAINED'}`,
    );
    if (!sustained) {
      if (run.failed > 0) log(run.describe);
      break;
    }
    // Let the last calls' sessions finish before the next step.
    await sleep(1000);
  }
  return out;
}

async function heldSteps(bin: string, p: Plan, front: DispatcherFront, nodes: readonly CallbridgeNode[]): Promise<HeldStep[]> {
  const out: HeldStep[] = [];
  for (const calls of p.held) {
    const rampMs = (calls / p.heldRate) * 1000;
    // Room for a late ramp: on a busy machine SIPp places the calls slower than asked.
    const holdMs = Math.ceil(rampMs + SETTLE_MS + LATE_RAMP_MS + p.windowSecs * 1000 + 2000);
    const before = await allCounters(nodes);
    let atStart: NodeCounters[] = [];
    let atEnd: NodeCounters[] = [];
    const run = await placeCalls(bin, `${HOST}:${front.port}`, calls, p.heldRate, holdMs, async (elapsed) => {
      await sleep(Math.max(0, rampMs + SETTLE_MS - elapsed()));
      const waitUntil = Date.now() + LATE_RAMP_MS;
      for (;;) {
        atStart = await allCounters(nodes);
        if (atStart.reduce((a, c) => a + c.active, 0) >= calls || Date.now() > waitUntil) break;
        await sleep(200);
      }
      await sleep(p.windowSecs * 1000);
      atEnd = await allCounters(nodes);
    });
    const active = atEnd.map((c) => c.active);
    const spoke = atEnd.map((c, i) => c.spoke - before[i]!.spoke);
    const cpu = atEnd.map((c, i) => c.cpu - atStart[i]!.cpu);
    // Call-seconds: the calls up at the window's start and end, averaged (equal when held).
    const callSecs = atEnd.map((c, i) => ((c.active + atStart[i]!.active) / 2) * p.windowSecs);
    const cpuMsPerCallSec = cpu.map((s, i) => (1000 * s) / callSecs[i]!);
    const totalActive = active.reduce((a, b) => a + b, 0);
    const clusterCpuMsPerCallSec = (1000 * cpu.reduce((a, b) => a + b, 0)) / callSecs.reduce((a, b) => a + b, 0);
    const held = run.failed === 0 && totalActive === calls && atStart.reduce((a, c) => a + c.active, 0) === calls && spoke.reduce((a, b) => a + b, 0) >= calls;
    out.push({ calls, failed: run.failed, active, spoke, cpuMsPerCallSec, clusterCpuMsPerCallSec, held });
    log(
      `  ${nodes.length} node(s), ${calls} calls: ${held ? 'held' : 'NOT HELD'} (SIPp failed ${run.failed}; bridged at the window's end ${active.join('/')}; first messages spoken ${spoke.join('/')}); CPU ms per call-second ${cpuMsPerCallSec.map(formatValue).join('/')}, cluster ${formatValue(clusterCpuMsPerCallSec)}`,
    );
    if (!held) {
      if (run.failed > 0) log(run.describe);
      break;
    }
    await sleep(1000);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

export async function run(): Promise<void> {
  const sipp = sippAvailable();
  if (!sipp.ok) throw new Error(`bench/cluster needs SIPp: ${sipp.reason ?? 'not available'}`);
  const kam = dispatcherFrontAvailable();
  if (!kam.ok) throw new Error(`bench/cluster needs Kamailio: ${kam.reason ?? 'not available'}`);
  const pgAvail = postgresAvailability();
  if (!pgAvail.ok) throw new Error(`bench/cluster needs PostgreSQL: ${pgAvail.reason ?? 'not available'}`);
  const p = plan();
  log(
    `machine: ${cpus().length} CPUs (${cpus()[0]?.model.trim() ?? 'unknown'}), node ${process.version}, ${sipp.version ?? 'SIPp'}, load average ${load()}\n` +
      `phase 1: one node on SQLite vs one on PostgreSQL, SIPp direct, ${p.latencyRate} calls/s for ${p.latencySecs} s, ${p.latencyRounds} round(s), calls held ${p.setupHoldMs} ms\n` +
      `phase 2: ${p.nodeCounts.join(', ')} node(s) on one PostgreSQL behind Kamailio; setups: steps ${p.rates.join(', ')} calls/s x ${p.stepSecs} s (sustained: < ${MAX_FAILED_SHARE * 100} % failed, >= ${KEEP_UP * 100} % of the rate); ` +
      `held: ${p.held.join(', ')} calls at ${p.heldRate} calls/s, window ${p.windowSecs} s`,
  );

  const secret = () => randomBytes(32).toString('base64');
  const cluster: Cluster = {
    env: {
      CALLBRIDGE_LOG_LEVEL: 'warn',
      CALLBRIDGE_SIP_DIGEST_SECRET: secret(),
      CALLBRIDGE_TOKEN_SECRET: secret(),
      CALLBRIDGE_ENCRYPTION_KEY: secret(),
      // bridge.max_calls stays per node; the bench's steps must not meet it.
      CALLBRIDGE_BRIDGE_MAX_CALLS: '0',
    },
    nodes: [],
  };
  let pg: PostgresServer | undefined;
  let front: DispatcherFront | undefined;
  const started = Date.now();
  try {
    pg = await startPostgres();
    const url = await pg.createDatabase('bench_cluster');
    log(`PostgreSQL ${pg.major} on ${HOST}:${pg.port} (fsync off: a throwaway cluster)`);

    // Phase 1.
    const sqliteNode = await startNode(cluster, 'sqlite', {});
    const node1 = await startNode(cluster, 'node1', { CALLBRIDGE_STORE_URL: url });
    await provision(sqliteNode);
    await provision(node1);
    await warmUp(sipp.bin, p, sqliteNode);
    await warmUp(sipp.bin, p, node1);
    log('phase 1: INVITE->200, SQLite vs PostgreSQL');
    const [sqlite, postgres] = await latencyPhase(sipp.bin, p, [
      { name: 'sqlite', node: sqliteNode },
      { name: 'postgres', node: node1 },
    ]);
    await sqliteNode.close();
    cluster.nodes.splice(cluster.nodes.indexOf(sqliteNode), 1);

    // Phase 2.
    const maxNodes = p.nodeCounts[p.nodeCounts.length - 1]!;
    const members: CallbridgeNode[] = [node1];
    for (let i = 2; i <= maxNodes; i++) {
      const node = await startNode(cluster, `node${i}`, { CALLBRIDGE_STORE_URL: url }, node1.key);
      await warmUp(sipp.bin, p, node);
      members.push(node);
    }
    front = await startDispatcherFront({ nodes: [node1.sipUri], pingIntervalSecs: 1, frTimerMs: 2000 });
    const results: NodeCountResult[] = [];
    for (const n of p.nodeCounts) {
      const nodes = members.slice(0, n);
      front.setNodes(nodes.map((x) => x.sipUri));
      // Wait until the dispatcher has probed every node up.
      const deadline = Date.now() + 15_000;
      while (!nodes.every((x) => new RegExp(`URI:\\s*${x.sipUri.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s*\\n\\s*FLAGS:\\s*A`).test(front!.rpc('dispatcher.list')))) {
        if (Date.now() > deadline) throw new Error(`Kamailio did not mark all ${n} nodes active within 15 s:\n${front.rpc('dispatcher.list')}`);
        await sleep(200);
      }
      log(`phase 2: ${n} node(s) behind Kamailio (load average ${load()})`);
      const idlePct = await idleCpu(nodes);
      log(`  idle (no call up, ${IDLE_SECS} s): ${idlePct.map((x) => `${formatValue(x)} %`).join(' / ')} of a core per node`);
      const setups = await setupSteps(sipp.bin, p, front, nodes);
      const held = await heldSteps(sipp.bin, p, front, nodes);
      results.push({ n, idlePct, setups, heldSteps: held });
    }
    report(p, sqlite!, postgres!, results);
    log(`bench/cluster ran ${((Date.now() - started) / 60_000).toFixed(1)} min; load average at the end ${load()} (other processes on this machine weigh on the figures)`);
  } finally {
    await front?.stop().catch(() => undefined);
    for (const node of cluster.nodes) await node.close().catch(() => undefined);
    await pg?.stop().catch(() => undefined);
  }
}

function report(p: Plan, sqlite: LatencyResult, postgres: LatencyResult, results: NodeCountResult[]): void {
  const rows = [['nodes', 'setups: highest sustained step', 'setups/s', 'p50 ms', 'p99 ms', 'spread', 'held calls', 'CPU ms/call-s per node', 'cluster CPU ms/call-s', 'idle CPU % per node']];
  const best = results.map((r) => ({ r, setup: r.setups.filter((s) => s.sustained).pop(), held: r.heldSteps.filter((s) => s.held).pop() }));
  for (const { r, setup, held } of best) {
    rows.push([
      String(r.n),
      setup ? `${setup.rate} calls/s` : 'none',
      formatValue(setup?.run.setupsPerSec ?? Number.NaN),
      formatValue(quantile(setup?.run.inviteTo200 ?? new Float64Array(), 0.5)),
      formatValue(quantile(setup?.run.inviteTo200 ?? new Float64Array(), 0.99)),
      setup?.spread.join('/') ?? '',
      String(held?.calls ?? 0),
      held?.cpuMsPerCallSec.map(formatValue).join('/') ?? '',
      formatValue(held?.clusterCpuMsPerCallSec ?? Number.NaN),
      r.idlePct.map(formatValue).join('/'),
    ]);
  }
  log(`\n${table(rows)}`);
  log(`  phase 1 INVITE->200 (${sqlite.samples.length} / ${postgres.samples.length} calls): sqlite p50 ${formatValue(quantile(sqlite.samples, 0.5))} p99 ${formatValue(quantile(sqlite.samples, 0.99))} ms; postgres p50 ${formatValue(quantile(postgres.samples, 0.5))} p99 ${formatValue(quantile(postgres.samples, 0.99))} ms; failed calls ${sqlite.failed} / ${postgres.failed}`);

  const figures: Figure[] = [
    { name: 'cluster_invite_200_p50_pg', value: quantile(postgres.samples, 0.5), unit: 'ms', baseline: quantile(sqlite.samples, 0.5), note: `one node on PostgreSQL; baseline: one on SQLite, ${p.latencyRate} calls/s` },
    { name: 'cluster_invite_200_p99_pg', value: quantile(postgres.samples, 0.99), unit: 'ms', baseline: quantile(sqlite.samples, 0.99), note: 'the same calls' },
  ];
  const one = best.find((b) => b.r.n === 1) ?? best[0];
  for (const { r, setup, held } of best) {
    figures.push(
      { name: `cluster_setups_per_sec_${r.n}n`, value: setup?.run.setupsPerSec ?? 0, unit: 'calls/s', baseline: one?.setup?.run.setupsPerSec ?? Number.NaN, note: `through Kamailio, highest sustained step ${setup?.rate ?? 'none'} of ${p.rates.join(',')}; baseline: 1 node` },
      { name: `cluster_calls_held_${r.n}n`, value: held?.calls ?? 0, unit: 'calls', baseline: one?.held?.calls ?? Number.NaN, note: `bridged with RTP both ways through the window, steps ${p.held.join(',')}; baseline: 1 node` },
      { name: `cluster_cpu_per_call_${r.n}n`, value: held?.clusterCpuMsPerCallSec ?? Number.NaN, unit: 'ms/s', baseline: one?.held?.clusterCpuMsPerCallSec ?? Number.NaN, note: `CPU per second of call at ${held?.calls ?? 0} calls, all nodes; per node: ${held?.cpuMsPerCallSec.map(formatValue).join('/') ?? '-'}` },
    );
  }
  printFigures('bench/cluster figures (ratio = value / baseline; latency and CPU: lower is better)', figures.filter((f) => Number.isFinite(f.value) && Number.isFinite(f.baseline)));
  if (sqlite.samples.length === 0 || postgres.samples.length === 0) throw new Error('phase 1 measured no INVITE->200: see the SIPp output above');
  if (best.some((b) => !b.setup)) throw new Error('a node count sustained no setup step: see above');
  if (!one?.held) throw new Error(`one node held no step of ${p.held.join(',')} calls (the baseline of the held and CPU figures): see above`);
}
