import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

const AGENT_FIELDS = [
  'id',
  'phone_number_id',
  'name',
  'llm',
  'fallback_llm',
  'status',
  'prompt',
  'first_message',
  'first_message_interruption_time',
  'default_language',
  'summarize_calls',
  'analysis_fields',
  'created_at',
  'updated_at',
  'noise_cancel_settings',
  'vad_settings',
  'enable_first_message_outbound',
  'voice_settings',
  'timeout_settings',
  'keyterms',
].sort();

describe('agents', () => {
  let d: TestDaemon;
  beforeAll(async () => {
    d = await startTestDaemon({
      llm: { providers: [{ name: 'local', type: 'echo', models: ['echo'] }, { name: 'acme', type: 'openai', base_url: 'http://127.0.0.1:9', models: ['big', 'small'] }] },
      // These tests use every voice provider with the voice ids v, v1 and v2: an agent may only
      // pick a configured provider and a voice of its catalog, so all six are served by the
      // local voice here and those ids are local voices (the rule itself: voice-catalog.test.ts).
      tts: { providers: ['provider_1', 'provider_2', 'provider_3', 'provider_4', 'provider_5', 'provider_6'].map((p) => ({ voice_provider: p, type: 'local' })) },
      voices: { catalog: ['local-en-1', 'v', 'v1', 'v2'].map((id) => ({ id, name: id, languages: ['en'] })) },
    });
  });
  afterAll(() => d.close());

  const create = (body: Record<string, unknown>) => d.api('POST', '/v1/agents', body);

  it('creates with only a name and applies the documented server defaults', async () => {
    const r = await create({ name: 'Support' });
    expect(r.status).toBe(201);
    expect(Object.keys(r.body).sort()).toEqual(AGENT_FIELDS);
    expect(r.body).toMatchObject({
      name: 'Support',
      phone_number_id: '',
      status: 'active',
      default_language: 'en',
      llm: 'local/echo',
      fallback_llm: 'local/echo',
      vad_settings: { start_secs: 0.2, stop_secs: 0.8, silence_timeout_secs: 10 },
      noise_cancel_settings: { enabled: false, level: 50 },
      timeout_settings: { default_timeout: 1800, timeout_action: 'end_call', silence_counter: 2, silence_timeout_action: 'end_call' },
      enable_first_message_outbound: true,
      keyterms: [],
      summarize_calls: false,
      analysis_fields: [],
    });
    expect(r.body.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(new Date(r.body.created_at).toISOString()).toBe(r.body.created_at);
    const got = await d.api('GET', `/v1/agents/${r.body.id}`);
    expect(got.status).toBe(200);
    expect(got.body).toEqual(r.body);
  });

  it('requires a name', async () => {
    const r = await create({ prompt: 'x' });
    expect(r.status).toBe(400);
    expect(r.body.error).toContain('name');
    const empty = await create({ name: '' });
    expect(empty.status).toBe(400);
  });

  it('merges partial nested objects over the defaults on create', async () => {
    const r = await create({ name: 'n', vad_settings: { stop_secs: 1.5 }, noise_cancel_settings: { enabled: true } });
    expect(r.status).toBe(201);
    expect(r.body.vad_settings).toEqual({ start_secs: 0.2, stop_secs: 1.5, silence_timeout_secs: 10 });
    expect(r.body.noise_cancel_settings).toEqual({ enabled: true, level: 50 });
  });

  it('accepts every field of the create body', async () => {
    const body = {
      name: 'Full',
      phone_number_id: null,
      llm: 'acme/big',
      fallback_llm: 'acme/small',
      status: 'inactive',
      prompt: 'Be brief.',
      first_message: 'Hi {{name}}',
      first_message_interruption_time: 2.5,
      default_language: 'fr',
      summarize_calls: true,
      noise_cancel_settings: { enabled: true, level: 80 },
      vad_settings: { start_secs: 0.3, stop_secs: 0.6, silence_timeout_secs: 20 },
      enable_first_message_outbound: false,
      timeout_settings: {
        default_timeout: 600,
        timeout_action: 'transfer_call',
        transfer_number: '+15551230000',
        transfer_message: 'Transferring',
        silence_counter: 3,
        silence_timeout_action: 'end_call',
      },
      keyterms: ['callbridge', 'SIP'],
      voice_settings: { id: 'v1', provider: 'provider_3', speed: 1.2, stability: 0.5, similarity_boost: 0.7, volume: 1 },
    };
    const r = await create(body);
    expect(r.status).toBe(201);
    const { phone_number_id: _p, ...rest } = body;
    expect(r.body).toMatchObject(rest);
    expect(r.body.phone_number_id).toBe('');
  });

  it('rejects models outside the catalog, naming the field', async () => {
    for (const field of ['llm', 'fallback_llm']) {
      const r = await create({ name: 'x', [field]: 'acme/huge' });
      expect(r.status, field).toBe(400);
      expect(r.body.error).toContain(field);
      expect(r.body.error).toContain('acme/big');
    }
  });

  it('enforces the Limits table and enums', async () => {
    const cases: Array<[Record<string, unknown>, number, string]> = [
      [{ noise_cancel_settings: { level: 0 } }, 201, 'level 0'],
      [{ noise_cancel_settings: { level: 100 } }, 201, 'level 100'],
      [{ noise_cancel_settings: { level: 100.5 } }, 400, 'level > 100'],
      [{ noise_cancel_settings: { level: -1 } }, 400, 'level < 0'],
      [{ voice_settings: { id: 'v', provider: 'provider_6', speed: 0, stability: 2, similarity_boost: 1.99, volume: 0.01 } }, 201, 'tuning in range'],
      [{ voice_settings: { id: 'v', provider: 'provider_1', speed: 2.01 } }, 400, 'speed > 2'],
      [{ voice_settings: { id: 'v', provider: 'provider_1', stability: -0.1 } }, 400, 'stability < 0'],
      [{ voice_settings: { id: 'v', provider: 'provider_1', similarity_boost: 3 } }, 400, 'similarity_boost > 2'],
      [{ voice_settings: { id: 'v', provider: 'provider_1', volume: 2.5 } }, 400, 'volume > 2'],
      [{ voice_settings: { id: 'v', provider: 'provider_7' } }, 400, 'provider enum'],
      [{ voice_settings: { provider: 'provider_1' } }, 400, 'voice id required'],
      [{ default_language: 'xx' }, 400, 'language enum'],
      [{ default_language: 'multi' }, 201, 'language multi'],
      [{ status: 'paused' }, 400, 'status enum'],
      [{ timeout_settings: { default_timeout: 7200 } }, 201, 'default_timeout at the bound'],
      [{ timeout_settings: { default_timeout: 7201 } }, 400, 'default_timeout above the bound'],
      [{ timeout_settings: { default_timeout: 0 } }, 400, 'default_timeout zero'],
      [{ timeout_settings: { timeout_action: 'hang_up' } }, 400, 'timeout_action enum'],
      [{ timeout_settings: { silence_timeout_action: 'transfer' } }, 400, 'silence_timeout_action enum'],
      [{ timeout_settings: { silence_counter: 1.5 } }, 400, 'silence_counter integer'],
      [{ timeout_settings: { timeout_action: 'transfer_call' } }, 400, 'transfer without number'],
      [{ timeout_settings: { silence_timeout_action: 'transfer_call', silence_transfer_number: '+4930123' } }, 201, 'silence transfer'],
      [{ keyterms: ['a'.repeat(101)] }, 400, 'keyterm too long'],
      [{ keyterms: Array.from({ length: 101 }, (_, i) => `k${i}`) }, 400, 'too many keyterms'],
      [{ keyterms: [''] }, 400, 'empty keyterm'],
      [{ summarize_calls: 'yes' }, 400, 'boolean type'],
      [{ first_message_interruption_time: '3' }, 400, 'number type (no coercion)'],
      [{ phone_number_id: 'not-a-uuid' }, 400, 'phone_number_id format'],
    ];
    for (const [extra, status, label] of cases) {
      const r = await create({ name: 'limits', ...extra });
      expect(r.status, `${label}: ${r.text}`).toBe(status);
      if (status === 400) expect(typeof r.body.error, label).toBe('string');
    }
  });

  it('analysis_fields: kept as sent, replaced whole by PATCH; bad input is a 400 naming the field', async () => {
    const fields = [
      { name: 'outcome', description: 'how the call ended', choices: ['booked', 'declined'] },
      { name: 'sentiment', choices: ['happy', 'neutral', 'angry'] },
    ];
    const r = await create({ name: 'analysed', summarize_calls: true, analysis_fields: fields });
    expect(r.status, r.text).toBe(201);
    expect(r.body).toMatchObject({ summarize_calls: true, analysis_fields: fields });
    expect((await d.api('GET', `/v1/agents/${r.body.id}`)).body.analysis_fields).toEqual(fields);
    // A PATCH of another field keeps them; a PATCH of the list replaces it; [] clears it.
    expect((await d.api('PATCH', `/v1/agents/${r.body.id}`, { prompt: 'p' })).body.analysis_fields).toEqual(fields);
    expect((await d.api('PATCH', `/v1/agents/${r.body.id}`, { analysis_fields: [fields[1]] })).body.analysis_fields).toEqual([fields[1]]);
    expect((await d.api('PATCH', `/v1/agents/${r.body.id}`, { analysis_fields: [] })).body.analysis_fields).toEqual([]);

    const ok = { name: 'outcome', choices: ['a'] };
    const bad: Array<[unknown, RegExp]> = [
      ['outcome', /^body\.analysis_fields must be array/],
      [[{ choices: ['a'] }], /^body\.analysis_fields\.0\.name is required/],
      [[{ name: 'outcome' }], /^body\.analysis_fields\.0\.choices is required/],
      [[{ ...ok, name: '1st' }], /^body\.analysis_fields\.0\.name must match/],
      [[{ ...ok, name: 'x'.repeat(65) }], /^body\.analysis_fields\.0\.name must NOT have more than 64 characters/],
      [[{ ...ok, choices: [] }], /^body\.analysis_fields\.0\.choices must NOT have fewer than 1 items/],
      [[{ ...ok, choices: ['a', 'a'] }], /^body\.analysis_fields\.0\.choices must NOT have duplicate items/],
      [[{ ...ok, choices: [''] }], /^body\.analysis_fields\.0\.choices\.0 must NOT have fewer than 1 characters/],
      [[{ ...ok, choices: [3] }], /^body\.analysis_fields\.0\.choices\.0 must be string/],
      [[{ ...ok, choices: Array.from({ length: 21 }, (_, i) => `c${i}`) }], /^body\.analysis_fields\.0\.choices must NOT have more than 20 items/],
      [[{ ...ok, colour: 'red' }], /^body\.analysis_fields\.0\.colour is not a known field/],
      [Array.from({ length: 11 }, (_, i) => ({ name: `f${i}`, choices: ['a'] })), /^body\.analysis_fields must NOT have more than 10 items/],
      [[ok, { name: 'outcome', choices: ['b'] }], /^body\.analysis_fields\.1\.name: "outcome" is named twice/],
    ];
    for (const [value, message] of bad) {
      const c = await create({ name: 'bad analysis', analysis_fields: value });
      expect(c.status, JSON.stringify(value)).toBe(400);
      expect(c.body.error, JSON.stringify(value)).toMatch(message);
      const p = await d.api('PATCH', `/v1/agents/${r.body.id}`, { analysis_fields: value });
      expect(p.status, JSON.stringify(value)).toBe(400);
      expect(p.body.error, JSON.stringify(value)).toMatch(message);
    }
    expect((await d.api('GET', `/v1/agents/${r.body.id}`)).body.analysis_fields).toEqual([]);
  });

  it('names the unknown field, at top level and nested', async () => {
    const top = await create({ name: 'x', colour: 'red' });
    expect(top.status).toBe(400);
    expect(top.body.error).toContain('colour');
    const nested = await create({ name: 'x', vad_settings: { start: 1 } });
    expect(nested.status).toBe(400);
    expect(nested.body.error).toContain('vad_settings.start');
  });

  it('an empty or omitted keyterms list on create means the server default', async () => {
    const d2 = await startTestDaemon({ agent_defaults: { keyterms: ['default-term'] } });
    try {
      expect((await d2.api('POST', '/v1/agents', { name: 'a', keyterms: [] })).body.keyterms).toEqual(['default-term']);
      expect((await d2.api('POST', '/v1/agents', { name: 'a' })).body.keyterms).toEqual(['default-term']);
      expect((await d2.api('POST', '/v1/agents', { name: 'a', keyterms: ['x'] })).body.keyterms).toEqual(['x']);
    } finally {
      await d2.close();
    }
  });

  describe('PATCH', () => {
    let agent: any;
    beforeAll(async () => {
      agent = (
        await create({
          name: 'Patchy',
          prompt: 'p0',
          keyterms: ['one', 'two'],
          vad_settings: { start_secs: 0.1, stop_secs: 0.5, silence_timeout_secs: 5 },
          voice_settings: { id: 'v', provider: 'provider_2', speed: 1.5 },
        })
      ).body;
    });

    it('changes only the sent fields', async () => {
      const r = await d.api('PATCH', `/v1/agents/${agent.id}`, { prompt: 'p1' });
      expect(r.status).toBe(200);
      const { prompt: _a, updated_at: _b, ...before } = agent;
      const { prompt, updated_at, ...after } = r.body;
      expect(prompt).toBe('p1');
      expect(after).toEqual(before);
      expect(updated_at >= agent.updated_at).toBe(true);
      expect((await d.api('GET', `/v1/agents/${agent.id}`)).body.prompt).toBe('p1');
    });

    it('merges vad_settings field by field', async () => {
      const r = await d.api('PATCH', `/v1/agents/${agent.id}`, { vad_settings: { stop_secs: 0.9 } });
      expect(r.body.vad_settings).toEqual({ start_secs: 0.1, stop_secs: 0.9, silence_timeout_secs: 5 });
    });

    it('replaces keyterms as a whole list, and [] empties it', async () => {
      expect((await d.api('PATCH', `/v1/agents/${agent.id}`, { keyterms: ['three'] })).body.keyterms).toEqual(['three']);
      expect((await d.api('PATCH', `/v1/agents/${agent.id}`, { keyterms: [] })).body.keyterms).toEqual([]);
    });

    it('validates like create and changes nothing on a bad request', async () => {
      const before = (await d.api('GET', `/v1/agents/${agent.id}`)).body;
      for (const body of [{ prompt: 'new', noise_cancel_settings: { level: 101 } }, { prompt: 'new', llm: 'nope/x' }, { prompt: 'new', extra: 1 }, { name: '' }]) {
        const r = await d.api('PATCH', `/v1/agents/${agent.id}`, body);
        expect(r.status, JSON.stringify(body)).toBe(400);
      }
      expect((await d.api('GET', `/v1/agents/${agent.id}`)).body).toEqual(before);
    });

    it('checks cross-field rules on the merged agent', async () => {
      const r = await d.api('PATCH', `/v1/agents/${agent.id}`, { timeout_settings: { timeout_action: 'transfer_call' } });
      expect(r.status).toBe(400);
      expect(r.body.error).toContain('transfer_number');
      const ok = await d.api('PATCH', `/v1/agents/${agent.id}`, { timeout_settings: { timeout_action: 'transfer_call', transfer_number: '+15550001111' } });
      expect(ok.status).toBe(200);
      expect(ok.body.timeout_settings).toMatchObject({ default_timeout: 1800, timeout_action: 'transfer_call', transfer_number: '+15550001111' });
    });

    it('404s for a missing agent and 400s for a malformed id', async () => {
      expect((await d.api('PATCH', '/v1/agents/00000000-0000-4000-8000-000000000000', { name: 'x' })).status).toBe(404);
      const bad = await d.api('PATCH', '/v1/agents/123', { name: 'x' });
      expect(bad.status).toBe(400);
      expect(bad.body.error).toContain('uuid');
    });
  });

  it('lists agents with limit and offset', async () => {
    const dl = await startTestDaemon();
    try {
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) ids.push((await dl.api('POST', '/v1/agents', { name: `a${i}` })).body.id);
      const all = await dl.api('GET', '/v1/agents');
      expect(all.status).toBe(200);
      expect(all.body.map((a: any) => a.id)).toEqual(ids);
      const page = await dl.api('GET', '/v1/agents?limit=2&offset=1');
      expect(page.body.map((a: any) => a.id)).toEqual(ids.slice(1, 3));
      expect((await dl.api('GET', '/v1/agents?limit=0')).status).toBe(400);
      expect((await dl.api('GET', '/v1/agents?offset=-1')).status).toBe(400);
      expect((await dl.api('GET', '/v1/agents?limit=abc')).status).toBe(400);
    } finally {
      await dl.close();
    }
  });

  it('deletes an agent (204, then 404)', async () => {
    const a = (await create({ name: 'gone' })).body;
    const del = await d.api('DELETE', `/v1/agents/${a.id}`);
    expect(del.status).toBe(204);
    expect(del.text).toBe('');
    expect((await d.api('GET', `/v1/agents/${a.id}`)).status).toBe(404);
    expect((await d.api('DELETE', `/v1/agents/${a.id}`)).status).toBe(404);
  });

  // The names of the service's own documents (its OpenAPI and SDK types), accepted beside the API
  // document's, so the service's SDK works unmodified: responses keep the API document's names.
  describe('the service SDK\'s names', () => {
    it.each([
      ['elevenlabs', 'provider_1'],
      ['openai', 'provider_2'],
      ['cartesia', 'provider_3'],
      ['hume', 'provider_4'],
      ['minimax', 'provider_5'],
      ['fish', 'provider_6'],
    ])('voice_settings.provider %s is %s, on create and on PATCH', async (vendor, neutral) => {
      const r = await create({ name: `voice ${vendor}`, voice_settings: { id: 'v1', provider: vendor } });
      expect(r.status, r.text).toBe(201);
      expect(r.body.voice_settings).toEqual({ id: 'v1', provider: neutral });
      const p = await d.api('PATCH', `/v1/agents/${r.body.id}`, { voice_settings: { id: 'v2', provider: vendor, speed: 1.1 } });
      expect(p.status, p.text).toBe(200);
      expect(p.body.voice_settings).toEqual({ id: 'v2', provider: neutral, speed: 1.1 });
      expect((await d.api('GET', `/v1/agents/${r.body.id}`)).body.voice_settings.provider).toBe(neutral);
    });

    it('an unknown provider name is still a 400 naming the field', async () => {
      const r = await create({ name: 'bad voice', voice_settings: { id: 'v1', provider: 'google' } });
      expect(r.status).toBe(400);
      expect(r.body.error).toMatch(/^body\.voice_settings\.provider must be one of .*"provider_1".*"elevenlabs"/);
    });

    it('the camelCase timeout twins and the vad twins mean the canonical fields', async () => {
      const r = await create({
        name: 'twins',
        vad_settings: { starting_secs: 0.3, stopping_secs: 1.2 },
        timeout_settings: {
          defaultTimeout: 600,
          timeoutAction: 'transfer_call',
          transferNumber: '+15551230000',
          transferMessage: 'One moment.',
          silenceCounter: 3,
          silenceTimeoutAction: 'transfer_call',
          silenceTransferNumber: '+15551230001',
          silenceTransferMessage: 'Passing you to a colleague.',
        },
      });
      expect(r.status, r.text).toBe(201);
      expect(r.body.vad_settings).toMatchObject({ start_secs: 0.3, stop_secs: 1.2 });
      expect(r.body.timeout_settings).toEqual({
        default_timeout: 600,
        timeout_action: 'transfer_call',
        transfer_number: '+15551230000',
        transfer_message: 'One moment.',
        silence_counter: 3,
        silence_timeout_action: 'transfer_call',
        silence_transfer_number: '+15551230001',
        silence_transfer_message: 'Passing you to a colleague.',
      });
      const p = await d.api('PATCH', `/v1/agents/${r.body.id}`, { vad_settings: { stopping_secs: 0.9 }, timeout_settings: { silenceTransferMessage: 'Hold on.' } });
      expect(p.status, p.text).toBe(200);
      expect(p.body.vad_settings).toMatchObject({ start_secs: 0.3, stop_secs: 0.9 });
      expect(p.body.timeout_settings).toMatchObject({ silence_transfer_message: 'Hold on.', transfer_message: 'One moment.' });
      expect(Object.keys(p.body.timeout_settings)).not.toContain('silenceTransferMessage');
    });

    it('a field sent under both names: the same value is fine, different values are a 400', async () => {
      const same = await create({ name: 'same', vad_settings: { start_secs: 0.4, starting_secs: 0.4 }, timeout_settings: { default_timeout: 90, defaultTimeout: 90 } });
      expect(same.status, same.text).toBe(201);
      expect(same.body.timeout_settings.default_timeout).toBe(90);
      for (const [body, message] of [
        [{ vad_settings: { start_secs: 0.4, starting_secs: 0.5 } }, 'body.vad_settings.start_secs and body.vad_settings.starting_secs'],
        [{ timeout_settings: { timeout_action: 'end_call', timeoutAction: 'transfer_call' } }, 'body.timeout_settings.timeout_action and body.timeout_settings.timeoutAction'],
      ] as const) {
        const r = await create({ name: 'conflict', ...body });
        expect(r.status, JSON.stringify(body)).toBe(400);
        expect(r.body.error).toContain(message);
        const p = await d.api('PATCH', `/v1/agents/${same.body.id}`, body);
        expect(p.status).toBe(400);
      }
      expect((await d.api('GET', `/v1/agents/${same.body.id}`)).body.vad_settings.start_secs).toBe(0.4);
    });

    it('a twin is validated like its field, and the transfer rule sees it', async () => {
      const r = await create({ name: 'bad twin', timeout_settings: { defaultTimeout: -1 } });
      expect(r.status).toBe(400);
      expect(r.body.error).toContain('body.timeout_settings.defaultTimeout');
      const noTarget = await create({ name: 'no target', timeout_settings: { silenceTimeoutAction: 'transfer_call' } });
      expect(noTarget.status).toBe(400);
      expect(noTarget.body.error).toMatch(/silence_transfer_number is required/);
    });
  });
});
