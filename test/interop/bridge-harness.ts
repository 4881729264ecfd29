/**
 * Glue between SIPp (signaling) and the test's RTP peer (media) for the call bridge's end-to-end
 * tests: place a call with one of the bridge-*.xml scenarios, learn callbridge's SDP
 * answer while the call runs, and read SIP message times from SIPp's trace afterwards.
 *
 *   const call = await placeBridgeCall({ scenario: 'bridge-acl', remote, service, caller, hangupAfterMs: 8000 });
 *   // call.peer sends to callbridge's SDP answer from the 200 OK on; call.proc is SIPp
 *   const r = await call.proc.result;
 *   const answeredAt = sipTime(r, (m) => m.status === 200 && m.cseqMethod === 'INVITE');
 *
 * How the answer is learnt live: the scenarios `<log>` "sdp-answer <ip>:<port>" (SIPp's
 * -trace_logs, actions.log) when the 200 OK arrives; SIPp writes that file at once (checked:
 * ~150 ms after the INVITE on loopback, i.e. as soon as the 200 arrives), so polling it every
 * 10 ms gives the peer the address within a packet time, as a phone would start its RTP.
 */
import { existsSync, readFileSync } from 'node:fs';
import { parseSipMessage, startSipp, type SipMessage, type SippOptions, type SippProcess, type SippResult } from './sipp.ts';
import { nowMs, startRtpPeer, type RemoteAddress, type RtpPeer, type RtpPeerOptions } from './rtp-peer.ts';

/** A SIPp option's value from its argument list (e.g. '-log_file'). */
function argValue(args: readonly string[], name: string): string | undefined {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
}

/**
 * Resolves with callbridge's SDP answer (c= address, m=audio port) once SIPp has logged it, and
 * when (epoch ms) the test saw it. Rejects when SIPp exits first or after timeoutMs.
 */
export async function waitForSdpAnswer(proc: SippProcess, timeoutMs = 15_000): Promise<RemoteAddress & { seenAt: number }> {
  const file = argValue(proc.args, '-log_file');
  if (!file) throw new Error('SIPp runs without -trace_logs: cannot see the SDP answer');
  let exited = false;
  void proc.result.then(() => (exited = true));
  const deadline = nowMs() + timeoutMs;
  for (;;) {
    const text = existsSync(file) ? readFileSync(file, 'latin1') : '';
    const m = /sdp-answer ([0-9.]+):([0-9]+)/.exec(text);
    if (m) return { address: m[1]!, port: Number(m[2]), seenAt: nowMs() };
    if (exited) {
      // One last read: the file may have been written just before the exit (and then deleted).
      const r = await proc.result;
      throw new Error(`SIPp ended before callbridge's 200 OK with SDP:\n${r.describe()}`);
    }
    if (nowMs() > deadline) throw new Error(`no SDP answer from callbridge within ${timeoutMs} ms (SIPp still running)`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A SIP message of SIPp's trace with the time SIPp stamped on it (epoch ms). */
export interface TimedSipMessage {
  at: number;
  message: SipMessage;
}

/**
 * Parses SIPp's -trace_msg log with the timestamps of its separator lines
 * ("----------------------------------------------- 2026-11-24 02:54:05.063836", SIPp's local
 * time, which `new Date()` reads as local time too). Retransmissions appear each time.
 */
export function timedMessages(messageLog: string): TimedSipMessage[] {
  const out: TimedSipMessage[] = [];
  const sep = /^-{20,}\s*(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})(\.\d+)?\s*$/gm;
  const marks: Array<{ index: number; end: number; at: number }> = [];
  for (let m = sep.exec(messageLog); m; m = sep.exec(messageLog)) {
    const frac = m[3] ? Number(m[3]) * 1000 : 0;
    marks.push({ index: m.index, end: m.index + m[0].length, at: new Date(`${m[1]}T${m[2]}`).getTime() + frac });
  }
  marks.forEach((mark, i) => {
    const block = messageLog.slice(mark.end, marks[i + 1]?.index ?? messageLog.length);
    const head = /^\s*(UDP|TCP|TLS|SCTP|WS) message (sent|received)[^\n]*\n\n?/.exec(block);
    if (!head) return;
    const raw = block.slice(head[0].length).replace(/\s+$/, '').replace(/\r\n/g, '\n');
    if (raw) out.push({ at: mark.at, message: parseSipMessage(raw, head[2] as 'sent' | 'received', head[1]) });
  });
  return out;
}

/** Time (epoch ms) of the first traced message matching `pred`; undefined when none. */
export function sipTime(result: SippResult, pred: (m: SipMessage) => boolean): number | undefined {
  return timedMessages(result.messageLog).find((t) => pred(t.message))?.at;
}

export const isInvite200 = (m: SipMessage): boolean => m.direction === 'received' && m.status === 200 && m.cseqMethod === 'INVITE';
export const isByeFromCallbridge = (m: SipMessage): boolean => m.direction === 'received' && m.method === 'BYE';
export const isByeFromCaller = (m: SipMessage): boolean => m.direction === 'sent' && m.method === 'BYE';
export const isBye200 = (m: SipMessage): boolean => m.direction === 'received' && m.status === 200 && m.cseqMethod === 'BYE';

export interface BridgeCallOptions {
  scenario: 'bridge-digest' | 'bridge-acl';
  /** host:port of callbridge's SIP. */
  remote: string;
  /** The number dialled (Request-URI user). */
  service: string;
  /** The caller's number (From user). */
  caller: string;
  auth?: SippOptions['auth'];
  /** The caller hangs up (BYE) this long after the ACK; omitted: SIPp waits for callbridge's BYE. */
  hangupAfterMs?: number;
  /** Upper bound for the whole SIPp run. Default 30 s. */
  timeoutMs?: number;
  peer?: RtpPeerOptions;
}

export interface BridgeCall {
  peer: RtpPeer;
  proc: SippProcess;
  /** callbridge's SDP answer, as SIPp logged it, and when the test saw it. */
  answer: RemoteAddress & { seenAt: number };
  /** Kills SIPp (if still running) and closes the peer. Idempotent. */
  cleanup(): Promise<void>;
}

/**
 * Starts the RTP peer, then SIPp with the peer's port in the offer, waits for callbridge's 200 OK
 * and points the peer at the SDP answer (it starts sending silence at once).
 */
export async function placeBridgeCall(o: BridgeCallOptions): Promise<BridgeCall> {
  const peer = await startRtpPeer(o.peer);
  let proc: SippProcess | undefined;
  const cleanup = async () => {
    proc?.kill();
    if (proc) await proc.result.catch(() => undefined);
    await peer.close();
  };
  try {
    proc = await startSipp({
      scenario: o.scenario,
      remote: o.remote,
      service: o.service,
      keys: { caller: o.caller, media_port: peer.port },
      ...(o.auth ? { auth: o.auth } : {}),
      ...(o.hangupAfterMs !== undefined ? { vars: { hangup: 1 }, durationMs: o.hangupAfterMs } : {}),
      timeoutMs: o.timeoutMs ?? 30_000,
    });
    const answer = await waitForSdpAnswer(proc, Math.min(15_000, o.timeoutMs ?? 15_000));
    peer.setRemote({ address: answer.address, port: answer.port });
    return { peer, proc, answer, cleanup };
  } catch (err) {
    await cleanup();
    throw err;
  }
}
