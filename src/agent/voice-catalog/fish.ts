/**
 * Fish Audio voices: `GET /model` with `Authorization: Bearer`, the account's own models
 * (`self=true`), pages numbered from 1: `{ total, items: [{ _id, title, description, languages,
 * samples: [{ audio }] }] }`. Fish's public library (hundreds of thousands of models, any of
 * which the TTS takes as `reference_id`) cannot be listed whole, so this list is never complete:
 * a voice id outside it is accepted.
 */
import { compact, httpUrl, isRecord, requestJson, str, VoiceListError } from './http-json.ts';
import { MAX_PAGES, type FetchedVoice, type VoiceListFetcher } from './types.ts';

export const fetchFishVoices: VoiceListFetcher = async ({ baseUrl, apiKey, signal }) => {
  const voices: FetchedVoice[] = [];
  let seen = 0; // items received, voices or not: a page may hold fewer than asked
  for (let page = 1; page <= MAX_PAGES; page++) {
    const url = httpUrl(baseUrl, '/model');
    url.searchParams.set('self', 'true');
    url.searchParams.set('page_size', '100');
    url.searchParams.set('page_number', String(page));
    const body = await requestJson('fish', url, { headers: { authorization: `Bearer ${apiKey}` }, signal });
    if (!isRecord(body) || !Array.isArray(body.items)) throw new VoiceListError('fish: /model answered without an items array');
    seen += body.items.length;
    for (const v of body.items) {
      if (!isRecord(v) || str(v._id) === undefined) continue;
      if (v.type !== undefined && v.type !== 'tts') continue; // svc models are not TTS voices
      const sample = Array.isArray(v.samples) && isRecord(v.samples[0]) ? str(v.samples[0].audio) : undefined;
      const languages = Array.isArray(v.languages) ? v.languages.filter((l): l is string => typeof l === 'string') : [];
      voices.push(compact({ id: str(v._id)!, name: str(v.title) ?? str(v._id)!, description: str(v.description), languages, preview_url: sample }));
    }
    const total = typeof body.total === 'number' ? body.total : 0;
    if (body.items.length === 0 || seen >= total) break;
  }
  return { voices, complete: false };
};
