/**
 * Preloaded into each media worker of bench/bridge's daemon (DaemonOptions.mediaWorkerPreload):
 * installs the probe on the worker's thread and answers the main thread's requests for its
 * figures over a BroadcastChannel (bench/bridge-server.ts merges them into one window).
 */
import { performance } from 'node:perf_hooks';
import { BroadcastChannel, workerData } from 'node:worker_threads';
import { installBridgeProbe, PROBE_CHANNEL } from './bridge-probe.ts';

const index = (workerData as { index: number }).index;
const probe = installBridgeProbe(Number(process.env.BENCH_BRIDGE_RTP_MIN ?? 30000));
const channel = new BroadcastChannel(PROBE_CHANNEL);
channel.unref();
channel.onmessage = (event) => {
  const m = (event as MessageEvent).data as { t: string; id: number };
  if (m.t === 'take') channel.postMessage({ t: 'snapshot', id: m.id, index, snap: probe.take() });
  if (m.t === 'hello?') channel.postMessage({ t: 'hello', index, timeOrigin: performance.timeOrigin });
};
channel.postMessage({ t: 'hello', index, timeOrigin: performance.timeOrigin });
