/**
 * Webhook endpoints of an organization (table webhook_endpoints, migration 16; docs/webhooks.md).
 * Reads through the API are scoped by org_id (another organization's endpoint is "not found").
 * The signing secret is sealed with the SecretBox like trunk passwords; no method returns it but
 * forToolCall() and the deliverer's claim (webhook-outbox.ts), which sign with it.
 */
import type { SqlClient } from './sql-client.ts';
import type { SecretBox } from './secret-box.ts';
import type { WebhookEndpoint, WebhookEventType } from '../domain/webhook.ts';

interface EndpointRow {
  id: string;
  org_id: string;
  url: string;
  events: string;
  description: string;
  created_at: string;
}

const COLUMNS = 'id, org_id, url, events, description, created_at';

const fromRow = (r: EndpointRow): WebhookEndpoint => ({
  id: r.id,
  url: r.url,
  events: JSON.parse(r.events) as WebhookEventType[],
  description: r.description,
  created_at: r.created_at,
});

/** One endpoint as a sender needs it (events/targets.ts WebhookTarget): where, and the secret. */
export interface EndpointTarget {
  id: string;
  url: string;
  secret: string;
}

export interface NewWebhookEndpoint {
  id: string;
  org_id: string;
  url: string;
  events: WebhookEventType[];
  description: string;
  secret: string;
  created_at: string;
}

export class WebhookEndpointRepo {
  constructor(
    private readonly db: SqlClient,
    private readonly box: SecretBox,
  ) {}

  async insert(e: NewWebhookEndpoint): Promise<void> {
    await this.db.run('INSERT INTO webhook_endpoints (id, org_id, url, events, description, secret_enc, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)', [
      e.id,
      e.org_id,
      e.url,
      JSON.stringify(e.events),
      e.description,
      this.box.seal(e.secret),
      e.created_at,
      e.created_at,
    ]);
  }

  async get(orgId: string, id: string): Promise<WebhookEndpoint | undefined> {
    const r = await this.db.get<EndpointRow>(`SELECT ${COLUMNS} FROM webhook_endpoints WHERE id = ? AND org_id = ?`, [id, orgId]);
    return r && fromRow(r);
  }

  /** The organization's endpoints, oldest first. */
  async list(orgId: string, limit: number, offset: number): Promise<WebhookEndpoint[]> {
    return (await this.db.all<EndpointRow>(`SELECT ${COLUMNS} FROM webhook_endpoints WHERE org_id = ? ORDER BY created_at, id LIMIT ? OFFSET ?`, [orgId, limit, offset])).map(fromRow);
  }

  /** Writes the fields given; false when the organization has no such endpoint. */
  async update(orgId: string, id: string, change: { url?: string; events?: WebhookEventType[]; description?: string }, at: string): Promise<boolean> {
    const r = await this.db.run(
      'UPDATE webhook_endpoints SET url = COALESCE(?, url), events = COALESCE(?, events), description = COALESCE(?, description), updated_at = ? WHERE id = ? AND org_id = ?',
      [change.url ?? null, change.events ? JSON.stringify(change.events) : null, change.description ?? null, at, id, orgId],
    );
    return r.changes === 1;
  }

  /** Deletes the endpoint; its deliveries, sent or not, go with it (ON DELETE CASCADE). */
  async delete(orgId: string, id: string): Promise<boolean> {
    return (await this.db.run('DELETE FROM webhook_endpoints WHERE id = ? AND org_id = ?', [id, orgId])).changes === 1;
  }

  /**
   * ToolCallTargets.forToolCall (events/targets.ts): the endpoint named by `webhookId` when it is
   * the organization's, else the organization's oldest endpoint subscribed to tool.call.
   */
  async forToolCall(orgId: string, webhookId?: string): Promise<EndpointTarget | undefined> {
    const row =
      webhookId !== undefined
        ? await this.db.get<{ id: string; url: string; secret_enc: string }>('SELECT id, url, secret_enc FROM webhook_endpoints WHERE id = ? AND org_id = ?', [webhookId, orgId])
        : (await this.db.all<{ id: string; url: string; secret_enc: string; events: string }>('SELECT id, url, secret_enc, events FROM webhook_endpoints WHERE org_id = ? ORDER BY created_at, id', [orgId])).find((r) =>
            (JSON.parse(r.events) as string[]).includes('tool.call'),
          );
    return row && { id: row.id, url: row.url, secret: this.box.open(row.secret_enc) };
  }
}
