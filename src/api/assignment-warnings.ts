/**
 * The `routing_warnings` of a SIP trunk assignment: why calls to one of its numbers will not reach
 * it, found at read time from every organization's trunks, assignments and carrier imports.
 *
 * alternate_number is unique within an organization only, so two organizations may claim one
 * number; inbound routing then refuses (or challenges) a call it cannot attribute
 * (docs/sip-trunks.md "Overlapping ACLs"). The operator learns it here, never which organization
 * holds the other claim: a warning names the condition, no trunk, assignment or organization of
 * another organization. A number is reported only when the other claim could meet this one: an
 * ACL trunk admitting some of the same source addresses, a digest trunk (any source may answer
 * its challenge), or a carrier import (it wins everywhere).
 */
import { isIP } from 'node:net';
import { cidrsOverlap, parseCidr, type Cidr } from '../domain/sip-trunk.ts';
import { numberCandidates } from '../domain/phone.ts';
import type { Assignment } from '../store/assignments.ts';
import type { Store } from '../store/index.ts';
import type { StoredSipTrunk } from '../store/sip-trunks.ts';

/** The sources an ACL trunk admits: its CIDRs and inbound_host (an address, or a name compared as written). */
interface Admits {
  cidrs: Cidr[];
  hostName: string | undefined;
}

function admitsOf(t: StoredSipTrunk): Admits {
  const cidrs: Cidr[] = [];
  for (const s of t.inbound_acl) {
    try {
      cidrs.push(parseCidr(s));
    } catch {
      // validated on write; an unparsable one (older data) admits nothing
    }
  }
  const host = t.inbound_host.startsWith('[') && t.inbound_host.endsWith(']') ? t.inbound_host.slice(1, -1) : t.inbound_host;
  if (host !== '' && isIP(host) !== 0) cidrs.push(parseCidr(host));
  return { cidrs, hostName: host !== '' && isIP(host) === 0 ? host.toLowerCase() : undefined };
}

function overlap(a: Admits, b: Admits): boolean {
  if (a.hostName !== undefined && a.hostName === b.hostName) return true;
  return a.cidrs.some((x) => b.cidrs.some((y) => cidrsOverlap(x, y)));
}

/** Whether some organization other than `orgId` imported an E.164 form of `number`, and `orgId` did not. */
async function importedElsewhere(store: Store, orgId: string, number: string): Promise<boolean> {
  for (const n of numberCandidates(number)) {
    if (!n.startsWith('+')) continue;
    const importers = await store.telcoNumbers.importingOrgs(n);
    if (importers.length > 0 && !importers.includes(orgId)) return true;
  }
  return false;
}

/** The warnings of one assignment of `orgId` (empty when its numbers route as configured). */
export async function assignmentRoutingWarnings(store: Store, orgId: string, a: Assignment): Promise<string[]> {
  const trunk = await store.sipTrunks.get(orgId, a.sip_trunk_id);
  if (trunk === undefined) return [];
  const out: string[] = [];
  for (const [field, value] of [
    ['number', a.number],
    ['alternate_number', a.alternate_number],
  ] as const) {
    if (value !== '' && (await importedElsewhere(store, orgId, value))) {
      out.push(`${field} ${value} is a carrier number that another organization imported from its carrier: calls to it are routed to that organization, never through this assignment`);
    }
  }
  if (a.alternate_number === '' || trunk.inbound_auth_type !== 'acl' || out.some((w) => w.startsWith('alternate_number'))) return out;

  const mine = admitsOf(trunk);
  let aclRival = false;
  let digestRival = false;
  const otherAclTrunks = (await store.sipTrunks.listByInboundAuth('acl')).filter((t) => t.org_id !== orgId);
  const overlapsMine = (t: StoredSipTrunk | undefined): boolean => t !== undefined && t.inbound_auth_type === 'acl' && overlap(mine, admitsOf(t));
  for (const n of numberCandidates(a.alternate_number)) {
    // A rival's claim on a number an organization other than the rival imported is void (routing leaves it out): no warning for it.
    const live = async (claimOrg: string): Promise<boolean> => claimOrg !== orgId && !(await importedElsewhere(store, claimOrg, n));
    for (const c of await store.assignments.alternateClaims(n)) {
      if (overlapsMine(otherAclTrunks.find((t) => t.id === c.sip_trunk_id)) && (await live(c.org_id))) aclRival = true;
    }
    if (n.startsWith('+')) {
      // Both organizations imported it (else the warning above): the other's ACL trunks may route it too.
      for (const importer of await store.telcoNumbers.importingOrgs(n)) {
        if (importer !== orgId && otherAclTrunks.some((t) => t.org_id === importer && overlapsMine(t))) aclRival = true;
      }
    }
    for (const c of await store.assignments.digestClaims(n)) if (await live(c.org_id)) digestRival = true;
  }
  if (aclRival) {
    out.push(
      `alternate_number ${a.alternate_number} is also routed by another organization through an ACL trunk that admits some of this trunk's source addresses: calls to it from those addresses are refused as ambiguous (404) until the ACLs no longer overlap or one side gives the number up`,
    );
  }
  if (digestRival) {
    out.push(
      `alternate_number ${a.alternate_number} is also an assignment number on another organization's digest trunk: calls to it from this trunk's addresses are challenged (401) so that credentials decide, which an ACL-only PBX cannot answer`,
    );
  }
  return out;
}
