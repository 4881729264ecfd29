/**
 * `{{variable}}` substitution in first_message and prompt, from the session's variables
 * (session-token or dial body). An unknown variable stays as written, so a typo is visible in
 * the transcript instead of silently vanishing.
 */
import type { SessionVariable } from '../session/runtime-contract.ts';

const PLACEHOLDER = /\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}/g;

export function substituteVariables(text: string, variables: readonly SessionVariable[]): string {
  if (variables.length === 0 || !text.includes('{{')) return text;
  const values = new Map(variables.map((v) => [v.key, v.value]));
  return text.replace(PLACEHOLDER, (whole, key: string) => values.get(key) ?? whole);
}
