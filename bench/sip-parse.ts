/**
 * bench/sip-parse: the cost of the SIP message layer (src/sip/message/index.ts) on a typical INVITE
 * from a carrier -- 2 Vias, Record-Route, P-Asserted-Identity, Allow, Supported, session timer,
 * a 300-byte SDP offer, 1.1 kB in all:
 *
 *   - sip_parse_invite: parseMessage(buffer) -- start line, unfolding, compact names, list
 *     splitting, Via / From / To / CSeq / Contact / Record-Route / Content-Type parsed, body
 *     copied. Baseline: JSON.parse of the same message as a JSON object of about the same size
 *     (the cheapest structured parse the runtime offers).
 *   - sip_serialize_invite: toBuffer() of that parsed message. Baseline: JSON.stringify of the
 *     object, then Buffer.from.
 *
 * Each figure is the median of ROUNDS rounds of ITERATIONS operations after a warm-up, the
 * candidate and its baseline interleaved round by round so machine noise hits both alike.
 * Run: `npm run bench -- sip-parse` (or `npx tsx bench/sip-parse.ts`).
 */
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { parseMessage, SipRequest } from '../src/sip/message/index.ts';
import { printFigures, type Figure } from './lib/result.ts';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 9);
const ITERATIONS = 20000;

const SDP = [
  'v=0',
  'o=- 1627384950 1627384950 IN IP4 198.51.100.21',
  's=SBC call',
  'c=IN IP4 198.51.100.21',
  't=0 0',
  'm=audio 31000 RTP/AVP 0 8 18 101',
  'a=rtpmap:0 PCMU/8000',
  'a=rtpmap:8 PCMA/8000',
  'a=rtpmap:18 G729/8000',
  'a=fmtp:18 annexb=no',
  'a=rtpmap:101 telephone-event/8000',
  'a=fmtp:101 0-16',
  'a=ptime:20',
  'a=sendrecv',
  '',
].join('\r\n');

const HEADERS: [string, string][] = [
  ['Via', 'SIP/2.0/UDP 198.51.100.20:5060;branch=z9hG4bK3f1c.9a7e21b4c2d0f;rport'],
  ['Via', 'SIP/2.0/UDP 10.1.2.3:5080;received=198.51.100.99;branch=z9hG4bK-524287-1---a1b2c3d4e5f60718;rport=5080'],
  ['Max-Forwards', '69'],
  ['Record-Route', '<sip:198.51.100.20;lr;ftag=as6c1e1d4b>'],
  ['From', '"ACME Sales, Inc." <sip:+15557654321@198.51.100.20>;tag=as6c1e1d4b'],
  ['To', '<sip:+15551230001@203.0.113.10>'],
  ['Call-ID', '4c7f0e1b2a3d4e5f60718293a4b5c6d7@198.51.100.20'],
  ['CSeq', '102 INVITE'],
  ['Contact', '<sip:+15557654321@198.51.100.20:5060;transport=udp>'],
  ['P-Asserted-Identity', '"ACME Sales, Inc." <sip:+15557654321@carrier.example.net;user=phone>'],
  ['Allow', 'INVITE, ACK, CANCEL, OPTIONS, BYE, REFER, SUBSCRIBE, NOTIFY, INFO, PRACK, UPDATE'],
  ['Supported', 'replaces, timer, 100rel'],
  ['Session-Expires', '1800;refresher=uac'],
  ['Min-SE', '90'],
  ['User-Agent', 'CarrierSBC/4.2'],
  ['Content-Type', 'application/sdp'],
  ['Content-Length', String(Buffer.byteLength(SDP))],
];

const START = 'INVITE sip:+15551230001@203.0.113.10:5060;transport=udp SIP/2.0';
const WIRE = Buffer.from(`${START}\r\n${HEADERS.map(([n, v]) => `${n}: ${v}\r\n`).join('')}\r\n${SDP}`);

/** The same message as JSON: what a JSON-speaking service would parse instead. */
const AS_OBJECT = {
  method: 'INVITE',
  uri: 'sip:+15551230001@203.0.113.10:5060;transport=udp',
  version: 'SIP/2.0',
  headers: HEADERS.map(([name, value]) => ({ name, value })),
  body: SDP,
};
const AS_JSON = JSON.stringify(AS_OBJECT);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[s.length >> 1]!;
}

/** Microseconds per call of fn, one round of ITERATIONS. */
function timeRound(fn: () => unknown): number {
  let sink = 0;
  const t0 = performance.now();
  for (let i = 0; i < ITERATIONS; i++) if (fn() !== undefined) sink++;
  const us = ((performance.now() - t0) * 1000) / ITERATIONS;
  if (sink !== ITERATIONS) throw new Error('benchmark function returned nothing');
  return us;
}

function compare(candidate: () => unknown, baseline: () => unknown): { value: number; base: number } {
  for (let i = 0; i < 3; i++) {
    timeRound(candidate);
    timeRound(baseline);
  }
  const a: number[] = [];
  const b: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    a.push(timeRound(candidate));
    b.push(timeRound(baseline));
  }
  return { value: median(a), base: median(b) };
}

export async function run(write: (s: string) => void = (s) => process.stdout.write(s)): Promise<void> {
  // The measurement is only valid if the message parses to what it says.
  const parsed = parseMessage(WIRE);
  if (!(parsed instanceof SipRequest) || parsed.via.length !== 2 || parsed.body.length !== Buffer.byteLength(SDP) || parsed.cseq.seq !== 102) {
    throw new Error('bench message did not parse as expected');
  }
  const parse = compare(
    () => parseMessage(WIRE),
    () => JSON.parse(AS_JSON),
  );
  const serialize = compare(
    () => parsed.toBuffer(),
    () => Buffer.from(JSON.stringify(AS_OBJECT)),
  );
  write(`message: ${WIRE.length} bytes of SIP (${HEADERS.length} headers, ${Buffer.byteLength(SDP)}-byte SDP); JSON baseline ${AS_JSON.length} bytes\n`);
  const figures: Figure[] = [
    { name: 'sip_parse_invite', value: parse.value, unit: 'us', baseline: parse.base, note: 'parseMessage of a carrier INVITE; baseline JSON.parse of the same as JSON' },
    { name: 'sip_serialize_invite', value: serialize.value, unit: 'us', baseline: serialize.base, note: 'toBuffer of the parsed INVITE; baseline JSON.stringify + Buffer.from' },
  ];
  printFigures('SIP message layer: microseconds per message (median)', figures, write);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) await run();
