/**
 * OpenAI has no voice-list API: its text-to-speech guide documents a fixed set of built-in voices
 * (the slot of type `openai`), which speak the languages Whisper knows, hence `multi`. The same
 * type also serves OpenAI-compatible servers (a local Kokoro or Piper server), whose voices have
 * their own names and no standard list: for a base_url not at api.openai.com nothing is listed
 * and voice ids pass unchecked rather than being held to OpenAI's names.
 */
import type { VoiceListFetcher } from './types.ts';

export const OPENAI_VOICES = ['alloy', 'ash', 'ballad', 'coral', 'echo', 'fable', 'nova', 'onyx', 'sage', 'shimmer', 'verse', 'marin', 'cedar'] as const;

export const openAiVoices: VoiceListFetcher = async ({ baseUrl }) => {
  if (new URL(baseUrl).hostname !== 'api.openai.com') return { voices: [], complete: false };
  return {
    voices: OPENAI_VOICES.map((id) => ({ id, name: id[0]!.toUpperCase() + id.slice(1), description: 'OpenAI built-in voice', languages: ['multi'] })),
    complete: true,
  };
};
