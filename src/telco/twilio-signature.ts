/**
 * The carrier's webhook signature (Twilio, "Webhooks security"): X-Twilio-Signature is the
 * base64 of HMAC-SHA1, keyed with the account's auth token, over the full URL the carrier
 * requested followed by every POST parameter, sorted by name, each name immediately followed by
 * its value (no separators). The URL is the public one the carrier was given, not what this
 * daemon sees behind a proxy, so the caller passes http.public_url + path.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** The signature the carrier sends for a POST of `params` to `url`. */
export function twilioSignature(authToken: string, url: string, params: ReadonlyArray<readonly [string, string]>): string {
  // Sorted by name (code units, as the carrier's own helper libraries sort); a repeated name keeps
  // its values in the order sent, each appended with its name.
  const sorted = [...params].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  let data = url;
  for (const [name, value] of sorted) data += name + value;
  return createHmac('sha1', authToken).update(data, 'utf8').digest('base64');
}

/** Whether `signature` is the carrier's for this request, compared in constant time. */
export function validTwilioSignature(authToken: string, url: string, params: ReadonlyArray<readonly [string, string]>, signature: string | undefined): boolean {
  if (signature === undefined || signature === '') return false;
  const expected = Buffer.from(twilioSignature(authToken, url, params));
  const given = Buffer.from(signature);
  return given.length === expected.length && timingSafeEqual(given, expected);
}
