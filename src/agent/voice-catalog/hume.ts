/**
 * Hume voices: `GET /v0/tts/voices?provider=HUME_AI` with `X-Hume-Api-Key` (the Voice Library,
 * which the TTS adapter names with `provider: "HUME_AI"`). The answer is a page `{ page_number,
 * total_pages, voices_page: [{ id, name }] }`, pages numbered from 0. The adapter takes a voice
 * by id or by name, so the name is an alias of the id.
 */
import { httpUrl, isRecord, requestJson, str, VoiceListError } from './http-json.ts';
import { MAX_PAGES, type FetchedVoice, type VoiceListFetcher } from './types.ts';

export const fetchHumeVoices: VoiceListFetcher = async ({ baseUrl, apiKey, signal }) => {
  const voices: FetchedVoice[] = [];
  for (let page = 0; page < MAX_PAGES; page++) {
    const url = httpUrl(baseUrl, '/v0/tts/voices');
    url.searchParams.set('provider', 'HUME_AI');
    url.searchParams.set('page_number', String(page));
    url.searchParams.set('page_size', '100');
    const body = await requestJson('hume', url, { headers: { 'X-Hume-Api-Key': apiKey }, signal });
    if (!isRecord(body) || !Array.isArray(body.voices_page)) throw new VoiceListError('hume: /v0/tts/voices answered without a voices_page array');
    for (const v of body.voices_page) {
      if (!isRecord(v) || str(v.id) === undefined) continue;
      const name = str(v.name) ?? str(v.id)!;
      voices.push({ id: str(v.id)!, name, description: 'Hume Voice Library', languages: [], aliases: [name] });
    }
    const total = typeof body.total_pages === 'number' ? body.total_pages : 1;
    if (page + 1 >= total || body.voices_page.length === 0) return { voices, complete: true };
  }
  return { voices, complete: false };
};
