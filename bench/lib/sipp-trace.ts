/**
 * SIPp's message trace (-trace_shortmsg): one line per SIP message sent or received, with a
 * microsecond timestamp, read per Call-ID (bench/sip, bench/cluster). INVITE->200 is measured
 * from it rather than from SIPp's own response times (rtd), which read CLOCK_MONOTONIC_COARSE
 * (4 ms steps on this kernel: too coarse for loopback).
 */

/** One call as the trace shows it; times in microseconds since the epoch. */
export interface CallTrace {
  inviteAt?: number;
  invites: number;
  okAt?: number;
  oks: number;
  final?: number;
  byes: number;
  byeOk: boolean;
}

/** Parses -trace_shortmsg: date<TAB>time<TAB>epoch.usec<TAB>S|R<TAB>Call-ID<TAB>CSeq:n METHOD<TAB>first line. */
export function parseShortMessages(text: string): Map<string, CallTrace> {
  const calls = new Map<string, CallTrace>();
  for (const line of text.split('\n')) {
    const f = line.split('\t');
    if (f.length < 7) continue;
    const [secs, usecs] = (f[2] ?? '').split('.');
    const us = Number(secs) * 1e6 + Number((usecs ?? '0').padEnd(6, '0').slice(0, 6));
    if (!Number.isFinite(us)) continue;
    const dir = f[3];
    const callId = f[4] ?? '';
    const method = /^CSeq:\s*\d+\s+(\S+)/.exec(f[5] ?? '')?.[1];
    const first = f.slice(6).join('\t');
    let c = calls.get(callId);
    if (!c) calls.set(callId, (c = { invites: 0, oks: 0, byes: 0, byeOk: false }));
    if (dir === 'S' && first.startsWith('INVITE ')) {
      c.invites++;
      c.inviteAt ??= us;
    } else if (dir === 'S' && first.startsWith('BYE ')) {
      c.byes++;
    } else if (dir === 'R') {
      const status = Number(/^SIP\/2\.0\s+(\d{3})/.exec(first)?.[1]);
      if (method === 'INVITE') {
        if (status === 200) {
          c.oks++;
          c.okAt ??= us;
        }
        if (status >= 200) c.final ??= status;
      } else if (method === 'BYE' && status === 200) {
        c.byeOk = true;
      }
    }
  }
  return calls;
}

/** INVITE->200 of every call that has both in the trace, ms, ascending. */
export function inviteTo200Ms(calls: Map<string, CallTrace>): Float64Array {
  const out: number[] = [];
  for (const c of calls.values()) if (c.inviteAt !== undefined && c.okAt !== undefined) out.push((c.okAt - c.inviteAt) / 1000);
  return Float64Array.from(out).sort();
}

/** Per-second rate of timestamps (us) from the first to the last. */
export function spanRate(times: number[]): number {
  if (times.length < 2) return 0;
  let lo = Infinity;
  let hi = -Infinity;
  for (const t of times) {
    if (t < lo) lo = t;
    if (t > hi) hi = t;
  }
  return hi > lo ? ((times.length - 1) * 1e6) / (hi - lo) : 0;
}
