/**
 * Where an imported number's calls go: this daemon's voice webhook. Import points new numbers
 * there (src/api/routes/telco.ts); `callbridge telco set-voice-urls` points those imported
 * earlier, or again after http.public_url changed. Only VoiceUrl, VoiceMethod, StatusCallback and
 * StatusCallbackMethod are written: the status callback tells us when a caller hangs up even if
 * the media stream's socket does not say so. What the number had before is read first and stored
 * with the import; deleting the import gives it back (restoreNumber, docs/telco.md).
 */
import type { Config } from '../config.ts';
import type { Store } from '../store/index.ts';
import type { CarrierClient, NumberWebhook } from './carrier-client.ts';

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
  for (const n of await store.telcoNumbers.listAll()) {
    if (orgId !== undefined && n.org_id !== orgId) continue;
    const o: VoiceUrlOutcome = { org_id: n.org_id, id: n.id, phone_number: n.phone_number, phone_sid: n.phone_sid };
    try {
      const creds = await store.telcoNumbers.credentials(n.org_id, n.id);
      if (creds === undefined) throw new Error('number gone');
      const previous = await pointNumber(store, carrier, creds, n.phone_sid, voiceUrl, { orgId: n.org_id, id: n.id });
      await store.telcoNumbers.setPreviousWebhook(n.org_id, n.id, previous);
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

const EMPTY_WEBHOOK: NumberWebhook = { voice_url: '', voice_method: '', status_callback: '', status_callback_method: '' };

/**
 * Reads the number's webhook at the carrier, then points it at `voiceUrl`. Resolves with what the
 * import must store as the webhook to give back on delete: what the carrier had, unless that was
 * already this daemon's (the same URL, or our voice path while a previous one is stored, e.g. after
 * http.public_url changed); then what was stored before (this import's, else another import's of
 * the same number), else all fields empty (delete then clears them).
 * @throws DomainError as the carrier client does; nothing was written then if the read failed.
 */
export async function pointNumber(
  store: Store,
  carrier: CarrierClient,
  creds: { account_sid: string; auth_token: string },
  phoneSid: string,
  voiceUrl: string,
  existing?: { orgId: string; id: string },
): Promise<NumberWebhook> {
  const current = await carrier.getNumberWebhook(creds.account_sid, creds.auth_token, phoneSid);
  const stored = existing ? await store.telcoNumbers.previousWebhook(existing.orgId, existing.id) : undefined;
  const ours = current.voice_url === voiceUrl || (stored !== undefined && current.voice_url.endsWith(TWILIO_VOICE_PATH));
  const previous = !ours ? current : (stored ?? (await store.telcoNumbers.previousWebhookOfSid(phoneSid, existing?.id ?? '')) ?? EMPTY_WEBHOOK);
  await carrier.setVoiceUrl(creds.account_sid, creds.auth_token, phoneSid, voiceUrl, statusCallbackOf(voiceUrl));
  return previous;
}

/** What deleting an import did at the carrier (the delete answer's fields, docs/telco.md). */
export interface WebhookRestore {
  carrier_webhook_restored: boolean;
  /** Why not, when not restored: never carries a token. */
  carrier_webhook_reason?: string;
}

/**
 * Gives the number back the webhook it had before callbridge set it, if callbridge set it, no
 * other import of the number remains, and the carrier still points it at this daemon (read
 * first: a webhook changed at the carrier since is left alone). Never throws: a carrier failure
 * is reported in the outcome.
 */
export async function restoreNumber(
  store: Store,
  carrier: CarrierClient,
  config: Config,
  number: { org_id: string; id: string; phone_sid: string; phone_number: string; account_sid: string },
): Promise<WebhookRestore> {
  const previous = await store.telcoNumbers.previousWebhook(number.org_id, number.id);
  if (previous === undefined) return { carrier_webhook_restored: false, carrier_webhook_reason: 'callbridge did not set this number\'s webhook' };
  const others = (await store.telcoNumbers.importsOfAccount(number.account_sid)).filter((n) => n.phone_number === number.phone_number && n.id !== number.id);
  if (others.length > 0) return { carrier_webhook_restored: false, carrier_webhook_reason: 'another organization still imports this number' };
  try {
    const creds = await store.telcoNumbers.credentials(number.org_id, number.id);
    if (creds === undefined) throw new Error('number gone');
    const current = await carrier.getNumberWebhook(creds.account_sid, creds.auth_token, number.phone_sid);
    const ourUrl = config.http.public_url === '' ? undefined : voiceUrlOf(config.http.public_url);
    const pointsAtUs = ourUrl !== undefined ? current.voice_url === ourUrl : current.voice_url.endsWith(TWILIO_VOICE_PATH);
    if (!pointsAtUs) return { carrier_webhook_restored: false, carrier_webhook_reason: "the number's VoiceUrl was changed at the carrier since import: left as it is" };
    await carrier.writeNumberWebhook(creds.account_sid, creds.auth_token, number.phone_sid, previous);
    return { carrier_webhook_restored: true };
  } catch (err) {
    return { carrier_webhook_restored: false, carrier_webhook_reason: err instanceof Error ? err.message : String(err) };
  }
}
