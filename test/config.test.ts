import { mkdtempSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, modelCatalog, ttsProvidersBySlot } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { editDistance, settingVariables, unknownVariables } from '../src/config-env.ts';

const EXAMPLE = join(import.meta.dirname, '..', 'config', 'example.json');

describe('configuration', () => {
  it('has working defaults with no file and no env', () => {
    const c = loadConfig({}, {});
    expect(c.data_dir).toBe('./data');
    expect(c.http).toMatchObject({ host: '0.0.0.0', port: 8080, body_limit: 1048576 });
    expect(c.sip).toMatchObject({ host: '0.0.0.0', port: 5060, transports: 'udp,tcp', enabled: true, tls_cert: '', realm: 'callbridge', digest_algorithms: 'MD5' });
    expect(c.sip).toMatchObject({ session_expires_secs: 1800, min_se_secs: 90, ring_timeout_secs: 60, t1_ms: 500, options_ping_secs: 0 });
    expect(c.rtp).toEqual({ port_min: 20000, port_max: 30000, address: '0.0.0.0', media_timeout_secs: 30, media_threads: 2, media_thread_nice: 0, media_thread_realtime: 0, media_thread_young_gen_mb: 48, main_thread_realtime: 0 });
    expect(modelCatalog(c)).toEqual(['local/echo']);
    expect(c.agent_defaults).toMatchObject({ vad_start_secs: 0.2, vad_stop_secs: 0.8, vad_silence_timeout_secs: 10, noise_level: 50, default_timeout: 1800, silence_counter: 2 });
    expect(c.limits.max_default_timeout).toBe(7200);
  });

  it('loads config/example.json, and env vars override the file', () => {
    const c = loadConfig({}, { CALLBRIDGE_CONFIG: EXAMPLE });
    expect(c.region.peer_northamerica_northeast1).toBe('https://ca.voice.example.com');
    expect(modelCatalog(c)).toEqual(['anthropic/claude-sonnet', 'local/echo', 'openai/gpt-4o-mini']);
    const e = loadConfig({}, { CALLBRIDGE_CONFIG: EXAMPLE, CALLBRIDGE_HTTP_PORT: '9090', CALLBRIDGE_REGION: 'northamerica-northeast1' });
    expect(e.http.port).toBe(9090);
    expect(e.region.self).toBe('northamerica-northeast1');
  });

  it('speech and model providers: defaults, the example file, JSON lists in env vars, and bad entries', () => {
    const d = loadConfig({}, {});
    expect(d.stt).toEqual({ provider: 'local', base_url: '', api_key: '', model: '' });
    expect(d.llm.first_token_timeout_ms).toBe(3000);
    expect(d.session.tool_timeout_secs).toBe(10);
    expect(ttsProvidersBySlot(d.tts.providers)).toEqual(Object.fromEntries(['provider_1', 'provider_2', 'provider_3', 'provider_4', 'provider_5', 'provider_6'].map((k) => [k, { type: 'local' }])));
    const ex = loadConfig({}, { CALLBRIDGE_CONFIG: EXAMPLE });
    const slots = ttsProvidersBySlot(ex.tts.providers);
    expect(slots.provider_1).toEqual({ type: 'local' });
    expect(slots.provider_2).toMatchObject({ type: 'openai', base_url: 'https://speech.example.com/v1', model: 'tts-1' });
    expect(slots.provider_3).toMatchObject({ type: 'stream' });
    const env = loadConfig({}, {
      CALLBRIDGE_LLM_PROVIDERS: JSON.stringify([{ name: 'local', type: 'echo', models: ['echo'] }, { name: 'ollama', type: 'openai', base_url: 'http://127.0.0.1:11434/v1', models: ['llama3.1'] }]),
      CALLBRIDGE_TTS_PROVIDERS: JSON.stringify([{ voice_provider: 'provider_6', type: 'openai', base_url: 'http://127.0.0.1:9/v1' }]),
      CALLBRIDGE_STT_PROVIDER: 'stream',
      CALLBRIDGE_STT_BASE_URL: 'ws://127.0.0.1:9',
    });
    expect(modelCatalog(env)).toEqual(['local/echo', 'ollama/llama3.1']);
    expect(ttsProvidersBySlot(env.tts.providers).provider_6).toEqual({ type: 'openai', base_url: 'http://127.0.0.1:9/v1' });
    expect(env.stt.provider).toBe('stream');
    const bad: Array<[Record<string, string>, RegExp]> = [
      [{ CALLBRIDGE_STT_PROVIDER: 'openai' }, /stt\.base_url is required/],
      [{ CALLBRIDGE_STT_PROVIDER: 'vosk' }, /stt\.provider/],
      [{ CALLBRIDGE_TTS_PROVIDERS: '[{"voice_provider":"provider_9","type":"local"}]' }, /tts\.providers.*voice_provider must be one of/],
      [{ CALLBRIDGE_TTS_PROVIDERS: '[{"voice_provider":"provider_2","type":"openai"}]' }, /tts\.providers.*base_url/],
      [{ CALLBRIDGE_TTS_PROVIDERS: '[{"voice_provider":"provider_2","type":"local"},{"voice_provider":"provider_2","type":"local"}]' }, /listed twice/],
      [{ CALLBRIDGE_TTS_PROVIDERS: 'not json' }, /tts\.providers.*must be an array/],
      [{ CALLBRIDGE_LLM_PROVIDERS: '{' }, /llm\.providers.*must be an array/],
    ];
    for (const [e, re] of bad) expect(() => loadConfig({}, e), JSON.stringify(e)).toThrow(re);
  });

  it('booleans from env vars mean what they say: 0/false/no/off are false, and a typo stops start-up', () => {
    expect(loadConfig({}, { CALLBRIDGE_BRIDGE_RECORDING: '0' }).bridge.recording).toBe(false);
    expect(loadConfig({}, { CALLBRIDGE_BRIDGE_RECORDING: 'off' }).bridge.recording).toBe(false);
    expect(loadConfig({}, { CALLBRIDGE_BRIDGE_RECORDING: 'TRUE' }).bridge.recording).toBe(true);
    expect(loadConfig({}, { CALLBRIDGE_SIP_ENABLED: 'no' }).sip.enabled).toBe(false);
    expect(loadConfig({}, {}).bridge.recording).toBe(false);
    expect(() => loadConfig({}, { CALLBRIDGE_BRIDGE_RECORDING: 'ture' })).toThrow(/bridge\.recording.*true or false/);
  });

  it('names the CALLBRIDGE_ variables no setting uses, with the closest one; known ones, CALLBRIDGE_CONFIG and CALLBRIDGE_TEST_ are not', () => {
    expect(editDistance('CALLBRIDGE_HTPP_PORT', 'CALLBRIDGE_HTTP_PORT')).toBe(1);
    expect(editDistance('kitten', 'sitting')).toBe(3);
    expect(settingVariables().get('CALLBRIDGE_HTTP_PORT')).toBe('http.port');
    const env = { CALLBRIDGE_HTPP_PORT: '1', CALLBRIDGE_SIP_PROT: '1', CALLBRIDGE_HTTP_PORT: '1', CALLBRIDGE_CONFIG: 'x', CALLBRIDGE_TEST_PG_BIN: 'x', PATH: '/bin', HTTP_PORT: '1' };
    expect(unknownVariables(env)).toEqual([
      { name: 'CALLBRIDGE_HTPP_PORT', closest: 'CALLBRIDGE_HTTP_PORT', setting: 'http.port' },
      { name: 'CALLBRIDGE_SIP_PROT', closest: 'CALLBRIDGE_SIP_PORT', setting: 'sip.port' },
    ]);
    expect(unknownVariables({ CALLBRIDGE_CONFG: 'x' })).toEqual([{ name: 'CALLBRIDGE_CONFG', closest: 'CALLBRIDGE_CONFIG' }]);
  });

  it('rejects bad settings with a message naming them', () => {
    const bad: Array<[Record<string, string>, Record<string, unknown>, RegExp]> = [
      [{ CALLBRIDGE_HTTP_PORT: '70000' }, {}, /http\.port/],
      [{ CALLBRIDGE_RTP_PORT_MIN: '30001' }, {}, /rtp\.port_min/],
      [{ CALLBRIDGE_TOKEN_SECRET: 'short' }, {}, /security\.token_secret/],
      [{ CALLBRIDGE_REGION_US_CENTRAL1_URL: 'ftp://x' }, {}, /region\.peer_us_central1/],
      [{}, { llm: { providers: [{ name: 'x', type: 'openai', models: ['m'] }] } }, /base_url/],
      [{}, { llm: { providers: [{ name: 'x', type: 'echo', models: [] }] } }, /models/],
      [{}, { agent_defaults: { llm: 'missing/model' } }, /agent_defaults\.llm/],
      [{}, { agent_defaults: { default_language: 'xx' } }, /agent_defaults\.default_language/],
      [{}, { agent_defaults: { default_timeout: 9000 } }, /default_timeout/],
      [{}, { not_a_setting: 1 }, /not_a_setting/],
      [{ CALLBRIDGE_SIP_TRANSPORTS: 'udp,sctp' }, {}, /sip\.transports/],
      [{ CALLBRIDGE_SIP_CODECS: 'PCMU,G729' }, {}, /sip\.codecs/],
      [{ CALLBRIDGE_SIP_DIGEST_ALGORITHMS: 'SHA-512' }, {}, /sip\.digest_algorithms/],
      [{ CALLBRIDGE_SIP_DIGEST_SECRET: 'short' }, {}, /sip\.digest_secret/],
      [{ CALLBRIDGE_SIP_TLS_CERT: '/etc/cert.pem' }, {}, /sip\.tls_cert and sip\.tls_key/],
      [{ CALLBRIDGE_SIP_MIN_SE_SECS: '60' }, {}, /sip\.min_se_secs/],
      [{ CALLBRIDGE_SIP_T1_MS: '5' }, {}, /sip\.t1_ms/],
      [{ CALLBRIDGE_RTP_MEDIA_THREAD_NICE: '-21' }, {}, /rtp\.media_thread_nice/],
      [{ CALLBRIDGE_RTP_MEDIA_THREAD_REALTIME: '100' }, {}, /rtp\.media_thread_realtime/],
      [{ CALLBRIDGE_RTP_MEDIA_THREAD_REALTIME: '-1' }, {}, /rtp\.media_thread_realtime/],
      [{ CALLBRIDGE_RTP_MEDIA_THREAD_YOUNG_GEN_MB: '8.5' }, {}, /rtp\.media_thread_young_gen_mb/],
      [{ CALLBRIDGE_RTP_MAIN_THREAD_REALTIME: '100' }, {}, /rtp\.main_thread_realtime/],
      // The media threads come first: the main thread's priority must be below theirs.
      [{ CALLBRIDGE_RTP_MAIN_THREAD_REALTIME: '10', CALLBRIDGE_RTP_MEDIA_THREAD_REALTIME: '10' }, {}, /rtp\.main_thread_realtime \(10\) must be below rtp\.media_thread_realtime \(10\)/],
      [{ CALLBRIDGE_RTP_MEDIA_THREADS: '-1' }, {}, /rtp\.media_threads/],
      [{ CALLBRIDGE_SIP_TCP_MESSAGE_TIMEOUT_MS: '50' }, {}, /sip\.tcp_message_timeout_ms/],
      [{ CALLBRIDGE_SIP_TLS_HANDSHAKE_TIMEOUT_MS: '50' }, {}, /sip\.tls_handshake_timeout_ms/],
      [{ CALLBRIDGE_HTTP_REQUEST_TIMEOUT_MS: '50' }, {}, /http\.request_timeout_ms/],
      [{ CALLBRIDGE_SIP_TCP_MAX_CONNECTIONS: '0' }, {}, /sip\.tcp_max_connections/],
      [{ CALLBRIDGE_SIP_TCP_MAX_CONNECTIONS_PER_SOURCE: 'many' }, {}, /sip\.tcp_max_connections_per_source/],
      [{ CALLBRIDGE_SIP_TRUSTED_PROXIES: '10.0.0.1, proxy.example.com' }, {}, /sip\.trusted_proxies: "proxy\.example\.com"/],
      [{ CALLBRIDGE_SIP_TRUSTED_PROXIES: '10.0.0.0/33' }, {}, /sip\.trusted_proxies/],
      [{ CALLBRIDGE_SIP_TRUSTED_PROXIES: '2001:db8::/129' }, {}, /sip\.trusted_proxies/],
      [{ CALLBRIDGE_CLUSTER_NODE_ID: 'node one' }, {}, /cluster\.node_id/],
      [{ CALLBRIDGE_CLUSTER_NODE_ID: 'n'.repeat(65) }, {}, /cluster\.node_id/],
      [{ CALLBRIDGE_CLUSTER_NODE_ID: 'node/1' }, {}, /cluster\.node_id/],
      [{ CALLBRIDGE_BRIDGE_MAX_CALLS_PER_ORG: '-1' }, {}, /bridge\.max_calls_per_org/],
      // A live node must not be declared dead after one late heartbeat: both settings named.
      [{ CALLBRIDGE_CLUSTER_HEARTBEAT_SECS: '5', CALLBRIDGE_CLUSTER_NODE_TIMEOUT_SECS: '10' }, {}, /cluster\.node_timeout_secs \(10\) must exceed 2 x cluster\.heartbeat_secs \(5\)/],
      [{ CALLBRIDGE_CLUSTER_HEARTBEAT_SECS: '0' }, {}, /cluster\.heartbeat_secs/],
    ];
    // The cluster settings: the node id defaults to the host name; the test cluster's short timings pass.
    expect(loadConfig({}, {}).cluster).toEqual({ node_id: hostname(), heartbeat_secs: 5, node_timeout_secs: 20, singleton_poll_secs: 5 });
    expect(loadConfig({}, { CALLBRIDGE_CLUSTER_NODE_ID: 'cb-node_2.eu', CALLBRIDGE_CLUSTER_HEARTBEAT_SECS: '1', CALLBRIDGE_CLUSTER_NODE_TIMEOUT_SECS: '3' }).cluster).toEqual({ node_id: 'cb-node_2.eu', heartbeat_secs: 1, node_timeout_secs: 3, singleton_poll_secs: 5 });
    expect(loadConfig({}, { CALLBRIDGE_SIP_TRUSTED_PROXIES: ' 10.0.0.5, 192.0.2.0/24,2001:db8::/32 ' }).sip.trusted_proxies).toBe(' 10.0.0.5, 192.0.2.0/24,2001:db8::/32 ');
    for (const [env, overrides, re] of bad) {
      expect(() => loadConfig(overrides, env), JSON.stringify({ env, overrides })).toThrow(ConfigError);
      expect(() => loadConfig(overrides, env)).toThrow(re);
    }
    const dir = mkdtempSync(join(tmpdir(), 'cfg-'));
    writeFileSync(join(dir, 'broken.json'), '{ "http": ');
    expect(() => loadConfig({}, { CALLBRIDGE_CONFIG: join(dir, 'broken.json') })).toThrow(/CALLBRIDGE_CONFIG/);
  });
});

describe('log redaction', () => {
  it('never writes secrets, whatever object they are in', () => {
    let out = '';
    const sink = new Writable({
      write(chunk, _enc, cb) {
        out += chunk;
        cb();
      },
    });
    const log = createLogger('trace', sink as never);
    log.info({ req: { headers: { authorization: 'Bearer cbk_SECRET1' } } }, 'request');
    log.info({ body: { auth_token: 'SECRET2', inbound_sip_password: 'SECRET3', outbound_sip_password: 'SECRET4' } }, 'body');
    log.info({ token: 'SECRET5', webrtc_token: 'SECRET6', config: { api_key: 'SECRET7', api_secret: 'SECRET8' } }, 'misc');
    expect(out).not.toMatch(/SECRET\d/);
    expect(out.match(/\[redacted\]/g)?.length).toBe(8);
  });
});
