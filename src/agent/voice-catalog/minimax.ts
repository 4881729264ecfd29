/**
 * MiniMax voices: `POST /v1/get_voice` with `Authorization: Bearer` and `{ voice_type: "all" }`.
 * The answer holds `system_voice: [{ voice_id, voice_name, description[] }]`, `voice_cloning` and
 * `voice_generation` (`[{ voice_id, description[] }]`) and `base_resp: { status_code, status_msg }`,
 * where a status other than 0 is an error even under HTTP 200.
 */
import { compact, httpUrl, isRecord, requestJson, str, VoiceListError } from './http-json.ts';
import type { FetchedVoice, VoiceListFetcher } from './types.ts';

export const fetchMinimaxVoices: VoiceListFetcher = async ({ baseUrl, apiKey, signal }) => {
  const url = httpUrl(baseUrl, '/v1/get_voice');
  const body = await requestJson('minimax', url, { method: 'POST', headers: { authorization: `Bearer ${apiKey}` }, body: { voice_type: 'all' }, signal });
  if (!isRecord(body)) throw new VoiceListError('minimax: /v1/get_voice answered something that is not an object');
  const base = isRecord(body.base_resp) ? body.base_resp : undefined;
  if (base && typeof base.status_code === 'number' && base.status_code !== 0) {
    const hint = base.status_code === 1004 ? ' (the API key was rejected: check api_key)' : '';
    throw new VoiceListError(`minimax: /v1/get_voice failed with status_code ${base.status_code}: ${str(base.status_msg) ?? ''}${hint}`);
  }
  const voices: FetchedVoice[] = [];
  for (const [group, label] of [['system_voice', 'system voice'], ['voice_cloning', 'cloned voice'], ['voice_generation', 'designed voice']] as const) {
    const list = body[group];
    if (!Array.isArray(list)) continue;
    for (const v of list) {
      if (!isRecord(v) || str(v.voice_id) === undefined) continue;
      const desc = Array.isArray(v.description) ? v.description.filter((d): d is string => typeof d === 'string' && d !== '').join(' ') : str(v.description);
      voices.push(compact({ id: str(v.voice_id)!, name: str(v.voice_name) ?? str(v.voice_id)!, description: desc || `MiniMax ${label}`, languages: [] }));
    }
  }
  return { voices, complete: true };
};
