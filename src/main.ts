/**
 * Composition root: load config, open the store, make sure an API key exists, build the agent
 * runtime factory and the call bridge (its sessions in this daemon or on bridge.upstream_url),
 * start SIP with the bridge as its call handler, then HTTP with the voice WebSocket (carrier
 * client, metrics and recording are wired in here too). SIGTERM/SIGINT drain:
 * /readyz turns 503, new INVITEs and new voice connections get 503, calls and voice sessions in
 * progress get drain.deadline_secs, in-flight requests finish, the store closes.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Config } from './config.ts';
import type { Logger } from './log.ts';
import { describeStoreBackend, openStore, SQLITE_DRIVER_PACKAGE, type Store } from './store/index.ts';
import { StoreProbe } from './store/store-probe.ts';
import { NodeHeartbeat } from './store/node-heartbeat.ts';
import { Gauge } from 'prom-client';
import { clusterRolesOver } from './store/cluster-roles.ts';
import { CallBridge } from './bridge/call-bridge.ts';
import { LocalSessionOpener } from './bridge/session-opener.ts';
import { UpstreamSessionOpener } from './bridge/upstream-session-opener.ts';
import { createBridgeMetrics } from './bridge/bridge-metrics.ts';
import { CallRecorder } from './bridge/call-recorder.ts';
import { initResamplers } from './media/resampler.ts';
import { scheduleProcessThreads } from './media/thread-scheduling.ts';
import { warnOnDefaultMallocArenas } from './media/malloc-arenas.ts';
import { createAgentRuntimeFactory, prepareAgentRuntime, runtimeDepsFromConfig } from './agent/runtime-factory.ts';
import type { RuntimeDeps } from './agent/runtime/index.ts';
import { createAgentMetrics } from './agent/agent-metrics.ts';
import { VoiceCatalog } from './agent/voice-catalog/catalog.ts';
import { describeSessionProviders } from './agent/session-providers.ts';
import { buildApp } from './api/app.ts';
import { readinessDetail } from './api/routes/health.ts';
import { placeDial, resolveDial } from './api/routes/dial.ts';
import { OutboundDialer, type PlaceCall } from './outbound/dialer.ts';
import { createRegistry, installClusterRoleGauge } from './api/metrics.ts';
import { WebhookDeliverer } from './events/webhook-deliverer.ts';
import { createWebhookMetrics } from './events/webhook-metrics.ts';
import { createCarrierClient } from './telco/carrier-client.ts';
import { createToolCallSender } from './events/tool-calls.ts';
import type { ToolCallTargets } from './events/targets.ts';
import { StreamTokens } from './telco/twilio-stream-tokens.ts';
import { startSip, type SipService } from './sip-service.ts';
import { loadTokenSecret, SessionTokens } from './session/tokens.ts';
import type { SessionRuntimeFactory } from './session/runtime-contract.ts';
import { SessionSpans } from './session/session-spans.ts';
import { startTracing } from './tracing.ts';
import { TurnAudioReports } from './session/turn-audio.ts';
import { TurnTimelineWriter } from './store/turn-timeline-writer.ts';
import { createTurnLatencyMetrics } from './agent/turn-latency-metrics.ts';
import { TurnTraceObserver } from './agent/turn-trace-observer.ts';
import type { TurnTimelineObserver } from './domain/turn-latency.ts';

export interface Daemon {
  app: FastifyInstance;
  store: Store;
  /** The SIP user agent; undefined when sip.enabled is false. */
  sip: SipService | undefined;
  /** Base URL of the REST API as bound (port resolved when 0 was asked). */
  url: string;
  /** Bridges routed inbound calls to voice sessions (the SIP user agent's call handler). */
  bridge: CallBridge;
  /** Stops taking work, lets in-flight requests finish, closes everything. Idempotent. */
  close(): Promise<void>;
}

