/**
 * The voice WebSocket `GET /v1/connection?token=<SESSION_TOKEN>` (API document, Voice session and
 * Events; DESIGN.md, voice protocol). It owns the socket, the token check and the session record;
 * the conversation is run by a runtime from the injected SessionRuntimeFactory.
 *
 *   before the upgrade (preValidation hook, a plain HTTP answer, no handshake):
 *     503 draining | 401 token missing, malformed, badly signed, expired, already used, or
 *     agentId/versionId not those of the token | 404 agent gone or inactive, version gone
 *   after the upgrade:
 *     claim (one connection per token; the loser of a race is closed 1008) -> call answered ->
 *     session_started { id } -> runtime = factory(context, io) (none: session_ended error, 1011)
 *
 * Close codes (protocol.ts CLOSE; docs/voice-sessions.md): 1000 the session ended (io.end),
 * 1001 daemon shutdown, 1003 a binary frame, 1007 malformed JSON, fields or audio, 1008 token
 * already used or a client that stopped reading, 1009 a frame over 1 MiB (ws itself), 1011 no
 * runtime or the runtime failed.
 */
import websocket from '@fastify/websocket';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { WebSocket, RawData } from 'ws';
import type { Logger } from '../log.ts';
import type { Store } from '../store/index.ts';
import type { StoredAgent } from '../store/agents.ts';
import type { SessionRecord } from '../store/sessions.ts';
import type { FlowNode } from '../store/versions.ts';
import { base64ToPcm16 } from '../media/pcm.ts';
import { CLOSE, MAX_CLIENT_FRAME_BYTES, serializeServerEvent, type ServerEvent, type SessionEndReason } from './protocol.ts';
import type { SessionContext, SessionIo, SessionRuntime, SessionRuntimeFactory, TranscriptEntry } from './runtime-contract.ts';
import { transcriptFromRuntime } from '../domain/call.ts';
import { PostCallAnalyses } from './post-call-analyses.ts';
import { SessionSpans } from './session-spans.ts';
import type { SessionClaims, SessionTokens, TokenFailure } from './tokens.ts';

export const CONNECTION_PATH = '/v1/connection';
/** How often the client is pinged; a client that has not answered the previous ping is gone. */
export const DEFAULT_PING_INTERVAL_MS = 30_000;
/** Unsent bytes queued for one client beyond which it counts as not reading (closed 1008). */
export const DEFAULT_MAX_BUFFERED_BYTES = 4 * 1024 * 1024;
/** How long closing sockets get to finish their close handshake at shutdown. */
const SHUTDOWN_CLOSE_GRACE_MS = 1000;
/** How often call rows of tokens that expired unused are marked expired. */
const EXPIRY_SWEEP_MS = 60_000;

export interface SessionServerOptions {
  store: Store;
  logger: Logger;
  tokens: SessionTokens;
  /** Builds the conversation behind each session; main.ts injects the agent runtime's. */
  runtimeFactory?: SessionRuntimeFactory;
  /** True while the daemon drains: new connections get 503. */
  isDraining?: () => boolean;
  pingIntervalMs?: number;
  maxBufferedBytes?: number;
  /** Milliseconds clock (record times and token checks). */
  now?: () => number;
  /**
   * Whether this node runs the expiry sweep now (one node of a cluster does: the cluster role
   * session_token_sweep); default: always.
   */
  runsExpirySweep?: () => boolean;
  /** The sessions' trace spans (main.ts shares them with the agent runtime); default: a registry of its own. */
  spans?: SessionSpans;
}

/** What the daemon sees of the server (decorated on the app as `voiceSessions`). */
export interface VoiceSessionServer {
  /** Sessions with an open socket. */
  activeCount(): number;
  /** Resolves when no session is active or after deadlineMs, whichever is first. */
  drain(deadlineMs: number): Promise<void>;
}

declare module 'fastify' {
  interface FastifyInstance {
    voiceSessions: VoiceSessionServer;
  }
}

