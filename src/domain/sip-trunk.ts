/**
 * The SIP trunk resource: its shape, the PBX presets applied on create, the field checks the JSON
 * Schema cannot express (CIDRs, host[:port][;transport=], caller ID transforms), the rules across
 * fields, and the caller ID transforms themselves. No I/O: the store and the SIP layer use it.
 * docs/sip-trunks.md explains every rule for users.
 */
import { isIP } from 'node:net';
import { validation } from './errors.ts';

export const PBX_TYPES = ['generic', '3cx', 'yeastar', 'webex'] as const;
export const INBOUND_AUTH_TYPES = ['digest', 'acl', 'none'] as const;
export const SIP_TRANSPORTS = ['udp', 'tcp', 'tls'] as const;
export const REGISTRATION_STATUSES = ['not_registered', 'pending', 'registered', 'failed', 'auth_failed'] as const;
export const CALLER_ID_TRANSFORM_TYPES = ['add_prefix', 'add_suffix', 'replace', 'strip_digits_end', 'strip_digits_start'] as const;
/** Ours: whether the trunk's calls use SRTP (SDES): never, when the far end offers or accepts it, always. */
export const MEDIA_ENCRYPTIONS = ['none', 'allow', 'require'] as const;
/** Ours: how many SIP headers a trunk may map to session variables (docs/sip-trunks.md). */
export const MAX_HEADER_VARIABLES = 20;

export type Pbx = (typeof PBX_TYPES)[number];
export type InboundAuthType = (typeof INBOUND_AUTH_TYPES)[number];
export type SipTransport = (typeof SIP_TRANSPORTS)[number];
export type RegistrationStatus = (typeof REGISTRATION_STATUSES)[number];
export type CallerIdTransformType = (typeof CALLER_ID_TRANSFORM_TYPES)[number];
export type MediaEncryption = (typeof MEDIA_ENCRYPTIONS)[number];

export interface CallerIdTransform {
  type: CallerIdTransformType;
  /** add_prefix / add_suffix: the text added; replace: the text searched for. */
  value?: string;
  /** replace: the replacement (may be empty: deletes the text). */
  value2?: string;
  /** strip_digits_start / strip_digits_end: how many characters are removed. */
  number?: number;
}

/** Everything of a trunk a client sets, except the write-only passwords. */
export interface SipTrunkSettings {
  pbx: Pbx;
  name: string;
  inbound_auth_type: InboundAuthType;
  /** "" when unset, like every optional text field of the resource. */
  inbound_host: string;
  inbound_acl: string[];
  inbound_sip_username: string;
  outbound_host: string;
  outbound_sip_username: string;
  register: boolean;
  remain_in_dialog: boolean;
  caller_id_transforms: CallerIdTransform[];
  /** Ours: SRTP policy of the trunk's calls; 'none' by default. */
  media_encryption: MediaEncryption;
  /**
   * Ours: SIP header names whose values in an inbound INVITE become session variables
   * (`sip_<name>`); canonical form: as first written, deduplicated case-insensitively.
   */
  header_variables: string[];
}

/** The API resource. Passwords are never part of it. */
export interface SipTrunk extends SipTrunkSettings {
  id: string;
  inbound_registration_status: RegistrationStatus;
  outbound_registration_status: RegistrationStatus;
  /** Ours: why the last REGISTER to the carrier failed; '' when it did not or register is off. */
  outbound_registration_error: string;
  /** Ours: when the binding the carrier granted runs out (ISO 8601), null when none was granted. */
  outbound_registration_expires_at: string | null;
  created_at: string;
  updated_at: string;
}

/**
 * A create or PATCH body after schema validation. Passwords: a string sets a new one, null
 * clears the stored one, absent keeps it. Every other field but pbx may be null too (the service's
 * document marks them nullable): on create null is the same as absent; on PATCH it resets the
 * field to what a create gives it (see `defaultOf`).
 */
export type SipTrunkInput = { [K in keyof SipTrunkSettings]?: K extends 'pbx' ? Pbx : SipTrunkSettings[K] | null } & {
  inbound_sip_password?: string | null;
  outbound_sip_password?: string | null;
};

/** Which passwords the merged record will hold (their values never reach the domain rules). */
export interface PasswordPresence {
  inbound: boolean;
  outbound: boolean;
}

