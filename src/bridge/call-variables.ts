/**
 * What the caller said goes to the agent: the session variables a phone call brings to its voice
 * session, so a prompt or first message can say `{{caller_number}}` or `{{sip_x_customer_id}}`
 * (src/agent/template.ts substitutes them). docs/bridge.md lists them for users.
 *
 *   caller_number   the caller's number as the call record's `from` holds it
 *   called_number   the number dialled: inbound, the form of the Request-URI (or To) user that
 *                   routing matched; outbound, the number called
 *   trunk_id        the trunk of the call (the session record's sip_trunk_id)
 *   trunk_name      that trunk's name ("" when it has none)
 *   sip_<header>    inbound only: each header of the trunk's header_variables present in the
 *                   INVITE, several values joined with ", "
 *
 * Values come from a caller we do not control: each is stripped of control characters and cut at
 * MAX_CALL_VARIABLE_LENGTH characters, so a header cannot break a prompt's layout or fill it.
 * Variables the user passes in a dial win over these on a name clash.
 */
import type { SessionVariable } from '../session/runtime-contract.ts';

/** The longest value of a call variable, in UTF-16 code units (a header is cut there). */
export const MAX_CALL_VARIABLE_LENGTH = 256;
/**
 * The most variables a session takes: POST /v1/session-token's limit, which an upstream server
 * (bridge.upstream_url) enforces on what the bridge sends it. The user's come first.
 */
export const MAX_SESSION_VARIABLES = 100;

/** `X-Customer-Id` -> `sip_x_customer_id`: lower case, every character not a-z or 0-9 an underscore. */
export function headerVariableName(header: string): string {
  return `sip_${header.toLowerCase().replace(/[^a-z0-9]/g, '_')}`;
}

// C0 controls (CR, LF, TAB included), DEL and C1 controls: what Unicode calls Cc.
const CONTROL = /\p{Cc}/gu;

/** A caller-supplied value made safe to put into a prompt: no control characters, bounded length. */
export function cleanValue(value: string): string {
  const clean = value.replace(CONTROL, '').trim();
  if (clean.length <= MAX_CALL_VARIABLE_LENGTH) return clean;
  // Do not leave half of a surrogate pair at the cut.
  const cut = clean.slice(0, MAX_CALL_VARIABLE_LENGTH);
  return /[\ud800-\udbff]$/.test(cut) ? cut.slice(0, -1) : cut;
}

export interface CallFacts {
  callerNumber: string;
  calledNumber: string;
  /** The call's trunk, read from the store within the call's organization. */
  trunk?: { id: string; name: string; header_variables: readonly string[] } | undefined;
  /** Inbound: every value of a header of the INVITE (any case, compact forms too). */
  header?: ((name: string) => string[]) | undefined;
}

/** The call's variables, in a fixed order: numbers, trunk, then the headers in the trunk's order. */
export function callVariables(f: CallFacts): SessionVariable[] {
  const out: SessionVariable[] = [
    { key: 'caller_number', value: cleanValue(f.callerNumber) },
    { key: 'called_number', value: cleanValue(f.calledNumber) },
  ];
  if (f.trunk !== undefined) {
    out.push({ key: 'trunk_id', value: f.trunk.id }, { key: 'trunk_name', value: cleanValue(f.trunk.name) });
    if (f.header !== undefined) {
      const seen = new Set<string>();
      for (const name of f.trunk.header_variables) {
        const key = headerVariableName(name);
        // Two names may map to one key (X-A.b and X-A_b): the first listed is used.
        if (seen.has(key)) continue;
        const values = f.header(name);
        if (values.length === 0) continue;
        seen.add(key);
        out.push({ key, value: cleanValue(values.join(', ')) });
      }
    }
  }
  return out;
}

/**
 * The user's variables (a dial's `variables`) with ours added under names they do not use, within
 * MAX_SESSION_VARIABLES (the user's first; ours that do not fit are left out).
 */
export function withCallVariables(ours: readonly SessionVariable[], theirs: readonly SessionVariable[] = []): SessionVariable[] {
  const taken = new Set(theirs.map((v) => v.key));
  const room = Math.max(0, MAX_SESSION_VARIABLES - theirs.length);
  return [...ours.filter((v) => !taken.has(v.key)).slice(0, room), ...theirs];
}