/** What the caller of startDaemon may inject besides the config. */
export interface DaemonOptions {
  /**
   * The conversation runtime behind /v1/connection; default: the agent runtime built from the
   * configuration (src/agent/runtime-factory.ts). `null`: none (sessions then end at once with
   * reason error and close 1011 "no runtime configured"; tests of the socket layer alone).
   */
  runtimeFactory?: SessionRuntimeFactory | null;
  /**
   * Replaces parts of the agent runtime's dependencies built from the configuration (the
   * benchmarks' fake-backed TTS, pacing), keeping the rest of the composition: the observers of
   * turn timelines, the traces. Ignored when `runtimeFactory` is given.
   */
  runtimeOverrides?: Partial<RuntimeDeps>;
  /** Tuning of the /v1/connection server (tests shorten the ping interval). */
  sessionServer?: { pingIntervalMs?: number; maxBufferedBytes?: number };
  /** Modules each media worker imports before anything else (the benchmarks' instrumentation). */
  mediaWorkerPreload?: readonly URL[];
  /**
   * Tuning of the carrier path (tests shorten them): the outbound dials' watchdog slack beyond the
   * ring timeout, and the voice webhook's stream token lifetime (and so its slot reservations').
   */
  carrier?: { watchdogSlackMs?: number; streamTokenTtlMs?: number };
  /**
   * Where tool calls of sessions whose client does not answer them (phone calls) are sent: the
   * organizations' webhook endpoints. Default: the store's (POST /v1/webhooks, the endpoint named
   * by the tool node's webhook_id or subscribed to tool.call); a test may inject its own.
   */
  toolCallTargets?: ToolCallTargets;
  /**
   * Told of every agent turn's timeline once complete (docs/latency.md), after the store writer
   * and the metrics: the traces' exporter, a test's probe.
   */
  turnTimelineObservers?: readonly TurnTimelineObserver[];
}

/** No organization has a tool.call endpoint. */

export const INITIAL_KEY_FILE = 'initial-api-key';
/** How often the holder of session_token_sweep deletes expired stream grants. */
const STREAM_GRANT_SWEEP_MS = 60_000;

/**
 * First start on an empty data directory: create an organization and key, write the key to a
 * 0600 file and print it once on stdout. Logs say where it is, never what it is.
 */
export async function ensureInitialKey(store: Store, config: Config, logger: Logger, print: (line: string) => void): Promise<void> {
  if ((await store.organizations.activeKeyCount()) > 0) return;
  // Checked again under a lock: nodes starting together on one database create one key between them.
  const created = await store.organizations.createInitialKey('default');
  if (created === undefined) return;
  const { org, key } = created;
  const path = join(config.data_dir, INITIAL_KEY_FILE);
  writeFileSync(path, key + '\n', { mode: 0o600 });
  print(`callbridge: created organization "${org.name}" (${org.id}); its API key is:\n${key}\n(also written to ${path}; it is not shown again)`);
  logger.info({ orgId: org.id, keyFile: path }, 'first start: created organization and API key');
}

