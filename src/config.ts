/**
 * Every setting of the daemon: its default, its environment variable and its doc string.
 * Sources in order of precedence: env vars > the JSON file named by CALLBRIDGE_CONFIG > defaults.
 * A bad value stops start-up with a message that names the setting (convict's validate).
 */
import convict from 'convict';
import { isIP } from 'node:net';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { LANGUAGES as LANGUAGE_CODES } from './domain/agent.ts';
import { canonicalVoiceProvider, VOICE_PROVIDER_NAMES } from './domain/agent-aliases.ts';

export const REGIONS = ['us-central1', 'northamerica-northeast1'] as const;
export type Region = (typeof REGIONS)[number];

export interface LlmProviderConfig {
  /** Prefix of the catalog identifiers, e.g. `openai` in `openai/gpt-4o-mini`. */
  name: string;
  /** Wire protocol of the provider; `echo` is the built-in test and demo model. */
  type: 'echo' | 'openai' | 'anthropic';
  base_url?: string;
  api_key?: string;
  models: string[];
}

/** The TTS adapter types (src/agent/providers/tts/index.ts builds them). */
export const TTS_TYPES = ['local', 'openai', 'stream', 'cartesia', 'fish', 'minimax', 'hume'] as const;

/** How one voice provider (provider_1..provider_6) is served. */
export interface TtsProviderConfig {
  /** local: the embedded eSpeak-NG voice; openai: an OpenAI-compatible /audio/speech endpoint; stream: a streaming WebSocket TTS (ElevenLabs stream-input protocol); cartesia: Cartesia's TTS WebSocket; fish: Fish Audio's live TTS WebSocket; minimax: MiniMax's T2A WebSocket; hume: Hume's Octave streaming TTS (HTTP). */
  type: (typeof TTS_TYPES)[number];
  base_url?: string;
  api_key?: string;
  model?: string;
}

export const TTS_PROVIDER_KEYS = ['provider_1', 'provider_2', 'provider_3', 'provider_4', 'provider_5', 'provider_6'] as const;
/** One entry of tts.providers: which voice provider it serves, and how. */
export type TtsSlotConfig = TtsProviderConfig & { voice_provider: (typeof TTS_PROVIDER_KEYS)[number] };

/** tts.providers as a map of every voice provider; the ones not listed use the local voice. */
export function ttsProvidersBySlot(entries: readonly TtsSlotConfig[]): Record<(typeof TTS_PROVIDER_KEYS)[number], TtsProviderConfig> {
  const map = Object.fromEntries(TTS_PROVIDER_KEYS.map((k) => [k, { type: 'local' }])) as Record<(typeof TTS_PROVIDER_KEYS)[number], TtsProviderConfig>;
  for (const { voice_provider, ...rest } of entries) map[voice_provider] = rest;
  return map;
}

/** Lists given in env vars are JSON (convict passes them on as strings). */
const parseJsonEnv = (v: unknown): unknown => {
  if (typeof v !== 'string') return v;
  try {
    return JSON.parse(v);
  } catch {
    return v; // validate() then names the setting and says what it must be
  }
};

export interface VoiceCatalogEntry {
  id: string;
  name: string;
  description?: string;
  /** In voices.catalog: optional and unused; in GET /v1/voices: the voice provider serving it. */
  provider: string;
  languages: string[];
  preview_url?: string;
}

/**
 * Whole numbers from env vars, strictly: convict's own `port` and `nat` take parseInt of the text,
 * so `CALLBRIDGE_SIP_PORT=5x` would listen on port 5 and `18481.7` on 18481. Text that is not
 * all decimal digits stays text here, and validation then stops the start naming the setting.
 */
const strictWholeNumber = (value: unknown): unknown => (typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : value);
convict.addFormat({
  name: 'port',
  coerce: strictWholeNumber,
  validate(value: unknown) {
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 65535) throw new Error('must be a whole number from 0 to 65535');
  },
});
convict.addFormat({
  name: 'nat',
  coerce: strictWholeNumber,
  validate(value: unknown) {
    if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new Error('must be a whole number, 0 or more');
  },
});

