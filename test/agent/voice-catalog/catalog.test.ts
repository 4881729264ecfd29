/**
 * The voice catalog against fakes of the vendors' voice-list APIs on loopback (fakes.ts): each
 * vendor's list mapped to the API's voice shape (with paging), a wrong key, a vendor going down
 * (last list kept, one warning per failure streak), a refresh picking up a change, the voice
 * check's rules, and the bounded wait for a first fetch.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, type TtsSlotConfig } from '../../../src/config.ts';
import { createLogger } from '../../../src/log.ts';
import { VoiceCatalog } from '../../../src/agent/voice-catalog/catalog.ts';
import { until } from '../../helpers/until.ts';
import { startVoiceVendorFake, type FakeVoice, type Vendor, type VoiceVendorFake } from './fakes.ts';

const VOICES: FakeVoice[] = [
  { id: 'v-ana', name: 'Ana', description: 'Warm and calm', language: 'es', preview: 'https://cdn.example/ana.mp3' },
  { id: 'v-ben', name: 'Ben', description: 'Newsreader', language: 'en' },
  { id: 'v-cho', name: 'Cho', language: 'ko' },
];

const TYPE: Record<Vendor, { slot: TtsSlotConfig['voice_provider']; type: TtsSlotConfig['type'] }> = {
  elevenlabs: { slot: 'provider_1', type: 'stream' },
  cartesia: { slot: 'provider_3', type: 'cartesia' },
  hume: { slot: 'provider_4', type: 'hume' },
  minimax: { slot: 'provider_5', type: 'minimax' },
  fish: { slot: 'provider_6', type: 'fish' },
};

let fakes: VoiceVendorFake[] = [];
let catalogs: VoiceCatalog[] = [];
afterEach(async () => {
  for (const c of catalogs) c.stop();
  await Promise.all(fakes.map((f) => f.close()));
  fakes = [];
  catalogs = [];
});

interface LogLine {
  level: number;
  msg: string;
  [k: string]: unknown;
}

function catalogFor(entries: Array<{ fake: VoiceVendorFake; key?: string } | TtsSlotConfig>, voices: Record<string, unknown> = {}) {
  const lines: LogLine[] = [];
  const raw: string[] = [];
  const providers = entries.map((e) => ('fake' in e ? { voice_provider: TYPE[e.fake.vendor].slot, type: TYPE[e.fake.vendor].type, base_url: e.fake.url, api_key: e.key ?? e.fake.key } : e));
  const config = loadConfig({ tts: { providers }, voices }, {});
  const logger = createLogger('debug', { write: (s: string) => (raw.push(s), lines.push(JSON.parse(s) as LogLine)) });
  const catalog = new VoiceCatalog({ config, logger });
  catalogs.push(catalog);
  return { catalog, lines, raw };
}

async function fake(vendor: Vendor, voices = VOICES, options: Parameters<typeof startVoiceVendorFake>[2] = {}) {
  const f = await startVoiceVendorFake(vendor, voices.map((v) => ({ ...v })), options);
  fakes.push(f);
  return f;
}

describe('voice catalog: each vendor list, fetched over its own API and mapped', () => {
  it('ElevenLabs GET /v1/voices with xi-api-key (the stream slot; a /v1 base is accepted)', async () => {
    const f = await fake('elevenlabs');
    const { catalog } = catalogFor([{ voice_provider: 'provider_1', type: 'stream', base_url: `${f.url.replace('http', 'ws')}/v1`, api_key: f.key }]);
    catalog.start();
    expect(await catalog.list()).toEqual([
      { id: 'v-ana', name: 'Ana', description: 'Warm and calm', provider: 'provider_1', languages: ['es'], preview_url: 'https://cdn.example/ana.mp3' },
      { id: 'v-ben', name: 'Ben', description: 'Newsreader', provider: 'provider_1', languages: ['en'] },
      { id: 'v-cho', name: 'Cho', provider: 'provider_1', languages: ['ko'] },
    ]);
    expect(f.requests.map((r) => [r.method, r.url, r.headers['xi-api-key']])).toEqual([['GET', '/v1/voices', f.key]]);
  });

  it('Cartesia GET /voices with X-API-Key and Cartesia-Version, page by page with starting_after', async () => {
    const f = await fake('cartesia', VOICES, { maxPage: 2 });
    const { catalog } = catalogFor([{ fake: f }]);
    catalog.start();
    expect(await catalog.list()).toEqual(
      expect.arrayContaining([
        { id: 'v-ana', name: 'Ana', description: 'Warm and calm', provider: 'provider_3', languages: ['es'], preview_url: 'https://cdn.example/ana.mp3' },
        { id: 'v-cho', name: 'Cho', provider: 'provider_3', languages: ['ko'] },
      ]),
    );
    expect((await catalog.list()).filter((v) => v.provider === 'provider_3').map((v) => v.id)).toEqual(['v-ana', 'v-ben', 'v-cho']);
    expect(f.requests.map((r) => r.url)).toEqual(['/voices?limit=100', '/voices?limit=100&starting_after=v-ben']);
    expect(f.requests[0]!.headers['cartesia-version']).toBe('2025-04-16');
  });

  it('Hume GET /v0/tts/voices?provider=HUME_AI then CUSTOM_VOICE with X-Hume-Api-Key, pages from 0; a library voice is also known by its name', async () => {
    const f = await fake('hume', VOICES, { maxPage: 2 });
    f.customVoices = [{ id: '9e068547-5ba4-4c8e-8e03-69282a008f04', name: 'My clone' }];
    const { catalog } = catalogFor([{ fake: f }]);
    catalog.start();
    const hume = (await catalog.list()).filter((v) => v.provider === 'provider_4');
    expect(hume).toEqual([
      ...VOICES.map((v) => ({ id: v.id, name: v.name, description: 'Hume Voice Library', provider: 'provider_4', languages: [] })),
      { id: '9e068547-5ba4-4c8e-8e03-69282a008f04', name: 'My clone', description: 'Hume custom voice', provider: 'provider_4', languages: [] },
    ]);
    expect(f.requests.map((r) => r.url)).toEqual([
      '/v0/tts/voices?provider=HUME_AI&page_number=0&page_size=100',
      '/v0/tts/voices?provider=HUME_AI&page_number=1&page_size=100',
      '/v0/tts/voices?provider=CUSTOM_VOICE&page_number=0&page_size=100',
    ]);
    expect(await catalog.check('provider_4', 'Ben')).toEqual({ ok: true });
    expect(await catalog.check('provider_4', '9e068547-5ba4-4c8e-8e03-69282a008f04')).toEqual({ ok: true });
    // The adapter sends a name as a Voice Library name, so a custom voice is taken by id only.
    expect(await catalog.check('provider_4', 'My clone')).toMatchObject({ ok: false });
  });

  it('MiniMax POST /v1/get_voice {voice_type: all} with Bearer: system and cloned voices', async () => {
    const f = await fake('minimax');
    const { catalog } = catalogFor([{ fake: f }]);
    catalog.start();
    expect((await catalog.list()).filter((v) => v.provider === 'provider_5')).toEqual([
      { id: 'v-ana', name: 'Ana', description: 'Warm and calm', provider: 'provider_5', languages: [] },
      { id: 'v-ben', name: 'Ben', description: 'Newsreader', provider: 'provider_5', languages: [] },
      { id: 'v-cho', name: 'v-cho', description: 'MiniMax cloned voice', provider: 'provider_5', languages: [] },
    ]);
    expect(f.requests.map((r) => [r.method, r.url, r.headers.authorization])).toEqual([['POST', '/v1/get_voice', `Bearer ${f.key}`]]);
  });

  it('Fish GET /model?self=true with Bearer, pages from 1; the list is partial, so other ids pass unchecked', async () => {
    const f = await fake('fish', VOICES, { maxPage: 2 });
    const { catalog } = catalogFor([{ fake: f }]);
    catalog.start();
    expect((await catalog.list()).filter((v) => v.provider === 'provider_6')).toEqual([
      { id: 'v-ana', name: 'Ana', description: 'Warm and calm', provider: 'provider_6', languages: ['es'], preview_url: 'https://cdn.example/ana.mp3' },
      { id: 'v-ben', name: 'Ben', description: 'Newsreader', provider: 'provider_6', languages: ['en'] },
      { id: 'v-cho', name: 'Cho', provider: 'provider_6', languages: ['ko'] },
    ]);
    expect(f.requests.map((r) => r.url)).toEqual(['/model?self=true&page_size=100&page_number=1', '/model?self=true&page_size=100&page_number=2']);
    expect(await catalog.check('provider_6', 'a-public-library-voice')).toMatchObject({ ok: true, unchecked: expect.stringContaining('partial') });
  });

  it('OpenAI: the documented fixed list, no request; with the default slot on the local voice beside it', async () => {
    // Port 9 (discard) on a name that is api.openai.com: no request may be made at all.
    const { catalog } = catalogFor([{ voice_provider: 'provider_2', type: 'openai', base_url: 'https://api.openai.com:9/v1', api_key: 'sk-x' }]);
    catalog.start();
    const list = await catalog.list();
    expect(list.filter((v) => v.provider === 'provider_1').map((v) => v.id)).toEqual(['local-en-1', 'local-multi-1']);
    expect(list.filter((v) => v.provider === 'provider_2').map((v) => v.id)).toEqual(['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer', 'verse', 'marin', 'cedar']);
    expect(list.some((v) => !['provider_1', 'provider_2'].includes(v.provider))).toBe(false);
    expect(await catalog.check('provider_2', 'nova')).toEqual({ ok: true });
    expect(await catalog.check('provider_2', 'af_heart')).toMatchObject({ ok: false });
  });

  it('an OpenAI-compatible server elsewhere has no list: nothing listed, its voice ids pass unchecked', async () => {
    const { catalog } = catalogFor([{ voice_provider: 'provider_2', type: 'openai', base_url: 'http://127.0.0.1:9/v1' }]);
    catalog.start();
    expect((await catalog.list()).filter((v) => v.provider === 'provider_2')).toEqual([]);
    expect(await catalog.check('provider_2', 'af_heart')).toMatchObject({ ok: true, unchecked: expect.stringContaining('partial') });
  });
});

describe('voice catalog: failures and refresh', () => {
  it('a rejected key: no voices, one warning that names the status and not the key; ids pass unchecked until a list is known', async () => {
    const f = await fake('cartesia');
    const { catalog, lines, raw } = catalogFor([{ fake: f, key: 'wrong-key-abcdef' }], { refresh_secs: 1 });
    catalog.start();
    expect((await catalog.list()).filter((v) => v.provider === 'provider_3')).toEqual([]);
    await until(() => f.requests.length >= 2, 'a retry');
    await until(() => lines.some((l) => l.level === 40), 'the warning');
    const warns = lines.filter((l) => l.level === 40);
    expect(warns).toHaveLength(1);
    expect(warns[0]).toMatchObject({ provider: 'provider_3', type: 'cartesia', error: expect.stringContaining('HTTP 401: the API key was rejected') });
    expect(raw.join('\n')).not.toContain('wrong-key-abcdef');
    expect(await catalog.check('provider_3', 'anything')).toMatchObject({ ok: true, unchecked: expect.stringContaining('not been fetched') });
  });

  it('credentials in a base_url never reach the log', async () => {
    const { catalog, lines, raw } = catalogFor([{ voice_provider: 'provider_1', type: 'stream', base_url: 'ws://user:s3cr3t-pass@127.0.0.1:9', api_key: 'k' }]);
    catalog.start();
    await catalog.list();
    await until(() => lines.some((l) => l.level === 40), 'the warning');
    expect(raw.join('\n')).not.toContain('s3cr3t-pass');
  });

  it('a vendor going down keeps its last list with one warning per failure streak; the refresh picks up a change', async () => {
    const f = await fake('elevenlabs', VOICES, { delayMs: 60 });
    const { catalog, lines, raw } = catalogFor([{ fake: f }], { refresh_secs: 1 });
    catalog.start();
    const ids = async () => (await catalog.list()).map((v) => v.id);
    expect(await ids()).toEqual(['v-ana', 'v-ben', 'v-cho']);

    f.down = 503;
    const n = f.requests.length;
    await until(() => f.requests.length >= n + 2, 'two failed refreshes', 6000);
    await until(() => lines.filter((l) => l.level === 40).length >= 1, 'the warning');
    expect(await ids()).toEqual(['v-ana', 'v-ben', 'v-cho']);
    expect(await catalog.check('provider_1', 'v-zed')).toMatchObject({ ok: false });
    let warns = lines.filter((l) => l.level === 40);
    expect(warns).toHaveLength(1);
    expect(warns[0]).toMatchObject({ provider: 'provider_1', error: expect.stringContaining('HTTP 503'), msg: expect.stringContaining('keeping the last good list (3 voices)') });

    f.voices = [...f.voices.slice(1), { id: 'v-zed', name: 'Zed', language: 'de' }];
    f.down = undefined;
    await until(() => lines.some((l) => l.level === 30 && String(l.msg).includes('fetched again')), 'the recovery', 6000);
    expect(await ids()).toEqual(['v-ben', 'v-cho', 'v-zed']);
    expect(await catalog.check('provider_1', 'v-zed')).toEqual({ ok: true });
    expect(await catalog.check('provider_1', 'v-ana')).toMatchObject({ ok: false });

    f.down = 'close';
    await until(() => lines.filter((l) => l.level === 40).length >= 2, 'the second streak warning', 6000);
    warns = lines.filter((l) => l.level === 40);
    expect(warns[1]).toMatchObject({ error: expect.stringContaining('unreachable') });
    expect(await ids()).toEqual(['v-ben', 'v-cho', 'v-zed']);
    expect(raw.join('\n')).not.toContain(f.key);
  });

  it('a request waits for a first fetch at most voices.first_fetch_wait_ms, and later requests do not wait', async () => {
    const f = await fake('hume', VOICES, { delayMs: 1500 });
    const { catalog } = catalogFor([{ fake: f }], { first_fetch_wait_ms: 100 });
    catalog.start();
    // The fetch takes 1.5 s; the request gives up after 0.1 s and answers without that vendor.
    expect((await catalog.list()).filter((v) => v.provider === 'provider_4')).toEqual([]);
    await until(() => f.requests.length === 1, 'the request');
  });
});

describe('voice catalog: the voice check', () => {
  it('names the provider and the setting when the provider is not configured; local and vendor ids are checked', async () => {
    const f = await fake('cartesia');
    const { catalog } = catalogFor([{ fake: f }]);
    catalog.start();
    const hume = await catalog.check('provider_4', 'x');
    expect(hume).toEqual({ ok: false, error: expect.stringContaining('voice_settings.provider provider_4 (hume) is not configured') });
    expect((hume as { error: string }).error).toContain('tts.providers (CALLBRIDGE_TTS_PROVIDERS)');
    expect(await catalog.check('provider_1', 'local-en-1')).toEqual({ ok: true });
    expect(await catalog.check('provider_1', 'v-ana')).toEqual({ ok: false, error: expect.stringMatching(/"v-ana" is not a voice of provider_1 \(elevenlabs\), which the embedded local voice serves: one of local-en-1, local-multi-1/) });
    expect(await catalog.check('provider_3', 'v-ana')).toEqual({ ok: true });
    expect(await catalog.check('provider_3', 'v-nope')).toEqual({ ok: false, error: expect.stringContaining('"v-nope" is not in the voice catalog of provider_3 (cartesia)') });
  });
});

describe('configuration', () => {
  it('refuses a default voice the default provider does not have when the local voice serves it', () => {
    expect(() => loadConfig({ agent_defaults: { voice_id: 'rachel' } }, {})).toThrow(/agent_defaults\.voice_id "rachel" is not a local voice \(voices\.catalog: local-en-1, local-multi-1\)/);
    expect(() => loadConfig({ agent_defaults: { voice_id: 'rachel' }, tts: { providers: [{ voice_provider: 'provider_1', type: 'stream', base_url: 'wss://tts.example.com' }] } }, {})).not.toThrow();
    expect(() => loadConfig({ voices: { refresh_secs: 0 } }, {})).toThrow(ConfigError);
  });
});

describe('the session line', () => {
  it('names STT, LLM and TTS by provider and type, never a key or URL, and flags a voice provider that is not configured', async () => {
    const { describeSessionProviders } = await import('../../../src/agent/session-providers.ts');
    const config = loadConfig(
      {
        stt: { provider: 'stream', base_url: 'wss://stt.example.com', api_key: 'stt-secret-key', model: 'nova-3' },
        llm: { providers: [{ name: 'local', type: 'echo', models: ['echo'] }, { name: 'acme', type: 'anthropic', base_url: 'https://llm.example.com', api_key: 'llm-secret-key', models: ['m'] }] },
        tts: { providers: [{ voice_provider: 'cartesia', type: 'cartesia', base_url: 'https://tts.example.com', api_key: 'tts-secret-key' }] },
      },
      {},
    );
    const describe = describeSessionProviders(config);
    const agent = { llm: 'acme/m', fallback_llm: 'local/echo', voice_settings: { id: 'c-1', provider: 'provider_3' } } as never;
    const line = describe(agent);
    expect(line).toEqual({
      stt: { provider: 'stream', type: 'stream', model: 'nova-3' },
      llm: { model: 'acme/m', type: 'anthropic', fallback_model: 'local/echo', fallback_type: 'echo' },
      tts: { provider: 'provider_3', type: 'cartesia', voice: 'c-1' },
    });
    expect(JSON.stringify(line)).not.toMatch(/secret|example\.com/);
    expect(describe({ llm: 'local/echo', fallback_llm: 'local/echo', voice_settings: { id: 'v', provider: 'provider_4' } } as never)).toMatchObject({ tts: { provider: 'provider_4', type: 'local', configured: false } });
  });
});