/** Everything the hook resolved before the upgrade, for the handler after it. */
interface Admission {
  claims: SessionClaims;
  session: SessionRecord;
  agent: StoredAgent;
  nodes: FlowNode[];
  /** The call row's direction (the runtime's context). */
  direction: SessionContext['direction'];
  /** The upgrade request's headers (the caller's trace context). */
  headers?: FastifyRequest['headers'];
}

const TOKEN_FAILURE_TEXT: Record<TokenFailure, string> = {
  expired: 'session token expired',
  bad_signature: 'session token signature is not valid',
  malformed: 'session token is malformed',
};

/** RFC 6455 5.5: a close reason fits in 123 bytes of UTF-8. */
export function closeReason(text: string): string {
  let s = text;
  while (Buffer.byteLength(s) > 123) s = s.slice(0, -1);
  return s;
}

function sendError(reply: FastifyReply, status: number, message: string): FastifyReply {
  if (status === 401) reply.header('www-authenticate', 'Bearer');
  return reply.code(status).send({ error: message });
}

export async function registerSessionServer(app: FastifyInstance, opts: SessionServerOptions): Promise<VoiceSessionServer> {
  const { store, tokens } = opts;
  const log = opts.logger.child({ component: 'session' });
  const now = opts.now ?? Date.now;
  const iso = () => new Date(now()).toISOString();
  const active = new Set<VoiceSession>();
  const analyses = new PostCallAnalyses(store.calls, iso);
  const admitted = new WeakMap<FastifyRequest, Admission>();
  const spans = opts.spans ?? new SessionSpans();
  let closing = false;

  // Rows left in progress by a daemon that stopped without ending them (a crash): no socket of
  // ours is open at this point, so they ended when it stopped.
  const stale = await store.sessions.endAbandoned(iso());
  if (stale > 0) log.warn({ count: stale }, 'voice sessions left open by the previous run marked ended (reason error)');
  const sweep = async () => {
    if (opts.runsExpirySweep?.() === false) return;
    try {
      const n = await store.sessions.expireUnused(iso());
      if (n > 0) log.debug({ count: n }, 'session tokens expired unused');
    } catch (err) {
      log.error({ err }, 'expiry sweep failed');
    }
  };
  await sweep();
  const sweepTimer = setInterval(() => void sweep(), EXPIRY_SWEEP_MS);
  sweepTimer.unref();

  await app.register(websocket, {
    options: { maxPayload: MAX_CLIENT_FRAME_BYTES, perMessageDeflate: false },
    // ws closes the socket itself on protocol errors (1009 over-size, 1007 bad UTF-8, 1002); the
    // session's own 'error' listener records it. The plugin's default would terminate the socket
    // before the close frame is out.
    errorHandler(error) {
      log.debug({ err: error }, 'websocket error');
    },
    // Shutdown: sessions get session_ended (reason error) and close 1001, the record is stored
    // while the store is still open, then the sockets get a moment to finish the close handshake.
    async preClose() {
      closing = true;
      clearInterval(sweepTimer);
      const sessions = [...active];
      for (const s of sessions) s.shutdown();
      await Promise.all(sessions.map((s) => s.socketClosed(SHUTDOWN_CLOSE_GRACE_MS)));
      // The end records are written before the store closes.
      await Promise.all(sessions.map((s) => s.endStored()));
      // Analyses of calls that ended get a moment; the rest are given up before the store closes.
      await analyses.close();
      for (const client of app.websocketServer.clients) client.terminate();
      await new Promise<void>((resolve) => app.websocketServer.close(() => resolve()));
    },
  });

  async function admit(req: FastifyRequest, reply: FastifyReply): Promise<FastifyReply | undefined> {
    if (closing || opts.isDraining?.()) return sendError(reply, 503, 'the daemon is shutting down; reconnect to another instance');
    const q = req.query as Record<string, unknown>;
    if (q.token === undefined || q.token === '') return sendError(reply, 401, `missing session token: connect to ${CONNECTION_PATH}?token=<SESSION_TOKEN>`);
    if (typeof q.token !== 'string') return sendError(reply, 401, 'session token is malformed (given more than once)');
    const verified = await tokens.verify(q.token);
    if (!verified.ok) return sendError(reply, 401, TOKEN_FAILURE_TEXT[verified.reason]);
    const claims = verified.claims;
    const session = await store.sessions.get(claims.sub);
    if (!session || session.org_id !== claims.org || session.agent_id !== claims.agent || session.token_jti !== claims.jti) {
      return sendError(reply, 401, 'session token does not name a session of this service');
    }
    if (session.connected_at !== null) return sendError(reply, 401, 'session token already used: a token opens one connection');
    // Some clients also send agentId / versionId; when present they must be the token's.
    for (const [param, expected] of [['agentId', claims.agent], ['versionId', claims.version]] as const) {
      const given = q[param];
      if (given !== undefined && given !== expected) return sendError(reply, 401, `${param} does not match the session token`);
    }
    const agent = await store.agents.get(session.org_id, session.agent_id);
    if (!agent || agent.status !== 'active') return sendError(reply, 404, 'active agent not found');
    let nodes: FlowNode[] = [];
    if (session.version_id !== null) {
      const version = await store.versions.get(agent.id, session.version_id);
      if (!version) return sendError(reply, 404, 'version of that agent not found');
      nodes = version.nodes;
    }
    const call = await store.calls.get(session.org_id, session.id);
    admitted.set(req, { claims, session, agent, nodes, direction: call?.direction ?? 'web' });
    return undefined;
  }

  app.route({
    method: 'GET',
    url: CONNECTION_PATH,
    // Authenticated by the token, not an API key (api/auth.ts skips public routes).
    config: { public: true },
    schema: { hide: true },
    preValidation: admit,
    // A valid token on a plain GET: the handshake is missing.
    handler: (_req, reply) => sendError(reply.header('upgrade', 'websocket'), 426, 'upgrade to a WebSocket: this endpoint speaks the voice protocol only'),
    wsHandler: (socket, req) => {
      const admission = admitted.get(req);
      admitted.delete(req);
      if (!admission) {
        socket.close(CLOSE.INTERNAL_ERROR, 'session not admitted');
        return;
      }
      const session = new VoiceSession(socket, { ...admission, headers: req.headers }, {
        store,
        spans,
        logger: log,
        runtimeFactory: opts.runtimeFactory,
        pingIntervalMs: opts.pingIntervalMs ?? DEFAULT_PING_INTERVAL_MS,
        maxBufferedBytes: opts.maxBufferedBytes ?? DEFAULT_MAX_BUFFERED_BYTES,
        iso,
        now,
        analyses,
        onEnd: (s) => active.delete(s),
      });
      // Added first: start() may already end the session (no runtime, or it failed to start).
      active.add(session);
      session.start().then(
        (started) => {
          if (!started) active.delete(session);
        },
        (err: unknown) => {
          active.delete(session);
          log.error({ err, sessionId: session.id }, 'voice session failed to start');
          socket.close(CLOSE.INTERNAL_ERROR, 'session failed to start');
        },
      );
    },
  });

  const server: VoiceSessionServer = {
    activeCount: () => active.size,
    async drain(deadlineMs) {
      const deadline = now() + deadlineMs;
      while (active.size > 0 && now() < deadline) {
        await Promise.race([Promise.all([...active].map((s) => s.socketClosed(deadline - now()))), new Promise((r) => setTimeout(r, 100))]);
      }
    },
  };
  app.decorate('voiceSessions', server);
  return server;
}

