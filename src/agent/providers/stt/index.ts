/**
 * The STT provider chosen by configuration (`stt.provider`, `stt.base_url`, `stt.api_key`,
 * `stt.model`):
 *
 *   local   no service: describes utterances, recognizes no words (see local.ts)
 *   openai  an OpenAI-compatible `/audio/transcriptions` endpoint, batch per utterance
 *   stream  a Deepgram-compatible live WebSocket (`/v1/listen`), interim results
 */
import { SttError } from '../../errors.ts';
import type { SttProvider } from '../types.ts';
import { LocalUtteranceProvider } from './local.ts';
import { OpenAiTranscriptionProvider } from './openai.ts';
import { StreamingWsSttProvider } from './stream.ts';

export { LocalUtteranceProvider, describeUtterance } from './local.ts';
export { OpenAiTranscriptionProvider, type OpenAiTranscriptionOptions } from './openai.ts';
export { StreamingWsSttProvider, listenUrl, type StreamingWsSttOptions } from './stream.ts';
export { pcm16ToWav, pcm16ToLittleEndian } from './wav.ts';

export type SttProviderName = 'local' | 'openai' | 'stream';

export interface SttConfig {
  provider: SttProviderName;
  base_url: string;
  api_key: string;
  model: string;
}

/** @throws SttError VENDOR_NOT_CONFIGURED for an unknown provider or a service without base_url. */
export function createSttProvider(config: SttConfig): SttProvider {
  const provider = config.provider as string;
  if (provider === 'local') return new LocalUtteranceProvider();
  if (provider !== 'openai' && provider !== 'stream') {
    throw new SttError('VENDOR_NOT_CONFIGURED', `unknown STT provider "${provider}" (local, openai, stream)`);
  }
  if (!config.base_url) {
    throw new SttError('VENDOR_NOT_CONFIGURED', `STT provider "${provider}" needs stt.base_url`);
  }
  try {
    new URL(config.base_url);
  } catch (err) {
    throw new SttError('VENDOR_NOT_CONFIGURED', `stt.base_url is not a URL`, { cause: err });
  }
  const options = { baseUrl: config.base_url, apiKey: config.api_key, model: config.model };
  return provider === 'openai' ? new OpenAiTranscriptionProvider(options) : new StreamingWsSttProvider(options);
}
