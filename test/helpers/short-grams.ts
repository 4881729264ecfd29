/**
 * The 1-2 character substrings of a party number, counted by hand (the oracle of the tests of
 * call_gram_counts, migration 10, and call_short_grams, migration 12): code points, as SQL's
 * substr() and length() count them, case-sensitive.
 */

/** The distinct substrings of 1 and 2 code points of `s`. */
export function gramsOf(s: string): string[] {
  const cps = [...s];
  return [...new Set(cps.flatMap((ch, i) => (i + 1 < cps.length ? [ch, ch + cps[i + 1]!] : [ch])))];
}

/** The grams call_short_grams posts: those with a character outside [0-9+]. */
export const postedGramsOf = (s: string): string[] => gramsOf(s).filter((g) => /[^0-9+]/u.test(g));