interface SessionDeps {
  store: Store;
  spans: SessionSpans;
  logger: Logger;
  runtimeFactory: SessionRuntimeFactory | undefined;
  pingIntervalMs: number;
  maxBufferedBytes: number;
  iso: () => string;
  now: () => number;
  analyses: PostCallAnalyses;
  onEnd: (s: VoiceSession) => void;
}

interface FinishOptions {
  /** Send session_ended first (when the socket is still open). */
  event?: boolean;
  transferNumber?: string;
  /** Close the socket with this code and reason (when it is still open). */
  close?: [code: number, reason: string];
  /** Tell the runtime to stop (everything but io.end, where the runtime decided itself). */
  closeRuntime: boolean;
  /** Why, for the log (never the token). */
  detail?: string;
}

/** A protocol violation by the client: the socket is closed with `code`. */
class ClientError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

/** One connection: socket <-> runtime, and the session's call record. */
class VoiceSession {
  readonly id: string;
  readonly #ws: WebSocket;
  readonly #a: Admission;
  readonly #d: SessionDeps;
  readonly #log: Logger;
  #runtime: SessionRuntime | undefined;
  #ended = false;
  readonly #audioScratch = { buffer: Buffer.alloc(0) };
  #startedAt = 0;
  #awaitingPong = false;
  #pingTimer: NodeJS.Timeout | undefined;
  #closed: Promise<void>;
  #markClosed!: () => void;
  /** The socket's close code once it closed (it may close while the claim is being stored). */
  #closeCode: number | undefined;
  /** The write of the end record, once the session ended. */
  #endStored: Promise<void> = Promise.resolve();
  readonly #unknownTypes = new Set<string>();
  readonly #counts = { framesIn: 0, audioSamplesIn: 0, toolOutputsIn: 0, eventsOut: 0, eventsDropped: 0 };

