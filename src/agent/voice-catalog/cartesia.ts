/**
 * Cartesia voices: `GET /voices` with `X-API-Key` and `Cartesia-Version` (the version the TTS
 * adapter speaks). The answer is a page `{ data: [{ id, name, description, language }],
 * has_more }`; the next page is asked with `starting_after=<last id>`.
 */
import { compact, httpUrl, isRecord, requestJson, str, VoiceListError } from './http-json.ts';
import { MAX_PAGES, type FetchedVoice, type VoiceListFetcher } from './types.ts';

export const CARTESIA_VERSION = '2025-04-16';

export const fetchCartesiaVoices: VoiceListFetcher = async ({ baseUrl, apiKey, signal }) => {
  const voices: FetchedVoice[] = [];
  let after: string | undefined;
  for (let page = 0; page < MAX_PAGES; page++) {
    const url = httpUrl(baseUrl, '/voices');
    url.searchParams.set('limit', '100');
    if (after !== undefined) url.searchParams.set('starting_after', after);
    const body = await requestJson('cartesia', url, { headers: { 'X-API-Key': apiKey, 'Cartesia-Version': CARTESIA_VERSION }, signal });
    // Versions before 2024-11-13 answered a bare array; accept it as one whole page.
    const data = Array.isArray(body) ? body : isRecord(body) && Array.isArray(body.data) ? body.data : undefined;
    if (data === undefined) throw new VoiceListError('cartesia: /voices answered without a data array');
    for (const v of data) {
      if (!isRecord(v) || str(v.id) === undefined) continue;
      voices.push(compact({ id: str(v.id)!, name: str(v.name) ?? str(v.id)!, description: str(v.description), languages: str(v.language) ? [str(v.language)!] : [], preview_url: str(v.preview_file_url) }));
    }
    const more = isRecord(body) && body.has_more === true && data.length > 0;
    if (!more) return { voices, complete: true };
    after = str((data[data.length - 1] as Record<string, unknown>).id);
    if (after === undefined) break;
  }
  return { voices, complete: false };
};
