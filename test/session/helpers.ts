/**
 * Test helpers of the voice socket: a scripted runtime factory that records what the server hands
 * it and lets the test send events or end the session, and a `ws` client that keeps every message
 * from the first one on.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import WebSocket from 'ws';
import { decodeJwt } from 'jose';
import type { CallAnalysis } from '../../src/domain/call.ts';
import type { SessionContext, SessionIo, SessionRuntimeFactory, TranscriptEntry } from '../../src/session/runtime-contract.ts';
import { SessionTokens, TOKEN_SECRET_FILE } from '../../src/session/tokens.ts';
import type { TestDaemon } from '../helpers/daemon.ts';

export interface ScriptedSession {
  ctx: SessionContext;
  io: SessionIo;
  audio: Int16Array[];
  toolOutputs: Array<[string, string]>;
  closeCalls: number;
  transcript: TranscriptEntry[];
  /** What runtime.analyze() answers (default: undefined, nothing to analyse). */
  analysis?: (signal: AbortSignal) => Promise<CallAnalysis | undefined>;
  analyzeCalls: number;
}

export interface ScriptedRuntime {
  factory: SessionRuntimeFactory;
  sessions: ScriptedSession[];
  /** The scripted session of that id, once the server created it. */
  session(id: string): Promise<ScriptedSession>;
}

/** @param onCreate runs inside the factory (a test may send or end from there, or throw) */
export function scriptedRuntime(onCreate?: (s: ScriptedSession) => void): ScriptedRuntime {
  const sessions: ScriptedSession[] = [];
  const factory: SessionRuntimeFactory = (ctx, io) => {
    const s: ScriptedSession = { ctx, io, audio: [], toolOutputs: [], closeCalls: 0, transcript: [], analyzeCalls: 0 };
    sessions.push(s);
    onCreate?.(s);
    return {
      inputAudio: (pcm) => s.audio.push(pcm.slice()), // a view of the server's buffer: copy (runtime contract)
      toolCallOutput: (id, output) => s.toolOutputs.push([id, output]),
      transcript: () => s.transcript,
      close: () => {
        s.closeCalls++;
      },
      analyze: (signal) => {
        s.analyzeCalls++;
        return s.analysis ? s.analysis(signal) : Promise.resolve(undefined);
      },
    };
  };
  return {
    factory,
    sessions,
    session: (id) => waitFor(() => sessions.find((s) => s.ctx.sessionId === id)),
  };
}

/** Polls until fn returns something truthy (or fails after timeoutMs). */
export async function waitFor<T>(fn: () => T | undefined | null | false, timeoutMs = 3000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export interface Client {
  ws: WebSocket;
  messages: any[];
  /** The n-th message (0-based), once it arrived. */
  message(n: number): Promise<any>;
  /** Resolves with the close code and reason. */
  closed: Promise<{ code: number; reason: string }>;
  opened: Promise<void>;
  send(obj: unknown): void;
}

export function wsUrl(d: TestDaemon, token?: string, extra = ''): string {
  const q = token === undefined ? '' : `?token=${encodeURIComponent(token)}`;
  return `${d.url.replace(/^http/, 'ws')}/v1/connection${q}${extra}`;
}

export function connect(url: string): Client {
  const ws = new WebSocket(url);
  const messages: any[] = [];
  ws.on('message', (data, isBinary) => messages.push(isBinary ? data : JSON.parse(data.toString())));
  ws.on('error', () => {});
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  const opened = new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('unexpected-response', (_req, res) => reject(new Error(`unexpected response ${res.statusCode}`)));
  });
  opened.catch(() => {});
  return {
    ws,
    messages,
    message: (n) => waitFor(() => (messages.length > n ? { m: messages[n] } : undefined), 3000, `message ${n}`).then((x) => x.m),
    closed,
    opened,
    send: (obj) => ws.send(typeof obj === 'string' ? obj : JSON.stringify(obj)),
  };
}

/** Connects where the server must refuse before the upgrade: the HTTP status and JSON body. */
export function rejected(url: string): Promise<{ status: number; body: any; upgraded: boolean }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url);
    ws.on('open', () => {
      ws.close();
      resolve({ status: 101, body: undefined, upgraded: true });
    });
    ws.on('unexpected-response', (_req, res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined, upgraded: false }));
    });
    ws.on('error', (err) => reject(err));
  });
}

/** A session token with its id and claims, from POST /v1/session-token. */
export async function issue(d: TestDaemon, body: Record<string, unknown>): Promise<{ token: string; id: string; body: any; claims: any }> {
  const r = await d.api('POST', '/v1/session-token', body);
  if (r.status !== 200) throw new Error(`session-token answered ${r.status}: ${r.text}`);
  const claims = decodeJwt(r.body.token);
  return { token: r.body.token, id: claims.sub as string, body: r.body, claims };
}

/** Signs tokens with the daemon's own secret (<data_dir>/token-secret). */
export function daemonTokens(d: TestDaemon): SessionTokens {
  return new SessionTokens(Buffer.from(readFileSync(join(d.dataDir, TOKEN_SECRET_FILE), 'utf8').trim(), 'base64'));
}

export const pcmBase64 = (samples: number[]): string => Buffer.from(new Int16Array(samples).buffer).toString('base64');