/** Custom formats: convict validates every value once at load and names the setting on failure. */
convict.addFormat({
  name: 'host',
  validate(value: unknown) {
    if (typeof value !== 'string' || value.length === 0) throw new Error('must be a host name or IP address');
    if (isIP(value) === 0 && !/^[A-Za-z0-9.-]+$/.test(value)) throw new Error('must be a host name or IP address');
  },
});
convict.addFormat({
  name: 'url-or-empty',
  validate(value: unknown) {
    if (value === '') return;
    if (typeof value !== 'string') throw new Error('must be a URL string');
    let u: URL;
    try {
      u = new URL(value);
    } catch {
      throw new Error('must be an absolute http(s) URL or empty');
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error('must be an http(s) URL');
  },
});
/**
 * The store's database: empty (the embedded SQLite in data_dir) or a PostgreSQL URL. The value
 * may hold a password, so no message here repeats it (the setting is sensitive too: convict
 * leaves sensitive values out of its own messages).
 */
convict.addFormat({
  name: 'store-url',
  validate(value: unknown) {
    if (value === '') return;
    const expected = 'must be empty (the embedded SQLite database in data_dir) or a postgres:// or postgresql:// URL';
    if (typeof value !== 'string') throw new Error(expected);
    let u: URL;
    try {
      u = new URL(value);
    } catch {
      throw new Error(`${expected} (this one cannot be parsed as a URL)`);
    }
    if (u.protocol !== 'postgres:' && u.protocol !== 'postgresql:') throw new Error(`${expected} (this one is ${u.protocol.slice(0, 20)})`);
  },
});
convict.addFormat({
  name: 'llm-providers',
  coerce: parseJsonEnv,
  validate(value: unknown) {
    if (!Array.isArray(value)) throw new Error('must be an array of providers');
    const names = new Set<string>();
    for (const [i, p] of value.entries()) {
      const where = `provider #${i}`;
      if (typeof p !== 'object' || p === null) throw new Error(`${where} must be an object`);
      const o = p as Record<string, unknown>;
      if (typeof o.name !== 'string' || !/^[a-z0-9][a-z0-9_.-]*$/.test(o.name)) {
        throw new Error(`${where}: name must match ^[a-z0-9][a-z0-9_.-]*$`);
      }
      if (names.has(o.name)) throw new Error(`${where}: duplicate name ${o.name}`);
      names.add(o.name);
      if (o.type !== 'echo' && o.type !== 'openai' && o.type !== 'anthropic') {
        throw new Error(`${where} (${o.name}): type must be echo, openai or anthropic`);
      }
      if (o.type !== 'echo' && typeof o.base_url !== 'string') {
        throw new Error(`${where} (${o.name}): base_url is required for type ${String(o.type)}`);
      }
      if (!Array.isArray(o.models) || o.models.length === 0 || !o.models.every((m) => typeof m === 'string' && m.length > 0 && !m.includes(' '))) {
        throw new Error(`${where} (${o.name}): models must be a non-empty array of model names`);
      }
    }
  },
});
/**
 * Booleans that mean what they say: convict's own Boolean turns every string but "false" into
 * true, so CALLBRIDGE_BRIDGE_RECORDING=0 would switch recording ON. Here true/1/yes/on and
 * false/0/no/off (any case) are accepted, anything else stops start-up naming the setting.
 */
convict.addFormat({
  name: 'strict-boolean',
  coerce: (v: unknown): unknown => {
    if (typeof v !== 'string') return v;
    const t = v.trim().toLowerCase();
    if (['true', '1', 'yes', 'on'].includes(t)) return true;
    if (['false', '0', 'no', 'off'].includes(t)) return false;
    return v;
  },
  validate(value: unknown) {
    if (typeof value !== 'boolean') throw new Error('must be true or false (also 1/0, yes/no, on/off)');
  },
});
convict.addFormat({
  name: 'telco-outbound-trunks',
  coerce: parseJsonEnv,
  validate(value: unknown) {
    if (!Array.isArray(value)) throw new Error('must be an array of { account_sid, sip_trunk_id }');
    for (const [i, e] of value.entries()) {
      const o = e as Record<string, unknown>;
      if (typeof o?.account_sid !== 'string' || o.account_sid === '') throw new Error(`entry #${i}: account_sid must be a non-empty string`);
      if (typeof o.sip_trunk_id !== 'string' || !/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(o.sip_trunk_id)) throw new Error(`entry #${i} (${o.account_sid}): sip_trunk_id must be a uuid`);
    }
  },
});
convict.addFormat({
  name: 'tts-providers',
  coerce: parseJsonEnv,
  validate(value: unknown) {
    if (!Array.isArray(value)) throw new Error('must be an array of { voice_provider, type, base_url, api_key, model }');
    const seen = new Set<string>();
    for (const [i, p] of value.entries()) {
      const o = p as Record<string, unknown>;
      const where = `entry #${i}`;
      if (typeof o !== 'object' || o === null) throw new Error(`${where} must be an object`);
      if (canonicalVoiceProvider(String(o.voice_provider)) === undefined) throw new Error(`${where}: voice_provider must be one of ${VOICE_PROVIDER_NAMES.join(', ')}`);
      const slot = canonicalVoiceProvider(String(o.voice_provider))!;
      if (seen.has(slot)) throw new Error(`${where}: ${slot} (${String(o.voice_provider)}) is listed twice`);
      seen.add(slot);
      if (!(TTS_TYPES as readonly unknown[]).includes(o.type)) throw new Error(`${where} (${String(o.voice_provider)}): type must be one of ${TTS_TYPES.join(', ')}`);
      if (o.type !== 'local' && (typeof o.base_url !== 'string' || !/^(https?|wss?):\/\//.test(o.base_url))) throw new Error(`${where} (${String(o.voice_provider)}): base_url (http(s):// or ws(s)://) is required for type ${String(o.type)}`);
    }
  },
});
convict.addFormat({
  name: 'voice-catalog',
  coerce: parseJsonEnv,
  validate(value: unknown) {
    if (!Array.isArray(value)) throw new Error('must be an array of voices');
    for (const [i, v] of value.entries()) {
      const o = v as Record<string, unknown>;
      if (typeof o?.id !== 'string' || typeof o.name !== 'string' || !Array.isArray(o.languages)) {
        throw new Error(`voice #${i} needs string id, name and an array of languages`);
      }
      // provider is optional and no longer used (the local voices are listed under every voice provider the local voice serves)
      if (o.provider !== undefined && canonicalVoiceProvider(String(o.provider)) === undefined) throw new Error(`voice #${i}: provider must be one of ${VOICE_PROVIDER_NAMES.join(', ')}`);
    }
  },
});
convict.addFormat({
  name: 'secret-or-empty',
  validate(value: unknown) {
    if (value === '') return;
    if (typeof value !== 'string' || Buffer.from(value, 'base64').length !== 32) {
      throw new Error('must be empty (generated in the data directory) or 32 bytes in base64');
    }
  },
});

const NODE_ID = /^[A-Za-z0-9._-]{1,64}$/;
const NODE_ID_RULE = 'must be 1-64 characters of A-Z a-z 0-9 . _ -';

convict.addFormat({
  name: 'node-id',
  validate(value: unknown) {
    if (value === '') return; // the host name, checked once it is known (loadConfig)
    if (typeof value !== 'string' || !NODE_ID.test(value)) throw new Error(NODE_ID_RULE);
  },
});

const schema = {
  data_dir: {
    doc: 'Directory of the SQLite database, the generated secrets and the initial API key.',
    format: String,
    default: './data',
    env: 'CALLBRIDGE_DATA_DIR',
  },
  store: {
    url: {
      doc: 'Database of the store. Empty = the embedded SQLite database in data_dir (one node). postgres://user:password@host:port/database = PostgreSQL, which several nodes may share (docs/store-postgres.md); security.encryption_key and security.token_secret must then be set, the same on every node. A secret (it may hold the password): never logged.',
      format: 'store-url',
      default: '',
      env: 'CALLBRIDGE_STORE_URL',
      sensitive: true,
    },
    pool_size: { doc: 'PostgreSQL store: connections this node may open to the database (unused with SQLite).', format: 'nat', default: 10, env: 'CALLBRIDGE_STORE_POOL_SIZE' },
  },
  cluster: {
    node_id: {
      doc: 'This node\'s name among the nodes sharing the store (docs/store-postgres.md "Several nodes"): 1-64 characters of A-Z a-z 0-9 . _ -, unique per node. Empty = the machine\'s host name.',
      format: 'node-id',
      default: '',
      env: 'CALLBRIDGE_CLUSTER_NODE_ID',
    },
    heartbeat_secs: { doc: 'Seconds between this node\'s lease heartbeats (and its look for dead nodes).', format: 'nat', default: 5, env: 'CALLBRIDGE_CLUSTER_HEARTBEAT_SECS' },
    node_timeout_secs: {
      doc: 'A node whose lease has not been refreshed for this many seconds is dead: a survivor ends its calls (failed, node_lost) and frees its call slots. Must exceed 2 x cluster.heartbeat_secs.',
      format: 'nat',
      default: 20,
      env: 'CALLBRIDGE_CLUSTER_NODE_TIMEOUT_SECS',
    },
    singleton_poll_secs: {
      doc: 'PostgreSQL store: how often a node tries to take the once-per-cluster work (carrier registrations, cleanups) that another node holds, and a node holding it checks its database connection; a dead holder is replaced within about this long (docs/store-postgres.md, "Once per cluster"). Unused with SQLite (one node runs everything).',
      format: 'nat',
      default: 5,
      env: 'CALLBRIDGE_CLUSTER_SINGLETON_POLL_SECS',
    },
  },
  log_level: {
    doc: 'pino log level.',
    format: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    default: 'info',
    env: 'CALLBRIDGE_LOG_LEVEL',
  },
  http: {
    host: { doc: 'Address the REST API and WebSocket server listen on.', format: 'host', default: '0.0.0.0', env: 'CALLBRIDGE_HTTP_HOST' },
    port: { doc: 'Port of the REST API (0 = chosen by the OS).', format: 'port', default: 8080, env: 'CALLBRIDGE_HTTP_PORT' },
    body_limit: { doc: 'Largest request body in bytes; larger bodies get 413.', format: 'nat', default: 1024 * 1024, env: 'CALLBRIDGE_HTTP_BODY_LIMIT' },
    request_timeout_ms: {
      doc: 'A request (header section and body) must arrive in full within this many ms of its first byte, or it is answered 408 and its connection closed: a client trickling its body cannot hold a connection. WebSockets, once upgraded, are not concerned. At least 100.',
      format: 'nat',
      default: 15000,
      env: 'CALLBRIDGE_HTTP_REQUEST_TIMEOUT_MS',
    },
    max_connections_per_source: {
      doc: 'Most HTTP connections (WebSockets included) one source address may hold; one over it is answered 429 and closed. Connections from this host to itself (the bridge\'s voice sockets, a reverse proxy on the same host) are not counted. 0 = no limit.',
      format: 'nat',
      default: 256,
      env: 'CALLBRIDGE_HTTP_MAX_CONNECTIONS_PER_SOURCE',
    },
    public_url: {
      doc: 'Externally visible base URL of this daemon (used to build ws_url, and recording.ready\'s recording_url: docs/webhooks.md); empty = derived from the request (recording_url: the path alone).',
      format: 'url-or-empty',
      default: '',
      env: 'CALLBRIDGE_PUBLIC_URL',
    },
    fair_share_ms: {
      doc: 'REST request work (auth, SQLite reads, JSON parsing, handlers, serialization) runs in event-loop turns: a turn ends once it has used this many milliseconds (the request it is running finishes first), the requests left wait for the next turn, and SIP signaling, voice sessions and /readyz, which share the main thread, are served in between (docs/api-fair-share.md). /healthz, /readyz, /metrics and the voice WebSocket are never held. 0 = no turns: requests run as they arrive.',
      format: 'nat',
      default: 1,
      env: 'CALLBRIDGE_HTTP_FAIR_SHARE_MS',
    },
  },
  sip: {
    host: { doc: 'Address SIP listens on (UDP and TCP).', format: 'host', default: '0.0.0.0', env: 'CALLBRIDGE_SIP_HOST' },
    port: { doc: 'SIP port (UDP and TCP; 0 = chosen by the OS, the same for both).', format: 'port', default: 5060, env: 'CALLBRIDGE_SIP_PORT' },
    transports: { doc: 'Comma-separated transports on sip.port: udp, tcp.', format: String, default: 'udp,tcp', env: 'CALLBRIDGE_SIP_TRANSPORTS' },
    enabled: { doc: 'Start the SIP user agent (false: REST API only).', format: 'strict-boolean', default: true, env: 'CALLBRIDGE_SIP_ENABLED' },
    tls_port: { doc: 'SIP over TLS port, used when tls_cert and tls_key are set.', format: 'port', default: 5061, env: 'CALLBRIDGE_SIP_TLS_PORT' },
    tls_cert: { doc: 'Path of the PEM certificate (chain) for SIP over TLS; empty = no TLS listener.', format: String, default: '', env: 'CALLBRIDGE_SIP_TLS_CERT' },
    tls_key: { doc: 'Path of the PEM private key for SIP over TLS.', format: String, default: '', env: 'CALLBRIDGE_SIP_TLS_KEY' },
    tls_ca: {
      doc: "Path of a PEM file of CA certificates that outgoing SIP over TLS verifies the far end's certificate against (carriers, PBXs, SRTP trunks); empty = Node's built-in CA store. The far end is always verified.",
      format: String,
      default: '',
      env: 'CALLBRIDGE_SIP_TLS_CA',
    },
    advertise_address: {
      doc: 'Address put in Via/Contact and SDP for peers to reach us (public address behind NAT); empty = sip.host, or the first non-internal interface when sip.host is a wildcard.',
      format: String,
      default: '',
      env: 'CALLBRIDGE_SIP_ADVERTISE_ADDRESS',
    },
    realm: { doc: 'Digest realm of inbound challenges.', format: String, default: 'callbridge', env: 'CALLBRIDGE_SIP_REALM' },
    digest_secret: {
      doc: 'Key of the digest nonce HMAC (16+ chars); empty = random per start (nonces then do not survive a restart).',
      format: String,
      default: '',
      env: 'CALLBRIDGE_SIP_DIGEST_SECRET',
      sensitive: true,
    },
    digest_algorithms: {
      doc: 'Digest algorithms challenged with, most preferred first (SHA-256, MD5). Default MD5 only: common SIP stacks (libre/baresip 1.0) abort on a SHA-256 challenge; use SHA-256,MD5 when every PBX supports RFC 8760.',
      format: String,
      default: 'MD5',
      env: 'CALLBRIDGE_SIP_DIGEST_ALGORITHMS',
    },
    auth_max_failures: { doc: 'Failed authentications from one source within a minute that block it.', format: 'nat', default: 10, env: 'CALLBRIDGE_SIP_AUTH_MAX_FAILURES' },
    auth_block_secs: { doc: 'How long a source is blocked after too many failed authentications.', format: 'nat', default: 300, env: 'CALLBRIDGE_SIP_AUTH_BLOCK_SECS' },
    challenge_rate: {
      doc: 'Digest challenges (401) and other refusals that cost the sender nothing (403 to a blocked source, 400 to an over-long caller identity) per second answered to one source address (IPv6: its /64); over it INVITEs are dropped on UDP (the sender retransmits) and answered 503 with Retry-After on TCP/TLS. 0 = no limit.',
      format: 'nat',
      default: 20,
      env: 'CALLBRIDGE_SIP_CHALLENGE_RATE',
    },
    challenge_burst: { doc: 'How many challenges one source may get at once before sip.challenge_rate applies (token bucket size).', format: 'nat', default: 40, env: 'CALLBRIDGE_SIP_CHALLENGE_BURST' },
    acl_min_prefix_v4: {
      doc: 'Widest IPv4 CIDR a SIP trunk\'s inbound_acl may hold (the smallest prefix length, 1..32); wider ones are refused with 400. /0 is never accepted.',
      format: 'nat',
      default: 8,
      env: 'CALLBRIDGE_SIP_ACL_MIN_PREFIX_V4',
    },
    acl_min_prefix_v6: {
      doc: 'Widest IPv6 CIDR a SIP trunk\'s inbound_acl may hold (the smallest prefix length, 1..128); wider ones are refused with 400. /0 is never accepted.',
      format: 'nat',
      default: 32,
      env: 'CALLBRIDGE_SIP_ACL_MIN_PREFIX_V6',
    },
    codecs: { doc: 'Codecs accepted and offered, in preference order (PCMU, PCMA, opus).', format: String, default: 'PCMU,PCMA,opus', env: 'CALLBRIDGE_SIP_CODECS' },
    session_expires_secs: { doc: 'RFC 4028 session interval we ask for and grant.', format: 'nat', default: 1800, env: 'CALLBRIDGE_SIP_SESSION_EXPIRES_SECS' },
    min_se_secs: { doc: 'RFC 4028 Min-SE: shorter session intervals are refused with 422.', format: 'nat', default: 90, env: 'CALLBRIDGE_SIP_MIN_SE_SECS' },
    ring_timeout_secs: { doc: 'Outbound calls not answered within this are cancelled (no answer): SIP dials, and the Timeout of dials through the carrier\'s call API.', format: 'nat', default: 60, env: 'CALLBRIDGE_SIP_RING_TIMEOUT_SECS' },
    t1_ms: {
      doc: 'RFC 3261 T1 (round-trip estimate) in ms: retransmissions start at T1 and transactions time out at 64*T1. Raise on long-haul links; the RFC default is 500.',
      format: 'nat',
      default: 500,
      env: 'CALLBRIDGE_SIP_T1_MS',
    },
    options_ping_secs: { doc: "OPTIONS pings to trunks' outbound hosts every this many seconds; 0 = off.", format: 'nat', default: 0, env: 'CALLBRIDGE_SIP_OPTIONS_PING_SECS' },
    dns_servers: {
      doc: "DNS servers for RFC 3263 resolution (NAPTR, SRV, A/AAAA) of trunks' outbound hosts, comma-separated, each an IP address with an optional port (192.0.2.53, 192.0.2.53:5353, [2001:db8::53]:53); empty = the system's (/etc/resolv.conf).",
      format: String,
      default: '',
      env: 'CALLBRIDGE_SIP_DNS_SERVERS',
    },
    dns_timeout_ms: { doc: 'How long one DNS query waits for an answer before it is retried (sip.dns_tries) or the resolution fails. At least 1.', format: 'nat', default: 2000, env: 'CALLBRIDGE_SIP_DNS_TIMEOUT_MS' },
    dns_tries: { doc: 'Tries per DNS query and server. At least 1.', format: 'nat', default: 2, env: 'CALLBRIDGE_SIP_DNS_TRIES' },
    dns_cache_secs: {
      doc: 'How long NAPTR and SRV answers (and "no such record" answers) are kept; Node does not report their TTL. A/AAAA answers are kept for their own TTL.',
      format: 'nat',
      default: 60,
      env: 'CALLBRIDGE_SIP_DNS_CACHE_SECS',
    },
    failover_timeout_ms: {
      doc: "An outbound INVITE or REGISTER with no response at all (not even 100 Trying) from a trunk's target within this many ms goes to the next target (RFC 3263 4.3). Default 4000: a live server answers within 200 ms and UDP retransmits at 0.5, 1.5 and 3.5 s; Timer B's 32 s is too long for a waiting caller. At least 1.",
      format: 'nat',
      default: 4000,
      env: 'CALLBRIDGE_SIP_FAILOVER_TIMEOUT_MS',
    },
    dead_target_secs: {
      doc: "A trunk target that failed (no response, connection refused, 503) is tried last for this many seconds; 0 = not remembered.",
      format: 'nat',
      default: 60,
      env: 'CALLBRIDGE_SIP_DEAD_TARGET_SECS',
    },
    register_min_expires_secs: {
      doc: 'Shortest registration a PBX on a digest trunk may ask for (RFC 3261 10.3): a shorter non-zero expiry is answered 423 Interval Too Brief with this as Min-Expires. At least 1.',
      format: 'nat',
      default: 60,
      env: 'CALLBRIDGE_SIP_REGISTER_MIN_EXPIRES_SECS',
    },
    register_max_expires_secs: {
      doc: 'Longest registration granted to a PBX on a digest trunk; a longer expiry is shortened to this (the 200 OK says so). At least sip.register_min_expires_secs.',
      format: 'nat',
      default: 3600,
      env: 'CALLBRIDGE_SIP_REGISTER_MAX_EXPIRES_SECS',
    },
    outbound_register_expires_secs: {
      doc: "Expiry callbridge asks for when it registers with a trunk's outbound_host (register: true); the carrier's granted expiry is honoured and refreshed well before it ends. At least 1.",
      format: 'nat',
      default: 3600,
      env: 'CALLBRIDGE_SIP_OUTBOUND_REGISTER_EXPIRES_SECS',
    },
    outbound_register_retry_min_secs: {
      doc: 'First back-off after a failed registration with a carrier; it doubles per failure (with jitter) up to sip.outbound_register_retry_max_secs. At least 1.',
      format: 'nat',
      default: 5,
      env: 'CALLBRIDGE_SIP_OUTBOUND_REGISTER_RETRY_MIN_SECS',
    },
    outbound_register_retry_max_secs: {
      doc: 'Longest back-off between failed registrations with a carrier. At least sip.outbound_register_retry_min_secs.',
      format: 'nat',
      default: 300,
      env: 'CALLBRIDGE_SIP_OUTBOUND_REGISTER_RETRY_MAX_SECS',
    },
    tcp_message_timeout_ms: {
      doc: 'A TCP/TLS message (header section and body) must arrive within this many ms of its first byte, or the connection is closed: a sender trickling bytes cannot hold a connection past it (slowloris). An accepted connection that sends no byte within it of the accept (of its TLS handshake\'s end) is closed too. At least 100.',
      format: 'nat',
      default: 10000,
      env: 'CALLBRIDGE_SIP_TCP_MESSAGE_TIMEOUT_MS',
    },
    tls_handshake_timeout_ms: {
      doc: 'An incoming SIP over TLS connection whose handshake is not finished this many ms after the TCP accept is closed, whatever it sent meanwhile (nothing, part of a ClientHello, a ClientHello and then silence): until then it holds one of its source\'s sip.tcp_max_connections_per_source slots. At least 100.',
      format: 'nat',
      default: 10000,
      env: 'CALLBRIDGE_SIP_TLS_HANDSHAKE_TIMEOUT_MS',
    },
    tcp_max_connections: {
      doc: 'Most TCP/TLS connections held at once; at the cap, connections that never completed a message are closed first, then the least recently active.',
      format: 'nat',
      default: 1000,
      env: 'CALLBRIDGE_SIP_TCP_MAX_CONNECTIONS',
    },
    tcp_max_connections_per_source: {
      doc: 'Most TCP/TLS connections one source address may hold; a connection over it is closed at once. 0 = no limit.',
      format: 'nat',
      default: 32,
      env: 'CALLBRIDGE_SIP_TCP_MAX_CONNECTIONS_PER_SOURCE',
    },
    trusted_proxies: {
      doc: "Comma-separated addresses or CIDRs of proxies whose requests are answered by the top Via's maddr/received/sent-by (RFC 3261 18.2.2); others are answered at the packet's source address and port. Empty = none.",
      format: String,
      default: '',
      env: 'CALLBRIDGE_SIP_TRUSTED_PROXIES',
    },
  },
  rtp: {
    port_min: { doc: 'Lowest RTP port.', format: 'port', default: 20000, env: 'CALLBRIDGE_RTP_PORT_MIN' },
    port_max: { doc: 'Highest RTP port.', format: 'port', default: 30000, env: 'CALLBRIDGE_RTP_PORT_MAX' },
    address: { doc: 'Address RTP sockets bind to.', format: 'host', default: '0.0.0.0', env: 'CALLBRIDGE_RTP_ADDRESS' },
    media_timeout_secs: { doc: 'A call with no RTP from the peer for this long is hung up (not while on hold); 0 = never.', format: 'nat', default: 30, env: 'CALLBRIDGE_RTP_MEDIA_TIMEOUT_SECS' },
    media_threads: {
      doc: 'Worker threads that carry the calls\' media (RTP sockets, jitter buffers, codecs, resampling, 20 ms pacing, and the bridge\'s socket to each call\'s voice session), each with its own slice of the port range; 0 = all on the main thread with SIP and REST (docs/media-workers.md).',
      format: 'nat',
      default: 2,
      env: 'CALLBRIDGE_RTP_MEDIA_THREADS',
    },
    media_thread_nice: {
      doc: 'Scheduling priority (nice, -20..19) of the media threads, as telephony servers run their media; below 0 needs root or CAP_SYS_NICE (refused: a warning, default priority). 0 = unchanged.',
      format: 'int',
      default: 0,
      env: 'CALLBRIDGE_RTP_MEDIA_THREAD_NICE',
    },
    media_thread_realtime: {
      doc: 'Real-time priority (SCHED_RR 1-99, set with chrt) of the media threads, as Asterisk -p / FreeSWITCH -rp run their media; needs root or CAP_SYS_NICE (refused: a warning, normal policy). 0 = off. On a busy machine it keeps the 20 ms sends on time at the expense of everything else on it.',
      format: 'int',
      default: 0,
      env: 'CALLBRIDGE_RTP_MEDIA_THREAD_REALTIME',
    },
    media_thread_young_gen_mb: {
      doc: 'Cap of V8\'s young generation in each media thread\'s heap, MB (the worker\'s resourceLimits.maxYoungGenerationSizeMb). V8 grows a thread\'s new space under bursts of allocation and keeps it committed, so a media thread\'s memory follows the busiest moment it has seen. The default, 48, is what Node 20\'s V8 uses on its own (a new space of up to 32 MB), the size bench/soak and bench/bridge measured; Node 24\'s V8 would let it grow to 128 MB per thread. Lower bounds memory further at the cost of more frequent (short) collections; 0 = the running Node\'s V8 default.',
      format: 'nat',
      default: 48,
      env: 'CALLBRIDGE_RTP_MEDIA_THREAD_YOUNG_GEN_MB',
    },
    main_thread_realtime: {
      doc: 'Real-time priority (SCHED_RR 1-99) of the main thread: SIP, REST and the voice sessions served here (the bridged calls\' agents by default). Below rtp.media_thread_realtime, so media still comes first; with only the media threads real-time, the sessions wait behind them on a busy machine and the agent\'s audio runs dry. Needs root or CAP_SYS_NICE (refused: a warning). 0 = off.',
      format: 'int',
      default: 0,
      env: 'CALLBRIDGE_RTP_MAIN_THREAD_REALTIME',
    },
  },
  region: {
    self: { doc: 'The region this daemon serves (x-service-region naming it is served here).', format: [...REGIONS], default: 'us-central1', env: 'CALLBRIDGE_REGION' },
    peer_us_central1: {
      doc: 'Base URL of the us-central1 deployment; requests pinned there are proxied to it. Empty = 503 for such requests.',
      format: 'url-or-empty',
      default: '',
      env: 'CALLBRIDGE_REGION_US_CENTRAL1_URL',
    },
    peer_northamerica_northeast1: {
      doc: 'Base URL of the northamerica-northeast1 deployment; requests pinned there are proxied to it. Empty = 503 for such requests.',
      format: 'url-or-empty',
      default: '',
      env: 'CALLBRIDGE_REGION_NORTHAMERICA_NORTHEAST1_URL',
    },
    proxy_timeout_ms: { doc: 'Time limit of a request proxied to a peer region.', format: 'nat', default: 15000, env: 'CALLBRIDGE_REGION_PROXY_TIMEOUT_MS' },
  },
  llm: {
    providers: {
      doc: 'Language-model providers; GET /v1/llms lists provider/model for each. `local/echo` is the built-in deterministic test and demo model.',
      format: 'llm-providers',
      default: [{ name: 'local', type: 'echo', models: ['echo'] }] as LlmProviderConfig[],
      env: 'CALLBRIDGE_LLM_PROVIDERS',
    },
    first_token_timeout_ms: {
      doc: 'A primary model that has not streamed its first token within this is abandoned for the agent\'s fallback_llm.',
      format: 'nat',
      default: 3000,
      env: 'CALLBRIDGE_LLM_FIRST_TOKEN_TIMEOUT_MS',
    },
  },
  stt: {
    provider: {
      doc: 'Speech-to-text: `local` (built in, no service: marks each utterance, does not recognize words), `openai` (an OpenAI-compatible /audio/transcriptions endpoint, e.g. a local whisper server) or `stream` (a streaming WebSocket recognizer speaking the Deepgram live protocol, with interim results and keyterms).',
      format: ['local', 'openai', 'stream'],
      default: 'local',
      env: 'CALLBRIDGE_STT_PROVIDER',
    },
    base_url: { doc: 'Base URL of the STT service (openai: http(s)://host/v1; stream: ws(s)://host).', format: String, default: '', env: 'CALLBRIDGE_STT_BASE_URL' },
    api_key: { doc: 'API key of the STT service.', format: String, default: '', env: 'CALLBRIDGE_STT_API_KEY', sensitive: true },
    model: { doc: 'STT model name (openai: e.g. whisper-1; stream: e.g. nova-3).', format: String, default: '', env: 'CALLBRIDGE_STT_MODEL' },
  },
  tts: {
    providers: {
      doc: 'What serves each voice_settings.provider: a list of { voice_provider: provider_1..provider_6 (or the vendor name: elevenlabs, openai, cartesia, hume, minimax, fish), type: local | openai | stream | cartesia | fish | minimax | hume, base_url, api_key, model }. A voice provider not listed is not configured (agents cannot use it: 400), except agent_defaults.voice_provider, which then uses the embedded local voice.',
      format: 'tts-providers',
      default: [] as TtsSlotConfig[],
      env: 'CALLBRIDGE_TTS_PROVIDERS',
    },
  },
  bridge: {
    max_calls: {
      doc: 'Most calls bridged at once (inbound and outbound); an INVITE over it gets 503 with Retry-After, a dial request 429. 0 = no limit.',
      format: 'nat',
      default: 200,
      env: 'CALLBRIDGE_BRIDGE_MAX_CALLS',
    },
    max_calls_per_trunk: {
      doc: 'Most calls bridged at once through one SIP trunk, counted across every node sharing the store; an INVITE over it gets 486 Busy Here, a dial request 429. 0 = no limit.',
      format: 'nat',
      default: 0,
      env: 'CALLBRIDGE_BRIDGE_MAX_CALLS_PER_TRUNK',
    },
    max_calls_per_org: {
      doc: 'Most calls bridged at once for one organization, counted across every node sharing the store; an INVITE over it gets 486 Busy Here, a dial request 429, a carrier voice webhook a busy Reject. 0 = no limit.',
      format: 'nat',
      default: 0,
      env: 'CALLBRIDGE_BRIDGE_MAX_CALLS_PER_ORG',
    },
    upstream_url: {
      doc: 'Base URL (http(s)) of the voice server the bridge opens its sessions on: POST <url>/v1/session-token, then the WebSocket <url>/v1/connection. Empty = this daemon (in-process, no HTTP hop). Agents are looked up by the same id there (docs/bridge.md).',
      format: 'url-or-empty',
      default: '',
      env: 'CALLBRIDGE_BRIDGE_UPSTREAM_URL',
    },
    upstream_api_key: {
      doc: 'API key sent as `Authorization: Bearer` to bridge.upstream_url (an organization key of the upstream server); required when upstream_url is set.',
      format: String,
      default: '',
      env: 'CALLBRIDGE_BRIDGE_UPSTREAM_API_KEY',
      sensitive: true,
    },
    upstream_timeout_ms: {
      doc: 'Time limit of the session-token request to bridge.upstream_url; a call whose session is not issued within it is refused with 503.',
      format: 'nat',
      default: 5000,
      env: 'CALLBRIDGE_BRIDGE_UPSTREAM_TIMEOUT_MS',
    },
    recording: {
      doc: 'Record every bridged call (caller left, agent right) as a stereo WAV in <data_dir>/recordings, served at GET /v1/calls/{id}/recording. Off by default: recordings are personal data. The env var takes true or false.',
      format: 'strict-boolean',
      default: false,
      env: 'CALLBRIDGE_BRIDGE_RECORDING',
    },
    recording_sample_rate: {
      doc: 'Sample rate of call recordings (stereo PCM16): 8000 (phone band, 1.92 MB per minute), 16000 (wideband, 3.84 MB per minute) or 24000 (the voice protocol\'s rate, 5.76 MB per minute).',
      format: [8000, 16000, 24000],
      default: 16000,
      env: 'CALLBRIDGE_BRIDGE_RECORDING_SAMPLE_RATE',
    },
  },
  session: {
    tool_timeout_secs: {
      doc: 'How long the agent waits for a client tool\'s tool_call_output before telling the model the tool timed out.',
      format: 'nat',
      default: 10,
      env: 'CALLBRIDGE_SESSION_TOOL_TIMEOUT_SECS',
    },
  },
  voices: {
    catalog: {
      doc: 'The embedded local voices ({ id, name, description, languages }): GET /v1/voices lists them under every voice provider the local voice serves (agent_defaults.voice_provider when tts.providers does not name it, and tts.providers entries of type local), and an agent on such a provider must use one of these ids. Vendors\' voices are fetched from the vendors (docs/agent-runtime.md "Voice catalog"). An entry\'s provider, if given, is not used.',
      format: 'voice-catalog',
      default: [
        { id: 'local-en-1', name: 'Local English', description: 'Embedded local voice (no external service).', provider: 'provider_1', languages: ['en'] },
        { id: 'local-multi-1', name: 'Local Multilingual', description: 'Embedded local voice, many languages.', provider: 'provider_1', languages: ['multi', 'en', 'es', 'fr', 'de', 'it', 'pt'] },
      ] as VoiceCatalogEntry[],
      env: 'CALLBRIDGE_VOICE_CATALOG',
    },
    refresh_secs: {
      doc: 'How often each configured vendor\'s voice list is fetched again in the background (GET /v1/voices and the voice check of agents read the cached list). A failed fetch keeps the last good list and is retried within 30 s.',
      format: 'nat',
      default: 900,
      env: 'CALLBRIDGE_VOICES_REFRESH_SECS',
    },
    first_fetch_wait_ms: {
      doc: 'How long a request (GET /v1/voices, an agent\'s voice check) may wait for a vendor\'s first voice-list fetch after start; later requests never wait.',
      format: 'nat',
      default: 3000,
      env: 'CALLBRIDGE_VOICES_FIRST_FETCH_WAIT_MS',
    },
    fetch_timeout_ms: {
      doc: 'Time limit of one voice-list fetch from a vendor (all its pages).',
      format: 'nat',
      default: 10000,
      env: 'CALLBRIDGE_VOICES_FETCH_TIMEOUT_MS',
    },
  },
  agent_defaults: {
    status: { doc: 'Status of a new agent.', format: ['active', 'inactive'], default: 'active' },
    llm: { doc: 'Primary model of a new agent (must be in the catalog).', format: String, default: 'local/echo', env: 'CALLBRIDGE_DEFAULT_LLM' },
    fallback_llm: { doc: 'Fallback model of a new agent (must be in the catalog).', format: String, default: 'local/echo', env: 'CALLBRIDGE_DEFAULT_FALLBACK_LLM' },
    prompt: { doc: 'Prompt of a new agent.', format: String, default: 'You are a helpful voice assistant. Keep answers short.' },
    first_message: { doc: 'First message of a new agent.', format: String, default: 'Hello! How can I help you today?' },
    first_message_interruption_time: { doc: 'Seconds during which the first message can be interrupted.', format: Number, default: 0 },
    default_language: { doc: 'Language of a new agent.', format: String, default: 'en' },
    summarize_calls: { doc: 'Whether new agents summarize calls.', format: 'strict-boolean', default: false },
    enable_first_message_outbound: { doc: 'Whether new agents play the first message on outbound calls.', format: 'strict-boolean', default: true },
    keyterms: { doc: 'Keyterms of a new agent when none are sent.', format: Array, default: [] as string[] },
    voice_id: { doc: 'Voice id of a new agent; while the local voice serves agent_defaults.voice_provider, one of voices.catalog (checked at start).', format: String, default: 'local-en-1' },
    voice_provider: { doc: 'Voice provider of a new agent: provider_1..provider_6, or the service\'s vendor name (elevenlabs, openai, cartesia, hume, minimax, fish).', format: [...VOICE_PROVIDER_NAMES], default: 'provider_1' },
    vad_start_secs: { doc: 'vad_settings.start_secs of a new agent.', format: Number, default: 0.2 },
    vad_stop_secs: { doc: 'vad_settings.stop_secs of a new agent.', format: Number, default: 0.8 },
    vad_silence_timeout_secs: { doc: 'vad_settings.silence_timeout_secs of a new agent.', format: Number, default: 10 },
    noise_enabled: { doc: 'noise_cancel_settings.enabled of a new agent.', format: 'strict-boolean', default: false },
    noise_level: { doc: 'noise_cancel_settings.level of a new agent.', format: Number, default: 50 },
    default_timeout: { doc: 'timeout_settings.default_timeout of a new agent, seconds.', format: 'nat', default: 1800 },
    timeout_action: { doc: 'timeout_settings.timeout_action of a new agent.', format: ['end_call', 'transfer_call'], default: 'end_call' },
    silence_counter: { doc: 'timeout_settings.silence_counter of a new agent.', format: 'nat', default: 2 },
    silence_timeout_action: { doc: 'timeout_settings.silence_timeout_action of a new agent.', format: ['end_call', 'transfer_call'], default: 'end_call' },
  },
  limits: {
    max_default_timeout: { doc: 'Upper bound of timeout_settings.default_timeout, seconds (= the longest call).', format: 'nat', default: 7200, env: 'CALLBRIDGE_MAX_DEFAULT_TIMEOUT' },
    max_keyterms: { doc: 'Most keyterms an agent may have.', format: 'nat', default: 100 },
    max_keyterm_length: { doc: 'Longest keyterm, characters.', format: 'nat', default: 100 },
    max_prompt_length: { doc: 'Longest prompt or first_message, characters.', format: 'nat', default: 100_000 },
    max_name_length: { doc: 'Longest name or label, characters.', format: 'nat', default: 200 },
    max_page_size: { doc: 'Largest `limit` of a paginated list.', format: 'nat', default: 500 },
  },
  security: {
    token_secret: {
      doc: 'HS256 secret of session tokens, 32 bytes base64. Empty = generated once into <data_dir>/token-secret (embedded SQLite store only: required with store.url).',
      format: 'secret-or-empty',
      default: '',
      env: 'CALLBRIDGE_TOKEN_SECRET',
      sensitive: true,
    },
    encryption_key: {
      doc: 'AES-256-GCM key for passwords and carrier tokens at rest, 32 bytes base64. Empty = generated once into <data_dir>/encryption-key (embedded SQLite store only: required with store.url).',
      format: 'secret-or-empty',
      default: '',
      env: 'CALLBRIDGE_ENCRYPTION_KEY',
      sensitive: true,
    },
  },
  telco: {
    api_base_url: {
      doc: 'Base URL of the carrier REST API: number import (Accounts/{sid}/IncomingPhoneNumbers.json) and calls without SIP (Accounts/{sid}/Calls.json: outbound dials, hang-up, transfer).',
      format: 'url-or-empty',
      default: 'https://api.twilio.com',
      env: 'CALLBRIDGE_TELCO_API_BASE_URL',
    },
    timeout_ms: { doc: 'Time limit of one carrier API request.', format: 'nat', default: 10000, env: 'CALLBRIDGE_TELCO_TIMEOUT_MS' },
    dial_watchdog_slack_secs: {
      doc: 'A carrier dial (Calls.json) that has neither streamed nor ended this long after its ring timeout (sip.ring_timeout_secs) is ended at the carrier and in its record (carrier_timeout): the carrier\'s final status callback was lost. Its stream token is valid for the ring timeout plus this.',
      format: 'nat',
      default: 30,
      env: 'CALLBRIDGE_TELCO_DIAL_WATCHDOG_SLACK_SECS',
    },
    outbound_trunks: {
      doc: 'Outbound calls placed from an imported carrier number (dial without sipTrunkId) whose account is listed here go through that SIP trunk of the carrier: a list of { account_sid, sip_trunk_id }. Accounts not listed: through the carrier\'s own call API (Calls.json, needs http.public_url; else such dials answer 503).',
      format: 'telco-outbound-trunks',
      default: [] as Array<{ account_sid: string; sip_trunk_id: string }>,
      env: 'CALLBRIDGE_TELCO_OUTBOUND_TRUNKS',
    },
    set_voice_url: {
      doc: "On import, when http.public_url is set, point the number's voice webhook at this daemon through the carrier API (VoiceUrl <public_url>/v1/telco/twilio/voice, VoiceMethod POST; nothing else of the number is changed). false = set it in the carrier's console yourself.",
      format: Boolean,
      default: true,
      env: 'CALLBRIDGE_TELCO_SET_VOICE_URL',
    },
    webhook_body_limit: {
      doc: "Largest body in bytes of the carrier's webhooks (POST /v1/telco/twilio/voice and /status; a few KB in practice): a larger one gets 413 before it is read whole (Content-Length) or as soon as it passes this (chunked), far below http.body_limit because anyone can post to these routes before a signature is checked.",
      format: 'nat',
      default: 64 * 1024,
      env: 'CALLBRIDGE_TELCO_WEBHOOK_BODY_LIMIT',
    },
    webhook_max_parameters: {
      doc: "Most form parameters in one carrier webhook (the carrier sends a few dozen): more get 413, counted before the form is parsed.",
      format: 'nat',
      default: 1000,
      env: 'CALLBRIDGE_TELCO_WEBHOOK_MAX_PARAMETERS',
    },
  },
  webhooks: {
    allow_private_destinations: {
      doc: 'Let webhook endpoints (call events and tool calls) be loopback, private (RFC 1918, ULA), CGNAT or link-local addresses: an on-premises receiver. false: only public unicast addresses receive webhooks and tool calls; a URL naming or resolving to another is refused at each attempt (docs/webhooks.md "Where a webhook may go").',
      format: Boolean,
      default: false,
      env: 'CALLBRIDGE_WEBHOOKS_ALLOW_PRIVATE_DESTINATIONS',
    },
    timeout_ms: { doc: 'Time limit of one webhook attempt (resolve, connect, send, answer); no 2xx within it is a failed attempt, retried.', format: 'nat', default: 5000, env: 'CALLBRIDGE_WEBHOOKS_TIMEOUT_MS' },
    retry_max_hours: {
      doc: 'How long after its event a webhook delivery is retried (exponential backoff with jitter); an attempt that fails later than this is the last and the delivery is given up.',
      format: Number,
      default: 24,
      env: 'CALLBRIDGE_WEBHOOKS_RETRY_MAX_HOURS',
    },
    retry_base_ms: {
      doc: 'Delay before the first retry of a webhook delivery; each further retry waits twice as long (at most an hour), each delay drawn between half and all of it (jitter).',
      format: 'nat',
      default: 5000,
      env: 'CALLBRIDGE_WEBHOOKS_RETRY_BASE_MS',
    },
    poll_interval_ms: {
      doc: 'How often the deliverer looks for due webhook deliveries in the store (every node sharing the store looks; a claim with a lease decides who sends).',
      format: 'nat',
      default: 1000,
      env: 'CALLBRIDGE_WEBHOOKS_POLL_INTERVAL_MS',
    },
    max_in_flight: { doc: 'Most webhook attempts this node makes at once.', format: 'nat', default: 16, env: 'CALLBRIDGE_WEBHOOKS_MAX_IN_FLIGHT' },
    retention_hours: {
      doc: 'How long delivered and given-up webhook deliveries stay listed in GET /v1/webhooks/{id}/deliveries before they are deleted.',
      format: 'nat',
      default: 72,
      env: 'CALLBRIDGE_WEBHOOKS_RETENTION_HOURS',
    },
  },
  webrtc: {
    url: { doc: 'LiveKit-compatible media server URL for transport=webrtc; empty = webrtc answers 503.', format: String, default: '', env: 'CALLBRIDGE_WEBRTC_URL' },
    api_key: { doc: 'Media server API key.', format: String, default: '', env: 'CALLBRIDGE_WEBRTC_API_KEY' },
    api_secret: { doc: 'Media server API secret.', format: String, default: '', env: 'CALLBRIDGE_WEBRTC_API_SECRET', sensitive: true },
  },
  drain: {
    deadline_secs: { doc: 'On SIGTERM, how long calls in progress may go on before they are ended.', format: 'nat', default: 30, env: 'CALLBRIDGE_DRAIN_DEADLINE_SECS' },
  },
  console: {
    enabled: {
      doc: 'Serve the operator console (web/) at /console: a static front end that calls this REST API with an API key the operator types in (docs/console.md). false: /console answers 404.',
      format: Boolean,
      default: true,
      env: 'CALLBRIDGE_CONSOLE_ENABLED',
    },
  },
};

export type Config = {
  data_dir: string;
  store: { url: string; pool_size: number };
  log_level: string;
  http: { host: string; port: number; body_limit: number; request_timeout_ms: number; max_connections_per_source: number; public_url: string; fair_share_ms: number };
  sip: {
    host: string;
    port: number;
    transports: string;
    enabled: boolean;
    tls_port: number;
    tls_cert: string;
    tls_key: string;
    tls_ca: string;
    advertise_address: string;
    realm: string;
    digest_secret: string;
    digest_algorithms: string;
    auth_max_failures: number;
    auth_block_secs: number;
    challenge_rate: number;
    challenge_burst: number;
    acl_min_prefix_v4: number;
    acl_min_prefix_v6: number;
    codecs: string;
    session_expires_secs: number;
    min_se_secs: number;
    ring_timeout_secs: number;
    t1_ms: number;
    options_ping_secs: number;
    dns_servers: string;
    dns_timeout_ms: number;
    dns_tries: number;
    dns_cache_secs: number;
    failover_timeout_ms: number;
    dead_target_secs: number;
    register_min_expires_secs: number;
    register_max_expires_secs: number;
    outbound_register_expires_secs: number;
    outbound_register_retry_min_secs: number;
    outbound_register_retry_max_secs: number;
    tcp_message_timeout_ms: number;
    tls_handshake_timeout_ms: number;
    tcp_max_connections: number;
    tcp_max_connections_per_source: number;
    trusted_proxies: string;
  };
  rtp: { port_min: number; port_max: number; address: string; media_timeout_secs: number; media_threads: number; media_thread_nice: number; media_thread_realtime: number; media_thread_young_gen_mb: number; main_thread_realtime: number };
  region: { self: Region; peer_us_central1: string; peer_northamerica_northeast1: string; proxy_timeout_ms: number };
  llm: { providers: LlmProviderConfig[]; first_token_timeout_ms: number };
  stt: { provider: 'local' | 'openai' | 'stream'; base_url: string; api_key: string; model: string };
  tts: { providers: TtsSlotConfig[] };
  session: { tool_timeout_secs: number };
  cluster: { node_id: string; heartbeat_secs: number; node_timeout_secs: number; singleton_poll_secs: number };
  bridge: { max_calls: number; max_calls_per_trunk: number; max_calls_per_org: number; upstream_url: string; upstream_api_key: string; upstream_timeout_ms: number; recording: boolean; recording_sample_rate: 8000 | 16000 | 24000 };
  voices: { catalog: VoiceCatalogEntry[]; refresh_secs: number; first_fetch_wait_ms: number; fetch_timeout_ms: number };
  agent_defaults: {
    status: 'active' | 'inactive';
    llm: string;
    fallback_llm: string;
    prompt: string;
    first_message: string;
    first_message_interruption_time: number;
    default_language: string;
    summarize_calls: boolean;
    enable_first_message_outbound: boolean;
    keyterms: string[];
    voice_id: string;
    voice_provider: string;
    vad_start_secs: number;
    vad_stop_secs: number;
    vad_silence_timeout_secs: number;
    noise_enabled: boolean;
    noise_level: number;
    default_timeout: number;
    timeout_action: 'end_call' | 'transfer_call';
    silence_counter: number;
    silence_timeout_action: 'end_call' | 'transfer_call';
  };
  limits: {
    max_default_timeout: number;
    max_keyterms: number;
    max_keyterm_length: number;
    max_prompt_length: number;
    max_name_length: number;
    max_page_size: number;
  };
  security: { token_secret: string; encryption_key: string };
  webhooks: { allow_private_destinations: boolean; timeout_ms: number; retry_max_hours: number; retry_base_ms: number; poll_interval_ms: number; max_in_flight: number; retention_hours: number };
  telco: { api_base_url: string; timeout_ms: number; dial_watchdog_slack_secs: number; outbound_trunks: Array<{ account_sid: string; sip_trunk_id: string }>; set_voice_url: boolean; webhook_body_limit: number; webhook_max_parameters: number };
  webrtc: { url: string; api_key: string; api_secret: string };
  drain: { deadline_secs: number };
  console: { enabled: boolean };
};

/** A setting that is invalid on its own or against another setting. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** Sorted `provider/model` identifiers of the configured providers (the model catalog). */
export function modelCatalog(config: Pick<Config, 'llm'>): string[] {
  return config.llm.providers.flatMap((p) => p.models.map((m) => `${p.name}/${m}`)).sort();
}

/**
 * Loads and validates the configuration.
 * @param overrides values applied over file and env (tests use this to pick ports and dirs).
 * @param env the environment to read (defaults to process.env).
 * @throws ConfigError naming the bad setting.
 */
export function loadConfig(overrides: Record<string, unknown> = {}, env: NodeJS.ProcessEnv = process.env): Config {
  const c = convict(schema, { env: env as Record<string, string>, args: [] });
  const file = env.CALLBRIDGE_CONFIG;
  if (file) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(readFileSync(file, 'utf8'));
    } catch (err) {
      throw new ConfigError(`CALLBRIDGE_CONFIG=${file}: cannot read JSON config file: ${(err as Error).message}`);
    }
    // convict ranks env vars above a loaded file, so env still wins over the file here.
    c.load(parsed as object);
  }
  for (const [path, value] of flatten(overrides)) c.set(path, value);
  try {
    c.validate({ allowed: 'strict' });
  } catch (err) {
    throw new ConfigError(`invalid configuration: ${(err as Error).message}`);
  }
  const config = canonicalProviders(c.getProperties() as unknown as Config);
  crossCheck(config);
  return config;
}

/**
 * Voice providers may be named by vendor in every setting that takes one (validated above); the
 * rest of the daemon sees only the neutral provider_1..provider_6.
 */
function canonicalProviders(config: Config): Config {
  const neutral = (name: string) => canonicalVoiceProvider(name) ?? name;
  config.agent_defaults.voice_provider = neutral(config.agent_defaults.voice_provider);
  config.tts.providers = config.tts.providers.map((p) => ({ ...p, voice_provider: neutral(p.voice_provider) as TtsSlotConfig['voice_provider'] }));
  config.voices.catalog = config.voices.catalog.map((v) => ({ ...v, provider: neutral(v.provider) }));
  return config;
}

/** `{ http: { port: 0 } }` -> `[['http.port', 0]]`; arrays are values, not branches. */
function flatten(obj: Record<string, unknown>, prefix = ''): Array<[string, unknown]> {
  return Object.entries(obj).flatMap(([k, v]) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? flatten(v as Record<string, unknown>, `${prefix}${k}.`)
      : [[`${prefix}${k}`, v] as [string, unknown]],
  );
}

/** Rules that involve more than one setting. */
function crossCheck(config: Config): void {
  // A node id that is not given is the host name, which must fit the same rule.
  if (config.cluster.node_id === '') config.cluster.node_id = hostname();
  if (!NODE_ID.test(config.cluster.node_id)) throw new ConfigError(`invalid configuration: cluster.node_id: ${NODE_ID_RULE} (empty = the host name, here "${config.cluster.node_id.slice(0, 80)}")`);
  if (config.cluster.heartbeat_secs < 1) throw new ConfigError('invalid configuration: cluster.heartbeat_secs must be at least 1');
  if (config.cluster.node_timeout_secs <= 2 * config.cluster.heartbeat_secs) {
    throw new ConfigError(
      `invalid configuration: cluster.node_timeout_secs (${config.cluster.node_timeout_secs}) must exceed 2 x cluster.heartbeat_secs (${config.cluster.heartbeat_secs}): a live node could otherwise be declared dead after one late heartbeat`,
    );
  }
  if (config.store.pool_size < 1) throw new ConfigError('invalid configuration: store.pool_size must be at least 1');
  if (config.cluster.singleton_poll_secs < 1) throw new ConfigError('invalid configuration: cluster.singleton_poll_secs must be at least 1');
  if (config.store.url !== '' && (config.security.encryption_key === '' || config.security.token_secret === '')) {
    // Generated secrets live in one node's data_dir: another node sharing the database could
    // neither read the trunk passwords sealed with that key nor verify the tokens signed with it.
    throw new ConfigError(
      'invalid configuration: store.url names a PostgreSQL database, so security.encryption_key and security.token_secret must both be set (32 bytes base64 each, the same on every node sharing the database); they are not generated into data_dir then',
    );
  }
  if (config.rtp.media_thread_nice < -20 || config.rtp.media_thread_nice > 19) {
    throw new ConfigError(`invalid configuration: rtp.media_thread_nice (${config.rtp.media_thread_nice}) is outside -20..19`);
  }
  if (config.rtp.media_thread_realtime < 0 || config.rtp.media_thread_realtime > 99) {
    throw new ConfigError(`invalid configuration: rtp.media_thread_realtime (${config.rtp.media_thread_realtime}) is outside 0..99 (0 = off, 1-99 = SCHED_RR priority)`);
  }
  if (config.rtp.main_thread_realtime < 0 || config.rtp.main_thread_realtime > 99) {
    throw new ConfigError(`invalid configuration: rtp.main_thread_realtime (${config.rtp.main_thread_realtime}) is outside 0..99 (0 = off, 1-99 = SCHED_RR priority)`);
  }
  if (config.rtp.main_thread_realtime > 0 && config.rtp.media_thread_realtime > 0 && config.rtp.main_thread_realtime >= config.rtp.media_thread_realtime) {
    throw new ConfigError(
      `invalid configuration: rtp.main_thread_realtime (${config.rtp.main_thread_realtime}) must be below rtp.media_thread_realtime (${config.rtp.media_thread_realtime}): the media threads come first`,
    );
  }
  if (config.rtp.port_min > config.rtp.port_max) {
    throw new ConfigError(`invalid configuration: rtp.port_min (${config.rtp.port_min}) is above rtp.port_max (${config.rtp.port_max})`);
  }
  for (const t of config.sip.transports.split(',').map((x) => x.trim())) {
    if (t !== 'udp' && t !== 'tcp') throw new ConfigError(`invalid configuration: sip.transports: "${t}" is not udp or tcp (TLS is configured with sip.tls_cert/tls_key)`);
  }
  if ((config.sip.tls_cert === '') !== (config.sip.tls_key === '')) throw new ConfigError('invalid configuration: sip.tls_cert and sip.tls_key must be set together');
  for (const c of config.sip.codecs.split(',').map((x) => x.trim())) {
    if (c !== 'PCMU' && c !== 'PCMA' && c !== 'opus') throw new ConfigError(`invalid configuration: sip.codecs: "${c}" is not PCMU, PCMA or opus`);
  }
  for (const a of config.sip.digest_algorithms.split(',').map((x) => x.trim())) {
    if (a !== 'SHA-256' && a !== 'MD5') throw new ConfigError(`invalid configuration: sip.digest_algorithms: "${a}" is not SHA-256 or MD5`);
  }
  if (config.sip.digest_secret !== '' && config.sip.digest_secret.length < 16) throw new ConfigError('invalid configuration: sip.digest_secret must be at least 16 characters');
  if (config.sip.register_min_expires_secs < 1) throw new ConfigError('invalid configuration: sip.register_min_expires_secs must be at least 1');
  if (config.sip.register_max_expires_secs < config.sip.register_min_expires_secs) {
    throw new ConfigError('invalid configuration: sip.register_max_expires_secs must be at least sip.register_min_expires_secs');
  }
  if (config.sip.outbound_register_expires_secs < 1) throw new ConfigError('invalid configuration: sip.outbound_register_expires_secs must be at least 1');
  if (config.sip.outbound_register_retry_min_secs < 1 || config.sip.outbound_register_retry_max_secs < config.sip.outbound_register_retry_min_secs) {
    throw new ConfigError('invalid configuration: sip.outbound_register_retry_min_secs must be at least 1 and sip.outbound_register_retry_max_secs at least that');
  }
  if (config.sip.acl_min_prefix_v4 < 1 || config.sip.acl_min_prefix_v4 > 32) throw new ConfigError('invalid configuration: sip.acl_min_prefix_v4 must be between 1 and 32 (/0 is never accepted)');
  if (config.sip.acl_min_prefix_v6 < 1 || config.sip.acl_min_prefix_v6 > 128) throw new ConfigError('invalid configuration: sip.acl_min_prefix_v6 must be between 1 and 128 (/0 is never accepted)');
  if (config.sip.challenge_rate > 0 && config.sip.challenge_burst < 1) throw new ConfigError('invalid configuration: sip.challenge_burst must be at least 1 when sip.challenge_rate is set');
  if (config.sip.t1_ms < 10 || config.sip.t1_ms > 10_000) throw new ConfigError('invalid configuration: sip.t1_ms must be between 10 and 10000');
  if (config.sip.min_se_secs < 90) throw new ConfigError('invalid configuration: sip.min_se_secs must be at least 90 (RFC 4028 section 4)');
  if (config.sip.session_expires_secs < config.sip.min_se_secs) throw new ConfigError('invalid configuration: sip.session_expires_secs is below sip.min_se_secs');
  if (config.sip.tcp_message_timeout_ms < 100) throw new ConfigError('invalid configuration: sip.tcp_message_timeout_ms must be at least 100');
  if (config.http.request_timeout_ms < 100) throw new ConfigError('invalid configuration: http.request_timeout_ms must be at least 100');
  if (config.sip.tls_handshake_timeout_ms < 100) throw new ConfigError('invalid configuration: sip.tls_handshake_timeout_ms must be at least 100');
  if (config.sip.tcp_max_connections < 1) throw new ConfigError('invalid configuration: sip.tcp_max_connections must be at least 1');
  if (config.sip.dns_timeout_ms < 1 || config.sip.dns_tries < 1) throw new ConfigError('invalid configuration: sip.dns_timeout_ms and sip.dns_tries must be at least 1');
  if (config.sip.failover_timeout_ms < 1) throw new ConfigError('invalid configuration: sip.failover_timeout_ms must be at least 1');
  for (const server of config.sip.dns_servers.split(',').map((x) => x.trim()).filter((x) => x !== '')) {
    // host, host:port or [v6]:port, as node:dns setServers takes them
    const m = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(server) ?? /^([^:]+)(?::(\d{1,5}))?$/.exec(server) ?? (isIP(server) === 6 ? [server, server] : null);
    if (m === null || isIP(m[1] ?? '') === 0 || (m[2] !== undefined && (Number(m[2]) < 1 || Number(m[2]) > 65535))) {
      throw new ConfigError(`invalid configuration: sip.dns_servers: "${server}" is not an IP address with an optional port`);
    }
  }
  for (const p of config.sip.trusted_proxies.split(',').map((x) => x.trim()).filter((x) => x !== '')) {
    const [addr = '', len, extra] = p.split('/');
    const family = isIP(addr);
    const bits = family === 4 ? 32 : 128;
    if (family === 0 || extra !== undefined || (len !== undefined && !(/^\d{1,3}$/.test(len) && Number(len) <= bits))) {
      throw new ConfigError(`invalid configuration: sip.trusted_proxies: "${p}" is not an IP address or CIDR`);
    }
  }
  const catalog = new Set(modelCatalog(config));
  for (const key of ['llm', 'fallback_llm'] as const) {
    const model = config.agent_defaults[key];
    if (!catalog.has(model)) {
      throw new ConfigError(`invalid configuration: agent_defaults.${key} "${model}" is not in the model catalog (${[...catalog].join(', ')})`);
    }
  }
  // A new agent gets agent_defaults' voice without a check; on the local voice it must be one of
  // the local voices, or every agent created without voice_settings would name a voice nobody serves.
  const defaultSlot = config.tts.providers.find((p) => p.voice_provider === config.agent_defaults.voice_provider);
  if ((defaultSlot === undefined || defaultSlot.type === 'local') && !config.voices.catalog.some((v) => v.id === config.agent_defaults.voice_id)) {
    throw new ConfigError(
      `invalid configuration: agent_defaults.voice_id "${config.agent_defaults.voice_id}" is not a local voice (voices.catalog: ${config.voices.catalog.map((v) => v.id).join(', ')}), and the local voice serves agent_defaults.voice_provider ${config.agent_defaults.voice_provider}`,
    );
  }
  if (config.voices.refresh_secs < 1) throw new ConfigError('invalid configuration: voices.refresh_secs must be at least 1');
  if (config.voices.fetch_timeout_ms < 100) throw new ConfigError('invalid configuration: voices.fetch_timeout_ms must be at least 100');
  if (config.stt.provider !== 'local' && config.stt.base_url === '') throw new ConfigError(`invalid configuration: stt.base_url is required for stt.provider ${config.stt.provider}`);
  if (!(LANGUAGE_CODES as readonly string[]).includes(config.agent_defaults.default_language)) {
    throw new ConfigError(`invalid configuration: agent_defaults.default_language must be one of ${LANGUAGE_CODES.join(', ')}`);
  }
  if (config.bridge.upstream_url !== '' && config.bridge.upstream_api_key === '') {
    throw new ConfigError('invalid configuration: bridge.upstream_api_key is required when bridge.upstream_url is set (an API key of the upstream server)');
  }
  if (config.bridge.upstream_url !== '' && (config.bridge.upstream_timeout_ms < 100 || config.bridge.upstream_timeout_ms > 60_000)) {
    throw new ConfigError('invalid configuration: bridge.upstream_timeout_ms must be between 100 and 60000');
  }
  if (config.agent_defaults.default_timeout > config.limits.max_default_timeout) {
    throw new ConfigError('invalid configuration: agent_defaults.default_timeout is above limits.max_default_timeout');
  }
}

/** Schema as data, for the configuration table (docs/configuration.md) (scripts/config-table.ts). */
export const configSchema = schema;
