/**
 * Where an imported number's calls go: this daemon's voice webhook. Import points new numbers
 * there (src/api/routes/telco.ts); `callbridge telco set-voice-urls` points those imported
 * earlier, or again after http.public_url changed. Only VoiceUrl, VoiceMethod, StatusCallback and
 * StatusCallbackMethod are written: the status callback tells us when a caller hangs up even if
 * the media stream's socket does not say so.
 */
import type { Config } from '../config.ts';
import type { Store } from '../store/index.ts';
import type { CarrierClient } from './carrier-client.ts';

/** The path of the voice webhook (src/api/routes/twilio.ts serves it). */
export const TWILIO_VOICE_PATH = '/v1/telco/twilio/voice';

/** The media stream WebSocket (src/api/routes/twilio.ts). */
export const TWILIO_STREAM_PATH = '/v1/telco/twilio/stream';
/** The call status callback (src/api/routes/twilio.ts): numbers' and outbound calls' progress. */
export const TWILIO_STATUS_PATH = '/v1/telco/twilio/status';

/** The status callback URL beside a voice webhook URL. */
export function statusCallbackOf(voiceUrl: string): string {
  return voiceUrl.slice(0, voiceUrl.length - TWILIO_VOICE_PATH.length) + TWILIO_STATUS_PATH;
}

/** The webhook URL for a public base URL. */
export function voiceUrlOf(publicUrl: string): string {
  return publicUrl.replace(/\/+$/, '') + TWILIO_VOICE_PATH;
}

export interface VoiceUrlOutcome {
  org_id: string;
  id: string;
  phone_number: string;
  phone_sid: string;
  /** undefined: set; else why not (the carrier's answer, never a token). */
  error?: string;
}

/** Points every imported number (of one organization, when given) at `voiceUrl`, one after another. */
export async function setVoiceUrls(store: Store, carrier: CarrierClient, voiceUrl: string, orgId?: string): Promise<VoiceUrlOutcome[]> {
  const out: VoiceUrlOutcome[] = [];
  for (const n of store.telcoNumbers.listAll()) {
    if (orgId !== undefined && n.org_id !== orgId) continue;
    const o: VoiceUrlOutcome = { org_id: n.org_id, id: n.id, phone_number: n.phone_number, phone_sid: n.phone_sid };
    try {
      const creds = store.telcoNumbers.credentials(n.org_id, n.id);
      if (creds === undefined) throw new Error('number gone');
      await carrier.setVoiceUrl(creds.account_sid, creds.auth_token, n.phone_sid, voiceUrl, statusCallbackOf(voiceUrl));
    } catch (err) {
      o.error = err instanceof Error ? err.message : String(err);
    }
    out.push(o);
  }
  return out;
}

/** The URL import points numbers at, or undefined when that is not ours to do (no public URL, or turned off). */
export function importVoiceUrl(config: Config): string | undefined {
  if (!config.telco.set_voice_url || config.http.public_url === '') return undefined;
  return voiceUrlOf(config.http.public_url);
}
