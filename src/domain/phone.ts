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