// ---------------------------------------------------------------------------------------------
// PBX presets

export interface PbxPreset {
  inbound_auth_type: InboundAuthType;
  register: boolean;
  remain_in_dialog: boolean;
  /** Transport used toward outbound_host when it names none. */
  outbound_transport: SipTransport;
}

/**
 * Defaults of each PBX for the fields a create leaves out. Why these values:
 * - generic: the common carrier/SBC trunk. Digest in, UDP out, no registration; transfers by
 *   plain REFER, since many carriers send no reliable transfer NOTIFY.
 * - 3cx, yeastar: the PBX registers to callbridge as a "SIP trunk provider" and authenticates
 *   with digest; callbridge sends calls back on that registration, so it registers nowhere. Both
 *   report transfer outcome by NOTIFY, so callbridge stays in the dialog until it arrives.
 * - webex: Webex Calling accepts trunks only over TLS, and its usual set-up is a
 *   registration-based local gateway, so callbridge registers; inbound calls come from Webex's
 *   SBC addresses (ACL). A certificate-based trunk sets register false.
 */
export const PBX_PRESETS: Record<Pbx, PbxPreset> = {
  generic: { inbound_auth_type: 'digest', register: false, remain_in_dialog: false, outbound_transport: 'udp' },
  '3cx': { inbound_auth_type: 'digest', register: false, remain_in_dialog: true, outbound_transport: 'udp' },
  yeastar: { inbound_auth_type: 'digest', register: false, remain_in_dialog: true, outbound_transport: 'udp' },
  webex: { inbound_auth_type: 'acl', register: true, remain_in_dialog: false, outbound_transport: 'tls' },
};

/** The record a create produces: the sent fields, the PBX preset for the rest, "" and [] below that. */
export function trunkForCreate(input: SipTrunkInput & { pbx: Pbx }): SipTrunkSettings {
  const preset = PBX_PRESETS[input.pbx];
  const settings: SipTrunkSettings = {
    pbx: input.pbx,
    name: input.name ?? '',
    inbound_auth_type: input.inbound_auth_type ?? preset.inbound_auth_type,
    inbound_host: input.inbound_host ?? '',
    inbound_acl: input.inbound_acl ?? [],
    inbound_sip_username: input.inbound_sip_username ?? '',
    outbound_host: input.outbound_host ?? '',
    outbound_sip_username: input.outbound_sip_username ?? '',
    register: input.register ?? preset.register,
    remain_in_dialog: input.remain_in_dialog ?? preset.remain_in_dialog,
    caller_id_transforms: input.caller_id_transforms ?? [],
    media_encryption: input.media_encryption ?? 'none',
    header_variables: input.header_variables ?? [],
  };
  return normalizeSettings(settings);
}

const SETTINGS_KEYS = [
  'pbx',
  'name',
  'inbound_auth_type',
  'inbound_host',
  'inbound_acl',
  'inbound_sip_username',
  'outbound_host',
  'outbound_sip_username',
  'register',
  'remain_in_dialog',
  'caller_id_transforms',
  'media_encryption',
  'header_variables',
] as const satisfies readonly (keyof SipTrunkSettings)[];

/**
 * PATCH: only the sent fields change; presets are not re-applied, so values the user chose (or
 * accepted) stay when pbx changes. `current` may carry more than settings; only settings are kept.
 */
export function applyTrunkPatch(current: SipTrunkSettings, input: SipTrunkInput): SipTrunkSettings {
  const pbx = input.pbx ?? current.pbx;
  const merged = {} as Record<(typeof SETTINGS_KEYS)[number], unknown>;
  for (const key of SETTINGS_KEYS) {
    const sent = input[key];
    if (key === 'pbx') merged.pbx = pbx;
    else merged[key] = sent === undefined ? current[key] : sent === null ? defaultOf(key, pbx) : sent;
  }
  return normalizeSettings(merged as SipTrunkSettings);
}

/** What a create gives a field it is not sent: the PBX preset's value, else "" or []. */
function defaultOf(key: Exclude<(typeof SETTINGS_KEYS)[number], 'pbx'>, pbx: Pbx): SipTrunkSettings[typeof key] {
  const preset = PBX_PRESETS[pbx];
  switch (key) {
    case 'inbound_auth_type':
    case 'register':
    case 'remain_in_dialog':
      return preset[key];
    case 'inbound_acl':
    case 'caller_id_transforms':
    case 'header_variables':
      return [];
    case 'media_encryption':
      return 'none';
    default:
      return '';
  }
}

