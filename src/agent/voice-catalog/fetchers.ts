/** The voice-list fetcher of each TTS adapter type that talks to a vendor (`local` has none). */
import type { TtsProviderConfig } from '../../config.ts';
import { fetchCartesiaVoices } from './cartesia.ts';
import { fetchElevenLabsVoices } from './elevenlabs.ts';
import { fetchFishVoices } from './fish.ts';
import { fetchHumeVoices } from './hume.ts';
import { fetchMinimaxVoices } from './minimax.ts';
import { openAiVoices } from './openai.ts';
import type { VoiceListFetcher } from './types.ts';

export type RemoteType = Exclude<TtsProviderConfig['type'], 'local'>;

export const VOICE_LIST_FETCHERS: Record<RemoteType, VoiceListFetcher> = {
  stream: fetchElevenLabsVoices,
  openai: openAiVoices,
  cartesia: fetchCartesiaVoices,
  hume: fetchHumeVoices,
  minimax: fetchMinimaxVoices,
  fish: fetchFishVoices,
};
