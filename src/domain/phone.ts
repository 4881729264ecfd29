/** E.164: a plus, a non-zero country digit, at most 15 digits in all (ITU-T E.164 section 6). */
export const E164_PATTERN = '^\\+[1-9][0-9]{1,14}$';
const E164_RE = new RegExp(E164_PATTERN);
export const isE164 = (s: string): boolean => E164_RE.test(s);

/**
 * What a PBX or carrier may put in a Request-URI user part or a dial string: digits with an
 * optional leading plus, or an extension with * and # (RFC 3966 visual separators are removed
 * before the check by normalizeDialString).
 */
export const DIAL_STRING_PATTERN = '^\\+?[0-9*#]{1,32}$';
const DIAL_RE = new RegExp(DIAL_STRING_PATTERN);
export const normalizeDialString = (s: string): string => s.replace(/[\s().-]/g, '');
export const isDialString = (s: string): boolean => DIAL_RE.test(normalizeDialString(s));

/**
 * The forms of a dialled number to try against stored numbers: as sent, without visual
 * separators, and for E.164 carrier numbers with a leading '+' when the PBX left it out.
 */
export function numberCandidates(user: string): string[] {
  let decoded = user;
  try {
    decoded = decodeURIComponent(user);
  } catch {
    // not percent-encoded: keep as sent
  }
  const compact = decoded.replace(/[\s().-]/g, '');
  const out = new Set([user, decoded, compact]);
  if (/^[0-9]{2,15}$/.test(compact)) out.add('+' + compact);
  return [...out].filter((s) => s !== '');
}