  constructor(ws: WebSocket, admission: Admission, deps: SessionDeps) {
    this.#ws = ws;
    this.#a = admission;
    this.#d = deps;
    this.id = admission.session.id;
    this.#log = deps.logger.child({ sessionId: this.id });
    this.#closed = new Promise((resolve) => (this.#markClosed = resolve));
    ws.once('close', (code: number) => {
      this.#closeCode = code;
      this.#markClosed();
    });
  }

  /**
   * Claims the session and starts it. False when this connection lost the token to another (or
   * the socket closed, or the daemon began shutting down, while the claim was being stored).
   */
  async start(): Promise<boolean> {
    const { store, iso } = this.#d;
    const s = this.#a.session;
    const at = iso();
    this.#startedAt = this.#d.now();
    // Frames the client sends while the claim is stored wait in the socket instead of being lost;
    // it reads again before anything is sent or closed (the close handshake needs its reply).
    this.#ws.pause();
    let claimed: boolean;
    try {
      claimed = await store.sessions.claim(s.id, s.token_jti, at);
      // Stored before anything can end the call: an end written first would keep started_at empty.
      if (claimed) await store.calls.markAnswered(s.id, at);
    } finally {
      this.#ws.resume();
    }
    if (!claimed) {
      this.#log.info('session token already used by another connection: closing 1008');
      this.#ws.close(CLOSE.POLICY_VIOLATION, 'session token already used');
      return false;
    }
    // The daemon began shutting down, or the client went away, while the claim was stored.
    if (this.#ended) return false;
    if (this.#closeCode !== undefined) {
      this.#onClose(this.#closeCode);
      return false;
    }
    // Listeners in the same turn as resume(): no frame is emitted before they are in place.
    this.#ws.on('message', (data, isBinary) => this.#onMessage(data, isBinary));
    this.#ws.on('close', (code) => this.#onClose(code));
    this.#ws.on('error', (err) => this.#onSocketError(err));
    this.#ws.on('pong', () => (this.#awaitingPong = false));
    this.#pingTimer = setInterval(() => this.#ping(), this.#d.pingIntervalMs);
    this.#pingTimer.unref();
    // The session's first line names what it runs on (STT, LLM, TTS: provider and type), so a
    // session that "hears nothing" or speaks in the wrong voice is explained by its own log.
    const providers = this.#describeProviders();
    this.#log.info({ orgId: s.org_id, agentId: s.agent_id, versionId: s.version_id, transport: s.transport, scopes: s.scopes, ...providers }, 'voice session started');
    this.#d.spans.start({ sessionId: s.id, orgId: s.org_id, agentId: s.agent_id, versionId: s.version_id, direction: this.#a.direction, transport: s.transport, headers: this.#a.headers ?? {} });

    this.#sendNow({ type: 'session_started', data: { id: s.id } });
    const factory = this.#d.runtimeFactory;
    if (!factory) {
      this.#finish('error', { event: true, close: [CLOSE.INTERNAL_ERROR, 'no runtime configured'], closeRuntime: false, detail: 'no runtime configured' });
      return true;
    }
    try {
      const runtime = factory(this.#context(), this.#io());
      this.#runtime = runtime;
      // The runtime may have ended the session from inside the factory.
      if (this.#ended) this.#safe('close', () => runtime.close());
    } catch (err) {
      this.#log.error({ err }, 'runtime failed to start');
      this.#finish('error', { event: true, close: [CLOSE.INTERNAL_ERROR, 'runtime failed to start'], closeRuntime: false, detail: 'runtime failed to start' });
    }
    return true;
  }

  #describeProviders(): Record<string, unknown> {
    try {
      return this.#d.runtimeFactory?.describe?.(this.#a.agent) ?? {};
    } catch (err) {
      return { providers: `not described: ${(err as Error).message}` };
    }
  }

  /** Daemon shutdown. */
  shutdown(): void {
    this.#finish('error', { event: true, close: [CLOSE.GOING_AWAY, 'server shutting down'], closeRuntime: true, detail: 'daemon shutdown' });
  }

  /** Resolves once the end record is written (or failed to be: that is logged). */
  endStored(): Promise<void> {
    return this.#endStored;
  }

  /** Resolves once the socket closed, or after waitMs (then the socket is terminated). */
  async socketClosed(waitMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, Math.max(0, waitMs))));
    await Promise.race([this.#closed, timeout]);
    clearTimeout(timer);
  }

  #context(): SessionContext {
    const s = this.#a.session;
    return {
      sessionId: s.id,
      orgId: s.org_id,
      agent: this.#a.agent,
      versionId: s.version_id,
      nodes: this.#a.nodes,
      callerId: s.caller_id,
      firstMessage: s.first_message ?? undefined,
      prompt: s.prompt ?? undefined,
      variables: s.variables,
      ...(s.machine_detection !== null ? { machineDetection: s.machine_detection } : {}),
      direction: this.#a.direction,
      // Only the bridge opens inbound/outbound sessions (POST /v1/session-token opens web ones),
      // and the bridge does not answer tool calls.
      clientAnswersTools: this.#a.direction === 'web',
    };
  }