export async function startDaemon(
  config: Config,
  logger: Logger,
  print: (line: string) => void = (l) => process.stdout.write(l + '\n'),
  options: DaemonOptions = {},
): Promise<Daemon> {
  // Before anything makes a span: with an OTLP endpoint configured, traces go there (docs/tracing.md).
  const tracing = await startTracing(logger);
  const sessionSpans = new SessionSpans();
  scheduleProcessThreads({ main: config.rtp.main_thread_realtime, media: config.rtp.media_thread_realtime, mediaThreads: config.rtp.media_threads }, logger);
  warnOnDefaultMallocArenas(config.rtp.media_threads, logger);
  const registry = createRegistry();
  const agentMetrics = createAgentMetrics(registry);
  // Providers are built (and misconfigured vendors refused) before anything listens.
  // Tool calls find their endpoint in the store's webhook endpoints (opened below, before any
  // session can start); a test may inject its own.
  const opened: { store?: Store } = {};
  const toolTargets: ToolCallTargets = options.toolCallTargets ?? { forToolCall: (orgId, webhookId) => opened.store?.webhooks.forToolCall(orgId, webhookId) ?? Promise.resolve(undefined) };
  const toolWebhook = createToolCallSender({
    targets: toolTargets,
    policy: { allowPrivate: config.webhooks.allow_private_destinations },
    timeoutMs: config.session.tool_timeout_secs * 1000,
    log: logger,
  });
  // Each agent turn's timeline goes to the store (the call's latency field), the metrics and any
  // observer of the caller's; a phone call's first RTP packet of a turn comes from the bridge.
  const turnAudio = new TurnAudioReports();
  const timelineWriter = new TurnTimelineWriter(
    () => opened.store?.turnTimelines,
    (err, turns) => logger.warn({ err, turns }, 'storing agent turn timelines failed: dropped'),
  );
  // With tracing on, each turn also becomes spans under its session's (turn-trace-observer.ts).
  const turnTraces = tracing !== undefined ? [new TurnTraceObserver((callId) => sessionSpans.contextOf(callId))] : [];
  const turnTimelineObservers = [timelineWriter, createTurnLatencyMetrics(registry), ...turnTraces, ...(options.turnTimelineObservers ?? [])];
  const runtimeFactory =
    options.runtimeFactory === undefined
      ? createAgentRuntimeFactory(runtimeDepsFromConfig(config, logger, { toolWebhook, turnTimelineObservers, turnAudio, ...options.runtimeOverrides }, agentMetrics), describeSessionProviders(config), sessionSpans)
      : (options.runtimeFactory ?? undefined);
  if (options.runtimeFactory === undefined) await prepareAgentRuntime(config, logger);
  // The bridge's media paths resample (8 <-> 24 kHz) whatever runs the sessions.
  else await initResamplers();
  const backend = { url: config.store.url, poolSize: config.store.pool_size, nodeId: config.cluster.node_id, publicUrl: config.http.public_url };
  const store = await openStore(config.data_dir, config.security.encryption_key, {
    ...backend,
    onIdleError: (err) => logger.warn({ err: err.message }, 'store: an idle database connection failed; the pool opens another'),
  });
  opened.store = store;
  // PostgreSQL is a server that can go away: /readyz says so (SQLite is a file: never probed).
  const storeProbe = store.client.dialect === 'postgres' ? new StoreProbe(store.client) : undefined;
  // This node's lease (docs/store-postgres.md "Several nodes"), written before any call is taken: its slots left by a
  // previous run are freed first, and from now on it looks for dead nodes at every heartbeat.
  const clusterNodes = new Gauge({ name: 'callbridge_cluster_nodes', help: 'Nodes with a live lease in the store, as seen at this node\'s last heartbeat.', registers: [registry] });
  const heartbeat = new NodeHeartbeat(store, {
    nodeId: config.cluster.node_id,
    heartbeatMs: config.cluster.heartbeat_secs * 1000,
    nodeTimeoutMs: config.cluster.node_timeout_secs * 1000,
    sipAddress: config.sip.enabled ? `${config.sip.host}:${config.sip.port}` : '',
    log: logger.child({ component: 'cluster' }),
    onNodes: (n) => clusterNodes.set(n),
  });
  try {
    await heartbeat.start();
  } catch (err) {
    await store.close();
    await tracing?.shutdown();
    throw err;
  }
  // What runs once per cluster (carrier registrations, cleanups) runs here while this node holds
  // its role: always on SQLite; on PostgreSQL, taken from the first try when no node has it.
  const roles = clusterRolesOver(store.client, { pollMs: config.cluster.singleton_poll_secs * 1000, logger });
  await roles.start();
  installClusterRoleGauge(registry, roles);
  let listening = false;
  let draining = false;
  let sip: SipService | undefined;
  const tokens = new SessionTokens(loadTokenSecret(config));
  // The bridge connects to our own /v1/connection, whose URL is known once HTTP listens.
  let url = '';
  const carrier = createCarrierClient(config);
  // The media streams' one-time tokens: issued by the voice webhook and by outbound carrier dials,
  // kept in the store (any node sharing it may take the stream).
  const streamTokens = new StreamTokens(store.streamGrants, options.carrier?.streamTokenTtlMs !== undefined ? { ttlMs: options.carrier.streamTokenTtlMs } : {});
  const bridge = new CallBridge({
    store,
    logger,
    ua: () => sip?.ua,
    sessions: config.bridge.upstream_url ? new UpstreamSessionOpener({ baseUrl: config.bridge.upstream_url, apiKey: config.bridge.upstream_api_key, timeoutMs: config.bridge.upstream_timeout_ms, store, logger: logger.child({ component: 'bridge' }) }) : new LocalSessionOpener(store, tokens, () => url),
    limits: { maxCalls: config.bridge.max_calls, maxCallsPerTrunk: config.bridge.max_calls_per_trunk, maxCallsPerOrg: config.bridge.max_calls_per_org },
    nodeId: config.cluster.node_id,
    metrics: createBridgeMetrics(registry),
    recorder: config.bridge.recording
      ? (id) => new CallRecorder({ dir: join(config.data_dir, 'recordings'), callId: id, sampleRate: config.bridge.recording_sample_rate, logger: logger.child({ component: 'recorder', sessionId: id }) })
      : undefined,
    carrier: { client: carrier, tokens: streamTokens, publicUrl: config.http.public_url, ringTimeoutSecs: config.sip.ring_timeout_secs, watchdogSlackMs: config.telco.dial_watchdog_slack_secs * 1000, ...options.carrier },
    turnAudio,
  });
  // Vendors' voice lists are fetched in the background from here on (GET /v1/voices reads the cache).
  const voiceCatalog = new VoiceCatalog({ config, logger });
  voiceCatalog.start();
  const dialer = config.sip.enabled ? (req: Parameters<typeof bridge.dial>[0]) => bridge.dial(req) : undefined;
  const carrierDialer = (req: Parameters<typeof bridge.dialCarrier>[0]) => bridge.dialCarrier(req);
  const app = await buildApp({
    config,
    voiceCatalog,
    store,
    logger,
    carrier,
    tokens,
    runtimeFactory,
    dialer,
    carrierStreams: { handle: (stream) => bridge.handleMediaStream(stream), callLimitReached: (orgId, callSid) => bridge.callLimitReached(orgId, callSid), callStatus: (update) => bridge.carrierStatus(update) },
    streamTokens,
    carrierDialer,
    liveCalls: () => bridge.liveCalls(),
    sessionServer: { ...options.sessionServer, runsExpirySweep: () => roles.holds('session_token_sweep'), spans: sessionSpans },
    readiness: () => {
      const sipUp = sip === undefined ? !config.sip.enabled : sip.ua.listening;
      const storeDown = storeProbe?.failure;
      const ready = listening && sipUp && storeDown === undefined;
      return { ready, draining, started: listening, reason: draining ? 'draining' : ready ? undefined : !listening ? 'starting' : !sipUp ? 'SIP not listening' : `store unreachable: ${storeDown}` };
    },
  }, registry).catch(async (err: unknown) => {
    // The roles' connection would keep the process alive (and the roles taken) otherwise.
    voiceCatalog.stop();
    await heartbeat.stop();
    await roles.close();
    await store.close();
    await tracing?.shutdown();
    throw err;
  });
  try {
    if (config.sip.enabled) sip = await startSip(config, store, logger, registry, { roles, ...(options.mediaWorkerPreload ? { mediaWorkerPreload: options.mediaWorkerPreload } : {}) });
    await app.listen({ host: config.http.host, port: config.http.port });
    // The first start's key only once the daemon listens: a start that fails before (a busy
    // port) has printed and written nothing, and the next start that works creates the key.
    await ensureInitialKey(store, config, logger, print);
  } catch (err) {
    await app.close().catch(() => undefined);
    voiceCatalog.stop();
    storeProbe?.stop();
    await sip?.close();
    await heartbeat.stop();
    await roles.close();
    await store.close();
    await tracing?.shutdown();
    throw err;
  }
  storeProbe?.start();
  // Expired stream grants are deleted by the node holding session_token_sweep.
  const grantSweep = setInterval(() => {
    if (!roles.holds('session_token_sweep')) return;
    streamTokens.sweep().catch((err: unknown) => logger.error({ err }, 'stream grant sweep failed'));
  }, STREAM_GRANT_SWEEP_MS);
  grantSweep.unref();
  // The webhook outbox (docs/webhooks.md): every node delivers what is due, a lease per row
  // deciding who sends it; stopped after the drain, so the drained calls' ends go out first.
  const webhooks = new WebhookDeliverer({
    deliveries: store.webhookDeliveries,
    nodeId: config.cluster.node_id,
    policy: { allowPrivate: config.webhooks.allow_private_destinations },
    timeoutMs: config.webhooks.timeout_ms,
    retryBaseMs: config.webhooks.retry_base_ms,
    retryMaxMs: config.webhooks.retry_max_hours * 3600 * 1000,
    pollIntervalMs: config.webhooks.poll_interval_ms,
    maxInFlight: Math.max(1, config.webhooks.max_in_flight),
    retentionMs: config.webhooks.retention_hours * 3600 * 1000,
    metrics: createWebhookMetrics(registry, () => store.webhookDeliveries.pendingCount()),
    logger: logger.child({ component: 'webhooks' }),
  });
  webhooks.start();
  // The outbound dialer (docs/outbound.md): every node works the open runs, the store deciding
  // which node dials which contact; its calls are placed exactly as POST /v1/agents/{id}/dial's.
  const dialLog = logger.child({ component: 'outbound' });
  const placeCall: PlaceCall = async (d) => {
    const query = { number: d.number, ...(d.sipTrunkId !== null ? { sipTrunkId: d.sipTrunkId } : {}), ...(d.callerId !== null ? { callerId: d.callerId } : {}) };
    const dial = await resolveDial(store, d.orgId, d.agentId, query, d.variables);
    if (d.machineDetection !== undefined) dial.machineDetection = d.machineDetection;
    return placeDial({ store, config, dialer, carrierDialer }, dial, dialLog);
  };
  const outbound = config.outbound.enabled
    ? new OutboundDialer({ runs: store.outboundRuns, placeCall, nodeId: config.cluster.node_id, logger: dialLog, tickMs: config.outbound.tick_ms, leaseMs: config.outbound.lease_secs * 1000, slotRetryMs: config.outbound.slot_retry_secs * 1000 })
    : undefined;
  listening = true;
  const addr = app.server.address();
  const port = typeof addr === 'object' && addr ? addr.port : config.http.port;
  const host = config.http.host.includes(':') ? `[${config.http.host}]` : config.http.host;
  url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`;
  logger.info({ url, dataDir: config.data_dir, nodeId: config.cluster.node_id, ...describeStoreBackend(config.data_dir, backend), region: config.region.self, node: process.versions.node, sqliteDriver: SQLITE_DRIVER_PACKAGE, mallocArenaMax: process.env.MALLOC_ARENA_MAX || 'glibc default' }, 'callbridge listening');
  const sttDetail = readinessDetail(config);
  if (sttDetail !== undefined) logger.warn(sttDetail);
  // Every routed inbound call becomes a voice session of its agent, through our own
  // /v1/connection (the bridge is a client of the public protocol). The bridge's call limits
  // are checked before the INVITE rings (503 Retry-After / 486, no 18x).
  sip?.ua.onInboundCall((call) => bridge.handleInbound(call), { admit: (route) => bridge.admit(route), lapsed: (route) => bridge.admissionLapsed(route) });
  // Outbound runs start being dialled once the bridge can reach our own /v1/connection (url is set).
  outbound?.start();

  let closing: Promise<void> | undefined;
  return {
    app,
    store,
    sip,
    url,
    bridge,
    close() {
      closing ??= (async () => {
        draining = true;
        // No new outbound dials from here on; calls already placed drain with the others.
        await outbound?.close();
        // Dials still ringing at the carrier are cancelled there: nobody would take their streams.
        bridge.closeCarrierDials();
        // Sharing the database: the once-per-cluster work goes to another node now, not after
        // the drain (the carrier keeps our binding until the next holder replaces it). Alone
        // (SQLite): the roles end with the store, after the drain's un-REGISTERs.
        const handingOver = roles.shared ? roles.close() : Promise.resolve();
        // New INVITEs and voice connections get 503; calls and voice sessions in progress get up
        // to drain.deadline_secs together; app.close() then ends the sessions left (1001).
        await Promise.all([sip?.drainAndClose(config.drain.deadline_secs * 1000), app.voiceSessions.drain(config.drain.deadline_secs * 1000)]);
        await app.close();
        voiceCatalog.stop();
        // The bridge's last record writes (ends, recordings) go in before the store closes.
        await bridge.recordsWritten();
        // The ended sessions' last turn timelines too.
        await timelineWriter.drain();
        // Attempts under way end (webhooks.timeout_ms at most); what is not delivered stays in the store.
        await webhooks.stop();
        clearInterval(grantSweep);
        // The calls have ended: this node leaves the lease table (nothing for a survivor to take over).
        await heartbeat.stop().catch((err: unknown) => logger.warn({ err }, 'cluster: deleting this node\'s lease failed'));
        storeProbe?.stop();
        await handingOver;
        await roles.close();
        await store.close();
        // Last: the drained calls' spans are flushed to the collector.
        await tracing?.shutdown();
        logger.info('callbridge stopped');
      })();
      return closing;
    },
  };
}
