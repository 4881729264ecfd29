/**
 * ElevenLabs voices: `GET /v1/voices` with `xi-api-key` (the slot of type `stream`). The answer
 * is `{ voices: [{ voice_id, name, description, preview_url, labels, verified_languages }] }`:
 * the account's own voices and the library voices added to it, which are the ones its TTS takes.
 */
import { compact, httpUrl, isRecord, requestJson, str, VoiceListError } from './http-json.ts';
import type { FetchedVoice, VoiceListFetcher } from './types.ts';

export const fetchElevenLabsVoices: VoiceListFetcher = async ({ baseUrl, apiKey, signal }) => {
  // The stream adapter takes the origin with or without /v1; the list lives at /v1/voices.
  const url = httpUrl(baseUrl.replace(/\/v1\/*$/, ''), '/v1/voices');
  const body = await requestJson('elevenlabs', url, { headers: { 'xi-api-key': apiKey }, signal });
  if (!isRecord(body) || !Array.isArray(body.voices)) throw new VoiceListError('elevenlabs: /v1/voices answered without a voices array');
  return { voices: body.voices.flatMap((v) => voiceOf(v)), complete: true };
};

function voiceOf(v: unknown): FetchedVoice[] {
  if (!isRecord(v) || str(v.voice_id) === undefined) return [];
  const labels = isRecord(v.labels) ? v.labels : {};
  const verified = Array.isArray(v.verified_languages) ? v.verified_languages.flatMap((l) => (isRecord(l) && str(l.language) ? [str(l.language)!] : [])) : [];
  const languages = [...new Set(verified.length > 0 ? verified : str(labels.language) ? [str(labels.language)!] : [])];
  return [compact({ id: str(v.voice_id)!, name: str(v.name) ?? str(v.voice_id)!, description: str(v.description) ?? str(labels.description), languages, preview_url: str(v.preview_url) })];
}
