/**
 * Webhook endpoints and the events they subscribe to (docs/webhooks.md). Pure: the checks the
 * API applies to an endpoint's fields and the event body's shape; no I/O.
 */
import type { Call } from './call.ts';
import { validation } from './errors.ts';

/** Every event type an endpoint may subscribe to (DESIGN.md "Decisions on what the API leaves open"). */
export const WEBHOOK_EVENT_TYPES = ['call.started', 'call.answered', 'call.ended', 'call.analyzed', 'recording.ready', 'tool.call'] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/** The event types carrying a call snapshot (`data.call`), written by the store with the call change. */
export type CallEventType = Extract<WebhookEventType, 'call.started' | 'call.answered' | 'call.ended' | 'call.analyzed' | 'recording.ready'>;

export const MAX_WEBHOOK_URL_LENGTH = 2048;
export const MAX_WEBHOOK_DESCRIPTION_LENGTH = 512;

/** The endpoint as the API shows it: never its secret (only the create answer carries that). */
export interface WebhookEndpoint {
  id: string;
  url: string;
  events: WebhookEventType[];
  description: string;
  created_at: string;
}

/**
 * The subscribed types, once each in the order given. @throws DomainError (400) naming the first
 * unknown type, or saying the list is empty.
 */
export function checkWebhookEvents(events: readonly string[]): WebhookEventType[] {
  if (events.length === 0) throw validation('body.events must name at least one event type');
  const unknown = events.find((e) => !(WEBHOOK_EVENT_TYPES as readonly string[]).includes(e));
  if (unknown !== undefined) throw validation(`body.events: unknown event type "${unknown}" (known: ${WEBHOOK_EVENT_TYPES.join(', ')})`);
  return [...new Set(events)] as WebhookEventType[];
}

/** The body of one event, as it is signed and sent: `{ type, id, created_at, data }`. */
export interface CallEventBody {
  type: CallEventType;
  /** The event's id: the webhook-id header, the same on every retry and for every endpoint. */
  id: string;
  created_at: string;
  /** recording_url: on recording.ready only (recordingUrlOf). */
  data: { call: Call; recording_url?: string };
}

/**
 * recording.ready's `data.recording_url`: GET /v1/calls/{id}/recording, which the receiver fetches
 * with its API key. Absolute under http.public_url when that is set (its trailing slashes dropped,
 * as for the carrier's voice URL); else the path alone, which the receiver resolves against the
 * base URL it calls the API at (the daemon does not know its own address behind a proxy).
 */
export function recordingUrlOf(publicUrl: string, callId: string): string {
  const path = `/v1/calls/${encodeURIComponent(callId)}/recording`;
  return publicUrl === '' ? path : publicUrl.replace(/\/+$/, '') + path;
}
