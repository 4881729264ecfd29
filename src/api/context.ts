/** What the API layer is given by the composition root (main.ts) and what it adds to requests. */
import type { Config } from '../config.ts';
import type { VoiceCatalog } from '../agent/voice-catalog/catalog.ts';
import type { OutboundDial } from '../domain/dial.ts';
import type { Logger } from '../log.ts';
import type { Store } from '../store/index.ts';
import type { Organization } from '../store/organizations.ts';
import type { CarrierClient } from '../telco/carrier-client.ts';
import type { SessionTokens } from '../session/tokens.ts';
import type { SessionRuntimeFactory } from '../session/runtime-contract.ts';
import type { StartedStream, StreamSink } from '../telco/twilio-stream-socket.ts';
import type { StreamTokens } from '../telco/twilio-stream-tokens.ts';
import type { CarrierCallStatus } from '../telco/twilio-call-status.ts';
import type { CarrierDialRequest } from '../domain/dial.ts';
import type { LiveCallsProvider } from '../domain/live-call.ts';
import type { SessionSpans } from '../session/session-spans.ts';

export interface Readiness {
  ready: boolean;
  draining: boolean;
  /** Not ready although it started: a dependency (the store, SIP) is down. False while starting. */
  started?: boolean;
  reason?: string;
}

/** Places the call (its record exists when this resolves); throws DomainError when it cannot. */
export type Dialer = (req: OutboundDial) => Promise<{ callId: string }>;

export interface ApiDeps {
  config: Config;
  store: Store;
  logger: Logger;
  carrier: CarrierClient;
  /** Readiness of the whole daemon (HTTP and SIP listening, not draining). */
  readiness: () => Readiness;
  /** The voices of the configured voice providers (GET /v1/voices, the voice check of agents). */
  voiceCatalog: VoiceCatalog;
  /** Outbound calls; undefined: the dial route answers 503. */
  dialer?: Dialer | undefined;
  /** Signs and verifies session tokens (POST /v1/session-token, /v1/connection). */
  tokens: SessionTokens;
  /** Runs the conversation of each voice session; none: sessions close 1011 "no runtime configured". */
  runtimeFactory?: SessionRuntimeFactory;
  /** Bridges the carrier's media streams (routes/twilio.ts); undefined: streams are closed 1013. */
  carrierStreams?: { handle(stream: StartedStream): StreamSink; callLimitReached(orgId: string, callSid: string): Promise<string | undefined>; callStatus(update: CarrierCallStatus): Promise<void> } | undefined;
  /** The media streams' one-time tokens, shared by the voice webhook and outbound carrier dials. */
  streamTokens?: StreamTokens | undefined;
  /** Dials from an agent's carrier number through the carrier's call API; undefined: 503. */
  carrierDialer?: ((req: CarrierDialRequest) => Promise<{ callId: string }>) | undefined;
  /** The calls this node bridges now with their media figures (GET /v1/calls/live); undefined: none. */
  liveCalls?: LiveCallsProvider | undefined;
  /** Tuning of the /v1/connection server (tests shorten the ping interval). */
  sessionServer?: { pingIntervalMs?: number; maxBufferedBytes?: number; runsExpirySweep?: () => boolean; spans?: SessionSpans };
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The organization of the request's API key; set by the auth hook on protected routes. */
    org: Organization;
    /** The id of the request's API key (GET /v1/api-keys marks it as `current`). */
    apiKeyId: string;
  }
}