/** Checks every field and returns the stored form (trimmed, canonical CIDRs, pruned transforms). */
function normalizeSettings(s: SipTrunkSettings): SipTrunkSettings {
  const inbound_host = s.inbound_host.trim();
  if (inbound_host !== '' && !isHost(inbound_host, { bareIpv6: true })) {
    throw validation('body.inbound_host must be a host name or an IP address (no port)');
  }
  const outbound_host = s.outbound_host.trim();
  if (outbound_host !== '') parseOutboundHost(outbound_host, 'body.outbound_host');
  return {
    ...s,
    name: s.name.trim(),
    inbound_host,
    outbound_host,
    inbound_sip_username: checkUsername(s.inbound_sip_username, 'body.inbound_sip_username'),
    outbound_sip_username: checkUsername(s.outbound_sip_username, 'body.outbound_sip_username'),
    inbound_acl: s.inbound_acl.map((c, i) => formatCidr(parseCidr(c, `body.inbound_acl.${i}`))),
    caller_id_transforms: normalizeTransforms(s.caller_id_transforms),
    header_variables: normalizeHeaderVariables(s.header_variables),
  };
}

/** RFC 3261 section 25.1 `token`: what a header name is made of. */
const TOKEN_RE = /^[A-Za-z0-9.!%*_+`'~-]+$/;
/**
 * Headers that carry credentials: mapping them would put a secret into the prompt, the session
 * record and the LLM's context. Compared in lower case.
 */
const SECRET_HEADERS = new Set(['authorization', 'proxy-authorization']);

/**
 * Checks header_variables: each a token, no credential header, at most MAX_HEADER_VARIABLES after
 * dropping case-insensitive duplicates (the first spelling is kept).
 * @throws DomainError (validation) naming the field and the header.
 */
export function normalizeHeaderVariables(names: readonly string[]): string[] {
  const seen = new Set<string>();
  const out: string[] = [];
  names.forEach((raw, i) => {
    const name = raw.trim();
    const field = `body.header_variables.${i}`;
    if (!TOKEN_RE.test(name)) throw validation(`${field} (${JSON.stringify(raw)}) is not a SIP header name (RFC 3261 token)`);
    const lower = name.toLowerCase();
    if (SECRET_HEADERS.has(lower)) throw validation(`${field} (${name}) carries credentials and cannot become a session variable`);
    if (seen.has(lower)) return;
    seen.add(lower);
    out.push(name);
  });
  if (out.length > MAX_HEADER_VARIABLES) throw validation(`body.header_variables may name at most ${MAX_HEADER_VARIABLES} headers`);
  return out;
}

/**
 * A SIP digest username travels as a quoted string (RFC 8760 / RFC 7616 `username`): printable
 * ASCII without space, quote or backslash keeps it free of escaping on every PBX.
 */
const USERNAME_RE = /^[!#-[\]-~]*$/;

function checkUsername(raw: string, field: string): string {
  const u = raw.trim();
  if (!USERNAME_RE.test(u)) throw validation(`${field} may hold only printable ASCII without spaces, quotes or backslashes`);
  return u;
}

/**
 * Rules across fields, checked on the merged record so that neither a create nor a PATCH can
 * leave a trunk that SIP could not use as configured.
 */
export function checkTrunk(s: SipTrunkSettings, pw: PasswordPresence): void {
  if (s.inbound_auth_type === 'digest') {
    if (!s.inbound_sip_username) throw validation('body.inbound_sip_username is required when inbound_auth_type is digest');
    if (!pw.inbound) throw validation('body.inbound_sip_password is required when inbound_auth_type is digest');
  }
  if (s.inbound_auth_type === 'acl' && !s.inbound_host && s.inbound_acl.length === 0) {
    throw validation('body.inbound_host or a non-empty body.inbound_acl is required when inbound_auth_type is acl');
  }
  if (s.register) {
    if (!s.outbound_host) throw validation('body.outbound_host is required when register is true');
    if (!s.outbound_sip_username) throw validation('body.outbound_sip_username is required when register is true');
    if (!pw.outbound) throw validation('body.outbound_sip_password is required when register is true');
  }
}

// ---------------------------------------------------------------------------------------------
// Hosts

const HOST_LABEL = '[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?';
/** RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens; 253 at most. */
const HOSTNAME_RE = new RegExp(`^(?=.{1,253}$)${HOST_LABEL}(?:\\.${HOST_LABEL})*\\.?$`);

/**
 * A host name, an IPv4 address, or an IPv6 address in brackets (RFC 3261 section 25.1 `host`).
 * With bareIpv6 an unbracketed IPv6 address is accepted too (no port can follow it then).
 */
export function isHost(s: string, opts: { bareIpv6?: boolean } = {}): boolean {
  if (s.startsWith('[') && s.endsWith(']')) return isIP(s.slice(1, -1)) === 6;
  if (isIP(s) === 4) return true;
  if (isIP(s) === 6) return opts.bareIpv6 === true;
  // A name made only of digits and dots is a mistyped IPv4 address, not a host name.
  if (/^[0-9.]+$/.test(s)) return false;
  return HOSTNAME_RE.test(s);
}

export interface OutboundTarget {
  host: string;
  /** Absent: resolve by DNS (RFC 3263) or use the transport's default port. */
  port?: number;
  transport: SipTransport;
  /**
   * Written `sips:host...`: SIPS (RFC 3261 26.2), TLS on every hop, so TLS only (no other
   * transport is ever tried) and sips: in our Request-URI and Contact.
   */
  secure?: boolean;
}

const OUTBOUND_RE = /^(\[[^\]]*\]|[^:;[\]]+)(?::([0-9]{1,5}))?(?:;transport=([A-Za-z]+))?$/;

/**
 * Parses `[sips:]host[:port][;transport=udp|tcp|tls]` (sips: forces TLS). The transport parameter is case-insensitive like
 * every SIP URI parameter (RFC 3261 section 19.1.4).
 * @throws DomainError (validation) naming `field` when the text is not of that form.
 */
export function parseOutboundHost(s: string, field = 'outbound_host', defaultTransport: SipTransport = 'udp'): OutboundTarget {
  const sips = /^sips:/i.exec(s) !== null;
  const m = OUTBOUND_RE.exec(sips ? s.slice(5) : s);
  const bad = () => validation(`${field} must be [sips:]host[:port][;transport=udp|tcp|tls]`);
  if (!m) throw bad();
  const [, host = '', portText, transportText] = m;
  if (!isHost(host)) throw bad();
  const target: OutboundTarget = { host, transport: defaultTransport };
  if (portText !== undefined) {
    const port = Number(portText);
    if (port < 1 || port > 65535) throw validation(`${field} port must be between 1 and 65535`);
    target.port = port;
  }
  if (transportText !== undefined) {
    const t = transportText.toLowerCase();
    if (!(SIP_TRANSPORTS as readonly string[]).includes(t)) throw validation(`${field} transport must be one of udp, tcp, tls`);
    target.transport = t as SipTransport;
  }
  if (sips) {
    // RFC 3261 26.2 / RFC 5630: SIPS is TLS hop by hop; ;transport=tcp (TLS over TCP) and tls
    // say the same; UDP cannot carry it.
    if (target.transport === 'udp' && transportText !== undefined) throw validation(`${field}: a sips: host is reached over TLS only (RFC 3261 26.2); ;transport=udp cannot be used with it`);
    target.transport = 'tls';
    target.secure = true;
  }
  return target;
}

/** Where callbridge sends this trunk's outbound requests; the PBX preset supplies the transport. */
export function outboundTarget(t: Pick<SipTrunkSettings, 'pbx' | 'outbound_host'>): OutboundTarget | undefined {
  if (!t.outbound_host) return undefined;
  return parseOutboundHost(t.outbound_host, 'outbound_host', PBX_PRESETS[t.pbx].outbound_transport);
}

// ---------------------------------------------------------------------------------------------
// CIDRs

export interface Cidr {
  version: 4 | 6;
  /** The network address with host bits cleared. */
  network: bigint;
  prefix: number;
}

/**
 * Parses `address/prefix` (IPv4 prefix 0..32, IPv6 0..128). A bare address is a one-host network
 * (/32 or /128), as operators write single PBX addresses that way. Host bits are cleared, so
 * 203.0.113.7/24 is stored as 203.0.113.0/24.
 * @throws DomainError (validation) naming `field`.
 */
export function parseCidr(s: string, field = 'cidr'): Cidr {
  const slash = s.indexOf('/');
  const addr = slash < 0 ? s : s.slice(0, slash);
  const version = isIP(addr);
  if (version !== 4 && version !== 6) throw validation(`${field} must be a CIDR such as 203.0.113.0/24 or 2001:db8::/32`);
  const bits = version === 4 ? 32 : 128;
  let prefix = bits;
  if (slash >= 0) {
    const p = s.slice(slash + 1);
    if (!/^[0-9]{1,3}$/.test(p) || Number(p) > bits) throw validation(`${field} prefix must be between 0 and ${bits}`);
    prefix = Number(p);
  }
  const value = version === 4 ? ipv4ToBigInt(addr) : ipv6ToBigInt(addr);
  return { version, network: value & prefixMask(bits, prefix), prefix };
}

/**
 * The widest CIDRs an inbound_acl may hold, as smallest prefix lengths (config
 * sip.acl_min_prefix_v4 / _v6, default /8 and /32). An ACL admits its sources without a password:
 * `0.0.0.0/0` would let any address on the Internet call as this trunk.
 */
export interface AclWidthLimit {
  v4: number;
  v6: number;
}

export const DEFAULT_ACL_WIDTH_LIMIT: AclWidthLimit = { v4: 8, v6: 32 };

/** The smallest prefix length allowed for this CIDR's family; never below 1 (/0 is always refused). */
export function minAclPrefix(c: Pick<Cidr, 'version'>, limit: AclWidthLimit): number {
  return Math.max(1, c.version === 4 ? limit.v4 : limit.v6);
}

/** True when the CIDR is wider than the limit allows. */
export function aclTooWide(c: Cidr, limit: AclWidthLimit): boolean {
  return c.prefix < minAclPrefix(c, limit);
}

/**
 * Refuses an ACL entry wider than the limit (parsed entries; call after normalization).
 * @throws DomainError (validation, 400) naming the entry's field (`body.inbound_acl.<i>`), the entry and the limit.
 */
export function checkAclWidth(acl: readonly string[], limit: AclWidthLimit, field = 'body.inbound_acl'): void {
  acl.forEach((text, i) => {
    const c = parseCidr(text, `${field}.${i}`);
    if (!aclTooWide(c, limit)) return;
    const min = minAclPrefix(c, limit);
    const setting = c.version === 4 ? 'sip.acl_min_prefix_v4' : 'sip.acl_min_prefix_v6';
    throw validation(`${field}.${i} (${text}) is too wide: IPv${c.version} entries may be at most /${min} wide (a prefix of ${min} or more; setting ${setting}; /0 is never accepted)`);
  });
}

/** True when two networks share an address (same family, and one contains the other). */
export function cidrsOverlap(a: Cidr, b: Cidr): boolean {
  if (a.version !== b.version) return false;
  const bits = a.version === 4 ? 32 : 128;
  const mask = prefixMask(bits, Math.min(a.prefix, b.prefix));
  return (a.network & mask) === (b.network & mask);
}

export function formatCidr(c: Cidr): string {
  return `${c.version === 4 ? bigIntToIpv4(c.network) : bigIntToIpv6(c.network)}/${c.prefix}`;
}

/** True when ip (v4, v6, or IPv4-mapped v6 such as ::ffff:192.0.2.1) lies in the network. */
export function ipInCidr(ip: string, cidr: Cidr): boolean {
  let version = isIP(ip);
  let addr = ip;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped && cidr.version === 4) {
    version = 4;
    addr = mapped[1] as string;
  }
  if (version !== cidr.version) return false;
  const bits = version === 4 ? 32 : 128;
  const value = version === 4 ? ipv4ToBigInt(addr) : ipv6ToBigInt(addr);
  return (value & prefixMask(bits, cidr.prefix)) === cidr.network;
}

function prefixMask(bits: number, prefix: number): bigint {
  const all = (1n << BigInt(bits)) - 1n;
  return (all >> BigInt(bits - prefix)) << BigInt(bits - prefix);
}

function ipv4ToBigInt(addr: string): bigint {
  return addr.split('.').reduce((acc, octet) => (acc << 8n) | BigInt(Number(octet)), 0n);
}

function bigIntToIpv4(v: bigint): string {
  return [24n, 16n, 8n, 0n].map((s) => String((v >> s) & 255n)).join('.');
}

/** Expects an address isIP() accepted: handles "::" and a trailing dotted IPv4 part. */
function ipv6ToBigInt(addr: string): bigint {
  let text = addr.replace(/%.*$/, '');
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const v4 = ipv4ToBigInt(dotted[1] as string);
    text = text.slice(0, -(dotted[1] as string).length) + `${(v4 >> 16n).toString(16)}:${(v4 & 0xffffn).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const headGroups = head ? head.split(':') : [];
  const tailGroups = tail ? tail.split(':') : [];
  const zeros = tail === undefined ? [] : Array<string>(8 - headGroups.length - tailGroups.length).fill('0');
  return [...headGroups, ...zeros, ...tailGroups].reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
}

/** RFC 5952 text: lower case, longest run of two or more zero groups as "::". */
function bigIntToIpv6(v: bigint): string {
  const groups = Array.from({ length: 8 }, (_, i) => Number((v >> BigInt((7 - i) * 16)) & 0xffffn));
  let bestStart = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) [bestStart, bestLen] = [i, j - i];
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLen).join(':')}`;
}

// ---------------------------------------------------------------------------------------------
// Caller ID transforms

/** Characters a transform may add or match: what a SIP URI user part carries unescaped. */
export const TRANSFORM_TEXT_PATTERN = '^[A-Za-z0-9+*#._~-]*$';
const TRANSFORM_TEXT_RE = new RegExp(TRANSFORM_TEXT_PATTERN);

/**
 * Checks each transform has what its type needs and keeps only those fields, so a client that
 * sends every field of the form (value2 on add_prefix, say) stores what will be used.
 */
export function normalizeTransforms(transforms: CallerIdTransform[]): CallerIdTransform[] {
  return transforms.map((t, i) => {
    const at = `body.caller_id_transforms.${i}`;
    const text = (key: 'value' | 'value2', allowEmpty: boolean): string => {
      const v = t[key];
      if (v === undefined || (!allowEmpty && v === '')) throw validation(`${at}.${key} is required when type is ${t.type}`);
      if (!TRANSFORM_TEXT_RE.test(v)) throw validation(`${at}.${key} may hold only letters, digits and + * # . _ ~ -`);
      return v;
    };
    switch (t.type) {
      case 'add_prefix':
      case 'add_suffix':
        return { type: t.type, value: text('value', false) };
      case 'replace':
        return { type: t.type, value: text('value', false), value2: text('value2', true) };
      case 'strip_digits_start':
      case 'strip_digits_end':
        if (t.number === undefined || !Number.isInteger(t.number) || t.number < 1) {
          throw validation(`${at}.number must be a positive integer when type is ${t.type}`);
        }
        return { type: t.type, number: t.number };
      default:
        throw validation(`${at}.type must be one of ${CALLER_ID_TRANSFORM_TYPES.join(', ')}`);
    }
  });
}

/**
 * Applies the transforms in order to a caller ID (the trunk's rewrite of the number shown on
 * calls it carries). `replace` replaces the first occurrence only, since its use is rewriting a
 * prefix such as +44 -> 0 without touching digits further on. The strip_* counts are characters;
 * a leading + counts as one. Transforms are assumed normalized (normalizeTransforms).
 */
export function applyCallerIdTransforms(callerId: string, transforms: readonly CallerIdTransform[]): string {
  let out = callerId;
  for (const t of transforms) {
    switch (t.type) {
      case 'add_prefix':
        out = (t.value ?? '') + out;
        break;
      case 'add_suffix':
        out = out + (t.value ?? '');
        break;
      case 'replace':
        if (t.value) out = out.replace(t.value, () => t.value2 ?? '');
        break;
      case 'strip_digits_start':
        out = out.slice(Math.min(t.number ?? 0, out.length));
        break;
      case 'strip_digits_end':
        out = out.slice(0, Math.max(0, out.length - (t.number ?? 0)));
        break;
    }
  }
  return out;
}