  #io(): SessionIo {
    return {
      send: (event) => this.#send(event),
      end: (reason, details) =>
        this.#finish(reason, { event: true, transferNumber: details?.transferNumber, close: [CLOSE.NORMAL, `session ended: ${reason}`], closeRuntime: false }),
    };
  }

  /** io.send: quietly dropped once the session ended or the socket closed. */
  #send(event: ServerEvent): void {
    if (this.#ended || this.#ws.readyState !== this.#ws.OPEN) {
      this.#counts.eventsDropped++;
      return;
    }
    this.#sendNow(event);
    if (this.#ws.bufferedAmount > this.#d.maxBufferedBytes) {
      // The client stopped reading: ending here bounds the memory one session can hold.
      this.#finish('error', {
        close: [CLOSE.POLICY_VIOLATION, 'client is not reading: too much unsent data'],
        closeRuntime: true,
        detail: `send buffer over ${this.#d.maxBufferedBytes} bytes`,
      });
      // The close frame waits behind the unread data: do not let it wait long.
      setTimeout(() => this.#ws.terminate(), 1000).unref();
    }
  }

  #sendNow(event: ServerEvent): void {
    let text: string;
    try {
      text = serializeServerEvent(event);
    } catch (err) {
      this.#counts.eventsDropped++;
      this.#log.warn({ err, type: event.type }, 'event could not be serialized: dropped');
      return;
    }
    this.#ws.send(text);
    this.#counts.eventsOut++;
  }

  #onMessage(data: RawData, isBinary: boolean): void {
    if (this.#ended) return;
    this.#counts.framesIn++;
    try {
      if (isBinary) throw new ClientError(CLOSE.UNSUPPORTED, 'binary frames are not accepted: send JSON text');
      this.#dispatch(parseClientMessage(data.toString()));
    } catch (err) {
      if (err instanceof ClientError) {
        this.#finish('error', { close: [err.code, closeReason(err.message)], closeRuntime: true, detail: err.message });
      } else {
        this.#log.error({ err }, 'runtime failed');
        this.#finish('error', { event: true, close: [CLOSE.INTERNAL_ERROR, 'internal error'], closeRuntime: true, detail: 'runtime threw' });
      }
    }
  }

  #dispatch(msg: { type: string; data: unknown }): void {
    switch (msg.type) {
      case 'input_audio': {
        const data = requireData(msg);
        const audio = data.audio;
        if (typeof audio !== 'string') throw new ClientError(CLOSE.INVALID_PAYLOAD, 'input_audio: data.audio must be a base64 string');
        let pcm: Int16Array;
        try {
          // Decoded into this session's reused buffer: the runtime copies what it keeps
          // (SessionRuntime.inputAudio), so no allocation per 20 ms frame.
          pcm = base64ToPcm16(audio, this.#audioScratch);
        } catch (err) {
          throw new ClientError(CLOSE.INVALID_PAYLOAD, `input_audio: ${(err as Error).message}`);
        }
        this.#counts.audioSamplesIn += pcm.length;
        if (pcm.length > 0) this.#runtime?.inputAudio(pcm);
        return;
      }
      case 'tool_call_output': {
        const data = requireData(msg);
        if (typeof data.toolCallId !== 'string') throw new ClientError(CLOSE.INVALID_PAYLOAD, 'tool_call_output: data.toolCallId must be a string');
        if (typeof data.output !== 'string') throw new ClientError(CLOSE.INVALID_PAYLOAD, 'tool_call_output: data.output must be a string');
        this.#counts.toolOutputsIn++;
        this.#runtime?.toolCallOutput(data.toolCallId, data.output);
        return;
      }
      case 'dtmf': {
        // Extension (docs/decisions.md): a key the caller pressed, sent by the call bridge.
        const data = requireData(msg);
        if (typeof data.digit !== 'string' || !/^[0-9A-Da-d*#]$/.test(data.digit)) throw new ClientError(CLOSE.INVALID_PAYLOAD, 'dtmf: data.digit must be one of 0-9, A-D, * and #');
        this.#runtime?.dtmf?.(data.digit.toUpperCase());
        return;
      }
      default:
        // Newer clients may send types this server does not know: ignored, logged once per type.
        if (!this.#unknownTypes.has(msg.type) && this.#unknownTypes.size < 32) {
          this.#unknownTypes.add(msg.type);
          this.#log.warn({ type: msg.type.slice(0, 64) }, 'unknown client message type ignored');
        }
    }
  }

  #ping(): void {
    if (this.#ended) return;
    if (this.#awaitingPong) {
      // No pong for a whole interval: the client (or the network to it) is gone.
      this.#finish('client_closed', { closeRuntime: true, detail: 'no pong from the client' });
      this.#ws.terminate();
      return;
    }
    this.#awaitingPong = true;
    this.#ws.ping();
  }

  #onClose(code: number): void {
    this.#finish('client_closed', { closeRuntime: true, detail: `socket closed (${code})` });
  }

  /** ws closes the socket itself for these (1009 over-size frame, 1007 bad UTF-8, 1002). */
  #onSocketError(err: Error): void {
    this.#finish('error', { closeRuntime: true, detail: err.message });
  }

  /** Ends the session once: event, record, runtime, socket, log. */
  #finish(reason: SessionEndReason, o: FinishOptions): void {
    if (this.#ended) return;
    this.#ended = true;
    clearInterval(this.#pingTimer);
    const open = this.#ws.readyState === this.#ws.OPEN;
    if (o.event && open) {
      this.#sendNow({ type: 'session_ended', data: o.transferNumber !== undefined ? { reason, transfer_number: o.transferNumber } : { reason } });
    }
    const runtime = this.#runtime;
    // Close first: a runtime stopping mid-turn commits what the caller heard of it.
    if (o.closeRuntime && runtime) this.#safe('close', () => runtime.close());
    const transcript = (runtime && this.#safe('transcript', () => runtime.transcript())) ?? ([] as TranscriptEntry[]);
    const machineDetection = runtime?.machineDetection && this.#safe('machineDetection', () => runtime.machineDetection!());
    // Issued now, before the socket closes (on SQLite it runs at once); shutdown awaits it (endStored).
    // The post-call analysis follows the end, on the node whose end was stored: one per call.
    const analyze = runtime?.analyze?.bind(runtime);
    this.#endStored = this.#d.store.calls
      .end(this.id, { ended_at: this.#d.iso(), termination_reason: reason, transcript: transcriptFromRuntime(transcript).entries, ...(machineDetection ? { machine_detection: machineDetection } : {}) })
      .then(
        (ended) => {
          if (ended && analyze) this.#d.analyses.start(this.id, this.#log, analyze);
        },
        (err: unknown) => this.#log.error({ err }, 'storing the session end failed'),
      );
    if (o.close && open) this.#ws.close(o.close[0], o.close[1]);
    // After the runtime's close: the turns it completes there are still under a live span.
    this.#d.spans.end(this.id, reason, o.detail !== undefined ? { 'callbridge.session.end_detail': o.detail.slice(0, 200) } : {});
    this.#d.onEnd(this);
    this.#log.info(
      { reason, detail: o.detail, durationMs: this.#d.now() - this.#startedAt, transcriptEntries: transcript.length, ...this.#counts, ...(o.transferNumber ? { transfer: true } : {}) },
      'voice session ended',
    );
  }

  #safe<T>(what: string, fn: () => T): T | undefined {
    try {
      return fn();
    } catch (err) {
      this.#log.error({ err }, `runtime.${what}() threw`);
      return undefined;
    }
  }
}

/** `{ type, data }` from a text frame, or a ClientError (1007) naming what is wrong. */
export function parseClientMessage(text: string): { type: string; data: unknown } {
  let msg: unknown;
  try {
    msg = JSON.parse(text);
  } catch (err) {
    throw new ClientError(CLOSE.INVALID_PAYLOAD, `malformed JSON: ${(err as Error).message}`);
  }
  if (typeof msg !== 'object' || msg === null || Array.isArray(msg)) throw new ClientError(CLOSE.INVALID_PAYLOAD, 'a message must be a JSON object { type, data }');
  const { type, data } = msg as { type?: unknown; data?: unknown };
  if (typeof type !== 'string') throw new ClientError(CLOSE.INVALID_PAYLOAD, 'message type must be a string');
  return { type, data };
}

function requireData(msg: { type: string; data: unknown }): Record<string, unknown> {
  if (typeof msg.data !== 'object' || msg.data === null || Array.isArray(msg.data)) {
    throw new ClientError(CLOSE.INVALID_PAYLOAD, `${msg.type}: data must be an object`);
  }
  return msg.data as Record<string, unknown>;
}
