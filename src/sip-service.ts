/**
 * Builds the SIP user agent from the configuration and the store (part of the composition
 * root): listeners on sip.host:sip.port (UDP and TCP share the port, also when the OS picks it),
 * TLS when a certificate is configured, the RTP port range, inbound routing over the store.
 */
import { readFileSync } from 'node:fs';
import { createSocket } from 'node:dgram';
import { createServer } from 'node:net';
import { networkInterfaces } from 'node:os';
import type { Config } from './config.ts';
import type { Logger } from './log.ts';
import type { Store } from './store/index.ts';
import { SINGLE_NODE_ROLES, type ClusterRoles } from './store/cluster-roles.ts';
import { PortAllocator } from './media/port-allocator.ts';
import { MediaWorkerPool } from './media/media-worker-pool.ts';
import type { CodecName } from './media/codecs.ts';
import type { DigestAlgorithm } from './sip/digest/index.ts';
import { StoreDirectory } from './bridge/sip-store-directory.ts';
import { StoreRegistrations } from './bridge/sip-store-registrations.ts';
import { registeringTrunksOf, storeOutboundRegistrationState } from './bridge/sip-store-outbound-registrations.ts';
import { WORKER_VOICE_LINK_MODULE } from './bridge/worker-voice-link.ts';
import type { SipTransportListen } from './sip/transport/index.ts';
import { SipUserAgent } from './sip/ua/index.ts';
import { TrunkHealth, OutboundRegistrations } from './sip/ua/index.ts';
import { Counter, Gauge, type Registry } from 'prom-client';

export interface SipService {
  ua: SipUserAgent;
  ports: PortAllocator | MediaWorkerPool;
  /** OPTIONS pings to trunks' outbound hosts; undefined when sip.options_ping_secs is 0. */
  health: TrunkHealth | undefined;
  /** callbridge's own REGISTERs to the outbound hosts of trunks with register: true. */
  registrations: OutboundRegistrations;
  /** The SIP port bound (UDP and TCP). */
  port: number;
  /** The address in our Contact and SDP. */
  advertiseAddress: string;
  /** Drain: 503 to new INVITEs, wait for calls to end up to `deadlineMs`, hang up the rest, close. */
  drainAndClose(deadlineMs: number): Promise<void>;
  close(): Promise<void>;
}

/** RFC 3261 10.2.1.1's usual registration length, when a REGISTER names none. */
const DEFAULT_REGISTER_EXPIRES_SECS = 3600;
/** How often expired REGISTER bindings are deleted. */
const REGISTRATION_SWEEP_MS = 60_000;
/** Longest wait for each carrier's answer to our un-REGISTER when the daemon stops. */
const UNREGISTER_TIMEOUT_MS = 3000;

const isWildcard = (a: string): boolean => a === '0.0.0.0' || a === '::';

/** The address peers can reach: configured, else the bound one, else the first external IPv4/IPv6. */
export function advertiseAddress(config: Config): string {
  if (config.sip.advertise_address !== '') return config.sip.advertise_address;
  if (!isWildcard(config.sip.host)) return config.sip.host;
  const family = config.sip.host === '::' ? 'IPv6' : 'IPv4';
  for (const list of Object.values(networkInterfaces())) {
    for (const i of list ?? []) if (!i.internal && i.family === family) return i.address;
  }
  return family === 'IPv6' ? '::1' : '127.0.0.1';
}

/** A port free for both UDP and TCP on `host` right now (for sip.port 0). */
async function freeDualPort(host: string): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const udp = createSocket(host.includes(':') ? 'udp6' : 'udp4');
    const port = await new Promise<number>((resolve, reject) => {
      udp.once('error', reject);
      udp.bind(0, host, () => resolve(udp.address().port));
    });
    const tcpFree = await new Promise<boolean>((resolve) => {
      const srv = createServer();
      srv.once('error', () => resolve(false));
      srv.listen(port, host, () => srv.close(() => resolve(true)));
    });
    udp.close();
    if (tcpFree) return port;
  }
  throw new Error(`no port free for both UDP and TCP on ${host}`);
}

