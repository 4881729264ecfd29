/**
 * What the agent's tool calls need from the webhook endpoints, as an interface: the runtime asks
 * for a target, the endpoints' repository answers (the composition root wires one to the other).
 */

/** One endpoint as a sender needs it: where, and the secret to sign with (never logged). */
export interface WebhookTarget {
  id: string;
  url: string;
  secret: string;
}

export interface ToolCallTargets {
  /**
   * The endpoint a tool call of this organization goes to: the one named by the tool node's
   * `webhook_id` when given (it must be the organization's), else the organization's endpoint
   * subscribed to `tool.call` (the oldest, when several are). Undefined: none.
   */
  forToolCall(orgId: string, webhookId?: string): Promise<WebhookTarget | undefined>;
}
