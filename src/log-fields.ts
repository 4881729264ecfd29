/**
 * Bounds on what a peer controls when it goes into a log line. Imports nothing and is open to
 * every folder (like coded-error.ts): SIP (a Call-ID, a From) and the carrier's webhooks (a To, a
 * CallSid, a URL) clip their peers' values with the same helper.
 */

/** Enough of a value to recognise it; an 800 KB field would otherwise be an 800 KB log line. */
export const LOGGED_FIELD_MAX = 128;

/** A peer-controlled value for a log line: cut at `max` characters, marked with an ellipsis when cut. */
export function clipForLog(value: string, max = LOGGED_FIELD_MAX): string {
  return value.length > max ? `${value.slice(0, max)}…` : value;
}