function list(s: string): string[] {
  return s
    .split(',')
    .map((x) => x.trim())
    .filter((x) => x !== '');
}

/** Prometheus metrics of SIP on the daemon's registry. */
function installSipMetrics(registry: Registry, ua: SipUserAgent, ports: { inUse: number }, store: Store): { trunkUp: Gauge<'trunk_id'>; registerAttempts: Counter<'trunk_id' | 'outcome'> } {
  new Gauge({
    name: 'callbridge_sip_registrations',
    help: 'Unexpired REGISTER bindings of the PBX on each digest trunk (callbridge as its registrar).',
    labelNames: ['trunk_id'] as const,
    registers: [registry],
    async collect() {
      // Read at scrape time: bindings expire without an event, and a trunk with none drops out.
      const counts = await store.registrations.countsByTrunk(Date.now());
      this.reset();
      for (const [trunkId, n] of counts) this.set({ trunk_id: trunkId }, n);
    },
  });
  new Gauge({
    name: 'callbridge_sip_calls_active',
    help: 'SIP calls in progress (ringing or answered), by direction.',
    labelNames: ['direction'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const c of ua.calls) this.inc({ direction: c.direction });
    },
  });
  new Gauge({
    name: 'callbridge_rtp_ports_in_use',
    help: 'RTP/RTCP port pairs allocated.',
    registers: [registry],
    collect() {
      this.set(ports.inUse);
    },
  });
  const outcomes = new Counter({
    name: 'callbridge_sip_call_outcomes_total',
    help: 'Inbound INVITE and outbound dial outcomes (routed, no_route, ambiguous_route, auth_failed, auth_blocked, throttled, agent_inactive, over_limit, draining, dial_busy...) and call ends (ended_<reason>).',
    labelNames: ['outcome'] as const,
    registers: [registry],
  });
  ua.on('outcome', (o) => outcomes.inc({ outcome: o }));
  const ambiguous = new Counter({
    name: 'callbridge_sip_ambiguous_routes_total',
    help: 'Inbound INVITEs for a number that trunks of different organizations claim (docs/sip-trunks.md "Overlapping ACLs"), by the claiming trunks (ids, comma-separated) and action: refused (404) or challenged (401, a digest trunk claims it).',
    labelNames: ['trunk_ids', 'action'] as const,
    registers: [registry],
  });
  ua.on('ambiguous-route', (trunkIds, action) => ambiguous.inc({ trunk_ids: [...trunkIds].sort().join(','), action }));
  new Counter({
    name: 'callbridge_sip_tcp_connections_closed_total',
    help: 'TCP/TLS connections the SIP transport closed to protect itself, by reason: message_timeout (a message not complete sip.tcp_message_timeout_ms after its first byte), tls_handshake_timeout (a TLS handshake not finished sip.tls_handshake_timeout_ms after the accept), refused (over sip.tcp_max_connections_per_source), evicted (at sip.tcp_max_connections), idle.',
    labelNames: ['reason'] as const,
    registers: [registry],
    collect() {
      const s = ua.transport.stats;
      this.reset();
      this.inc({ reason: 'message_timeout' }, s.messageTimeouts);
      this.inc({ reason: 'tls_handshake_timeout' }, s.tlsHandshakeTimeouts);
      this.inc({ reason: 'refused' }, s.connectionsRefused);
      this.inc({ reason: 'evicted' }, s.connectionsEvicted);
      this.inc({ reason: 'idle' }, s.connectionsIdleClosed);
    },
  });
  const trunkUp = new Gauge({ name: 'callbridge_sip_trunk_up', help: "1 when at least one target of the trunk's outbound host (RFC 3263: SRV targets, addresses) answers OPTIONS pings.", labelNames: ['trunk_id'] as const, registers: [registry] });
  const registerAttempts = new Counter({
    name: 'callbridge_sip_outbound_registration_attempts_total',
    help: "callbridge's REGISTERs to trunks' outbound hosts (register: true) by answer: registered, challenged, interval_too_brief, auth_failed, rejected, timeout, unreachable, unregistered.",
    labelNames: ['trunk_id', 'outcome'] as const,
    registers: [registry],
  });
  return { trunkUp, registerAttempts };
}

