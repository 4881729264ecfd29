import { describe, expect, it } from 'vitest';
import { createSttProvider } from '../../../src/agent/providers/stt/index.ts';
import { LocalUtteranceProvider } from '../../../src/agent/providers/stt/local.ts';
import { OpenAiTranscriptionProvider } from '../../../src/agent/providers/stt/openai.ts';
import { StreamingWsSttProvider } from '../../../src/agent/providers/stt/stream.ts';
import { SttError } from '../../../src/agent/errors.ts';

describe('createSttProvider', () => {
  it('builds the configured provider', () => {
    const base = { base_url: 'http://127.0.0.1:1/v1', api_key: '', model: 'm' };
    expect(createSttProvider({ ...base, provider: 'local', base_url: '' })).toBeInstanceOf(LocalUtteranceProvider);
    expect(createSttProvider({ ...base, provider: 'openai' })).toBeInstanceOf(OpenAiTranscriptionProvider);
    expect(createSttProvider({ ...base, provider: 'stream' })).toBeInstanceOf(StreamingWsSttProvider);
    expect(createSttProvider({ ...base, provider: 'stream' }).name).toBe('stream');
  });

  it.each(['openai', 'stream'] as const)('throws VENDOR_NOT_CONFIGURED for %s without base_url', (provider) => {
    const build = () => createSttProvider({ provider, base_url: '', api_key: 'k', model: 'm' });
    expect(build).toThrow(SttError);
    expect(build).toThrow(/base_url/);
    try {
      build();
    } catch (err) {
      expect((err as SttError).code).toBe('VENDOR_NOT_CONFIGURED');
    }
  });

  it('throws VENDOR_NOT_CONFIGURED for an unknown provider or a base_url that is not a URL', () => {
    const unknown = () => createSttProvider({ provider: 'nope' as never, base_url: 'http://x', api_key: '', model: '' });
    const badUrl = () => createSttProvider({ provider: 'openai', base_url: 'not a url', api_key: '', model: '' });
    for (const build of [unknown, badUrl]) {
      expect(build).toThrow(expect.objectContaining({ code: 'VENDOR_NOT_CONFIGURED' }));
    }
  });
});
