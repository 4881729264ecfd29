/**
 * Hume voices: `GET /v0/tts/voices?provider=HUME_AI`, then `provider=CUSTOM_VOICE`, with
 * `X-Hume-Api-Key`: the Voice Library and the account's own saved voices, both of which the TTS
 * takes by id. Each answer is a page `{ page_number, total_pages, voices_page: [{ id, name }] }`,
 * pages numbered from 0. The adapter sends a voice that is not a UUID as a Voice Library name
 * (`provider: "HUME_AI"`), so a library voice's name is an alias of its id.
 */
import { httpUrl, isRecord, requestJson, str, VoiceListError } from './http-json.ts';
import { MAX_PAGES, type FetchedVoice, type VoiceListFetcher } from './types.ts';

const SOURCES = [
  ['HUME_AI', 'Hume Voice Library'],
  ['CUSTOM_VOICE', 'Hume custom voice'],
] as const;

export const fetchHumeVoices: VoiceListFetcher = async ({ baseUrl, apiKey, signal }) => {
  const voices: FetchedVoice[] = [];
  let complete = true;
  for (const [provider, description] of SOURCES) {
    let done = false;
    for (let page = 0; page < MAX_PAGES && !done; page++) {
      const url = httpUrl(baseUrl, '/v0/tts/voices');
      url.searchParams.set('provider', provider);
      url.searchParams.set('page_number', String(page));
      url.searchParams.set('page_size', '100');
      const body = await requestJson('hume', url, { headers: { 'X-Hume-Api-Key': apiKey }, signal });
      if (!isRecord(body) || !Array.isArray(body.voices_page)) throw new VoiceListError('hume: /v0/tts/voices answered without a voices_page array');
      for (const v of body.voices_page) {
        if (!isRecord(v) || str(v.id) === undefined) continue;
        const name = str(v.name) ?? str(v.id)!;
        voices.push({ id: str(v.id)!, name, description, languages: [], ...(provider === 'HUME_AI' ? { aliases: [name] } : {}) });
      }
      const total = typeof body.total_pages === 'number' ? body.total_pages : 1;
      done = page + 1 >= total || body.voices_page.length === 0;
    }
    if (!done) complete = false;
  }
  return { voices, complete };
};