/** The gauge of live registrations with carriers, read from the client's states at scrape time. */
function installOutboundRegistrationGauge(registry: Registry, registrations: OutboundRegistrations): void {
  new Gauge({
    name: 'callbridge_sip_outbound_registration_up',
    help: "1 while callbridge holds a registration at the trunk's outbound host (register: true), 0 while it is pending or failing.",
    labelNames: ['trunk_id'] as const,
    registers: [registry],
    collect() {
      this.reset();
      for (const [trunkId, s] of registrations.states) this.set({ trunk_id: trunkId }, s.status === 'registered' ? 1 : 0);
    },
  });
}

export interface SipServiceOptions {
  /** Modules each media worker imports before anything else (the benchmarks' instrumentation). */
  mediaWorkerPreload?: readonly URL[];
  /**
   * Which once-per-cluster work this node runs (carrier registrations, the registration sweep);
   * default: all of it (one node).
   */
  roles?: Pick<ClusterRoles, 'shared' | 'holds' | 'watch'>;
}

export async function startSip(config: Config, store: Store, logger: Logger, registry?: Registry, options: SipServiceOptions = {}): Promise<SipService> {
  const log = logger.child({ component: 'sip' });
  const roles = options.roles ?? SINGLE_NODE_ROLES;
  const host = config.sip.host;
  const advertise = advertiseAddress(config);
  const transports = list(config.sip.transports) as ('udp' | 'tcp')[];
  let port = config.sip.port;
  if (port === 0 && transports.length > 1) port = await freeDualPort(host);
  const adv = config.sip.advertise_address !== '' ? { advertise: config.sip.advertise_address } : {};
  const listen: SipTransportListen[] = transports.map((protocol) => ({ protocol, address: host, port, ...adv }));
  if (config.sip.tls_cert !== '') {
    listen.push({
      protocol: 'tls',
      address: host,
      port: config.sip.tls_port,
      tls: { cert: readFileSync(config.sip.tls_cert), key: readFileSync(config.sip.tls_key) },
      ...adv,
    });
  }
  const ports =
    config.rtp.media_threads > 0
      ? new MediaWorkerPool({
          workers: config.rtp.media_threads,
          portMin: config.rtp.port_min,
          portMax: config.rtp.port_max,
          address: config.rtp.address,
          niceness: config.rtp.media_thread_nice === 0 ? null : config.rtp.media_thread_nice,
          realtime: config.rtp.media_thread_realtime,
          youngGenerationMb: config.rtp.media_thread_young_gen_mb,
          preload: options.mediaWorkerPreload ?? [],
          // The bridge's voice-session sockets run beside their calls' media (bridge/worker-voice-link.ts).
          extensions: [WORKER_VOICE_LINK_MODULE],
          logger: log,
        })
      : new PortAllocator({ min: config.rtp.port_min, max: config.rtp.port_max, address: config.rtp.address });
  if (ports instanceof MediaWorkerPool) {
    await ports.ready().catch(async (err: unknown) => {
      await ports.close();
      throw err;
    });
    const realtime = ports.threads.filter((t) => t.realtime > 0).length;
    log.info({ threads: ports.size, nice: config.rtp.media_thread_nice, realtime: config.rtp.media_thread_realtime > 0 ? `${realtime} of ${ports.size} threads SCHED_RR ${config.rtp.media_thread_realtime}` : 'off' }, 'RTP media on worker threads');
  }
  const directory = new StoreDirectory(store, { logger: log });
  // ACLs wider than the API accepts today (older data): they still route; say so once at start.
  const aclLimit = { v4: config.sip.acl_min_prefix_v4, v6: config.sip.acl_min_prefix_v6 };
  for (const { trunkId, cidrs } of await directory.wideAclTrunks(aclLimit)) {
    log.warn(
      { trunkId, cidrs, minPrefixV4: aclLimit.v4, minPrefixV6: aclLimit.v6 },
      `SIP trunk ${trunkId} has inbound_acl entries wider than sip.acl_min_prefix_v4 / sip.acl_min_prefix_v6 allow (${cidrs.join(', ')}): they still admit calls, but the API would refuse them now; narrow them`,
    );
  }
  const ua = new SipUserAgent({
    listen,
    transport: {
      messageTimeoutMs: config.sip.tcp_message_timeout_ms,
      tlsHandshakeTimeoutMs: config.sip.tls_handshake_timeout_ms,
      maxConnections: config.sip.tcp_max_connections,
      maxConnectionsPerSource: config.sip.tcp_max_connections_per_source,
      trustedProxies: list(config.sip.trusted_proxies),
      // Outgoing TLS verifies the far end (default on); sip.tls_ca names the CAs to trust.
      ...(config.sip.tls_ca !== '' ? { outboundTls: { ca: readFileSync(config.sip.tls_ca), rejectUnauthorized: true } } : {}),
    },
    directory,
    ports,
    mediaAddress: advertise,
    realm: config.sip.realm,
    ...(config.sip.digest_secret !== '' ? { digestSecret: config.sip.digest_secret } : {}),
    digestAlgorithms: list(config.sip.digest_algorithms) as DigestAlgorithm[],
    authRateLimit: { maxFailures: Math.max(1, config.sip.auth_max_failures), blockMs: config.sip.auth_block_secs * 1000 },
    challengeRateLimit: config.sip.challenge_rate > 0 ? { ratePerSecond: config.sip.challenge_rate, burst: config.sip.challenge_burst } : false,
    codecs: list(config.sip.codecs) as CodecName[],
    mediaTimeoutMs: config.rtp.media_timeout_secs * 1000,
    ringTimeoutMs: config.sip.ring_timeout_secs * 1000,
    // T2 stays 4 s unless T1 outgrows it (RFC 3261 17.1.2.2 needs T2 >= T1).
    timers: { t1: config.sip.t1_ms, t2: Math.max(4000, config.sip.t1_ms) },
    sessionTimer: { interval: config.sip.session_expires_secs, minSE: config.sip.min_se_secs },
    dns: {
      servers: list(config.sip.dns_servers),
      timeoutMs: Math.max(1, config.sip.dns_timeout_ms),
      tries: Math.max(1, config.sip.dns_tries),
      cacheSecs: config.sip.dns_cache_secs,
    },
    failover: { timeoutMs: Math.max(1, config.sip.failover_timeout_ms), deadTargetSecs: config.sip.dead_target_secs },
    registrar: {
      store: new StoreRegistrations(store),
      minExpiresSecs: config.sip.register_min_expires_secs,
      maxExpiresSecs: config.sip.register_max_expires_secs,
      defaultExpiresSecs: Math.min(DEFAULT_REGISTER_EXPIRES_SECS, config.sip.register_max_expires_secs),
    },
    logger: log,
  });
  await ua.start();
  // Expired bindings are ignored on read already; the sweep only keeps the table small. One node
  // of a cluster sweeps (the others would delete the same rows).
  const sweep = setInterval(() => {
    if (!roles.holds('sip_registration_sweep')) return;
    store.registrations.sweep(Date.now()).catch((err: unknown) => log.warn({ err }, 'sweeping expired SIP registrations failed'));
  }, REGISTRATION_SWEEP_MS);
  sweep.unref();
  const metrics = registry ? installSipMetrics(registry, ua, ports, store) : undefined;
  let health: TrunkHealth | undefined;
  if (config.sip.options_ping_secs > 0) {
    health = new TrunkHealth({
      layer: ua.layer,
      trunks: () => store.sipTrunks.listWithOutboundHost(),
      intervalMs: config.sip.options_ping_secs * 1000,
      from: `<sip:callbridge@${advertise.includes(':') ? `[${advertise}]` : advertise}>`,
      userAgent: 'callbridge',
      logger: log,
      targets: ua.targets,
      onStatus: (id, up) => metrics?.trunkUp.set({ trunk_id: id }, up ? 1 : 0),
    });
    await health.start();
  }
  let stateWrites = Promise.resolve();
  const registrations = new OutboundRegistrations({
    layer: ua.layer,
    transport: ua.transport,
    trunks: () => registeringTrunksOf(store),
    expiresSecs: config.sip.outbound_register_expires_secs,
    retry: { initialMs: config.sip.outbound_register_retry_min_secs * 1000, maxMs: config.sip.outbound_register_retry_max_secs * 1000 },
    unregisterTimeoutMs: UNREGISTER_TIMEOUT_MS,
    targets: ua.targets,
    failoverTimeoutMs: Math.max(1, config.sip.failover_timeout_ms),
    headers: [['User-Agent', 'callbridge']],
    onState: (trunkId, state) => {
      // One write after another, in the order the states came: a later state must not be
      // overwritten by an earlier one still on its way (a store with several connections).
      stateWrites = stateWrites.then(() =>
        storeOutboundRegistrationState(store, trunkId, state).catch((err: unknown) => log.warn({ err, trunkId }, 'keeping the outbound registration state failed')),
      );
    },
    onAttempt: (trunkId, outcome) => metrics?.registerAttempts.inc({ trunk_id: trunkId, outcome }),
    logger: log,
    // One node of a cluster registers: the carrier keeps one binding per trunk, and it is the
    // holder's (docs/sip-registration-client.md, "In a cluster").
    active: roles.holds('carrier_registration'),
  });
  roles.watch('carrier_registration', (held) => void registrations.setActive(held));
  if (registry) installOutboundRegistrationGauge(registry, registrations);
  await registrations.start();
  const bound = ua.endpoints.find((e) => e.protocol !== 'tls')?.port ?? port;
  log.info({ endpoints: ua.endpoints.map((e) => `${e.protocol}:${e.address}:${e.port}`), advertise, rtp: `${config.rtp.port_min}-${config.rtp.port_max}` }, 'SIP listening');

  return {
    ua,
    ports,
    health,
    registrations,
    port: bound,
    advertiseAddress: advertise,
    async drainAndClose(deadlineMs) {
      ua.drain(Math.max(1, Math.ceil(deadlineMs / 1000)));
      // Best effort and at once: carriers stop sending calls to a daemon that is going away. Not
      // in a cluster: the carrier would have no binding until the next holder re-registers, so
      // the binding stays and the next holder replaces it (main.ts hands the role over first).
      const unregistering = registrations.close({ unregister: !roles.shared });
      const until = Date.now() + deadlineMs;
      if (ua.calls.length > 0) log.info({ calls: ua.calls.length, deadlineMs }, 'draining: waiting for calls to end');
      while (ua.calls.length > 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
      if (ua.calls.length > 0) log.warn({ calls: ua.calls.length }, 'drain deadline reached: hanging up the remaining calls');
      await unregistering;
      // The states the un-registering reported reach the store before it closes.
      await stateWrites;
      health?.close();
      clearInterval(sweep);
      await ua.close();
      if (ports instanceof MediaWorkerPool) await ports.close();
    },
    close: async () => {
      await registrations.close({ unregister: false });
      await stateWrites;
      health?.close();
      clearInterval(sweep);
      await ua.close();
      if (ports instanceof MediaWorkerPool) await ports.close();
    },
  };
}
