/**
 * Signing as the Standard Webhooks specification says (standardwebhooks.com), so that a receiver
 * verifies callbridge's requests with that specification's published libraries:
 *
 *   webhook-id:        the message id (the same on every retry of one message)
 *   webhook-timestamp: integer seconds since the epoch, when this attempt was signed
 *   webhook-signature: "v1," + base64(HMAC-SHA256(secret bytes, "{id}.{timestamp}.{body}"))
 *
 * The secret is "whsec_" + base64 of its bytes; the HMAC key is the decoded bytes, not the text.
 * Hand-written on node:crypto: it is one HMAC, and the tests verify it with the npm library
 * `standardwebhooks` (the receiver's side), not with this code.
 */
import { createHmac, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';

/** A new endpoint secret: "whsec_" + base64 of 32 random bytes. */
export function newWebhookSecret(): string {
  return PREFIX + randomBytes(32).toString('base64');
}

/** The secret's key bytes. @throws Error when it is not "whsec_" + base64. */
export function webhookSecretKey(secret: string): Buffer {
  if (!secret.startsWith(PREFIX)) throw new Error('a webhook secret starts with whsec_');
  const key = Buffer.from(secret.slice(PREFIX.length), 'base64');
  if (key.length === 0) throw new Error('a webhook secret carries base64 key bytes after whsec_');
  return key;
}

/** The three headers of one signed attempt of message `id` with this exact body. */
export function signWebhook(secret: string, id: string, body: string, timestampSecs = Math.floor(Date.now() / 1000)): Record<'webhook-id' | 'webhook-timestamp' | 'webhook-signature', string> {
  const mac = createHmac('sha256', webhookSecretKey(secret)).update(`${id}.${timestampSecs}.${body}`).digest('base64');
  return { 'webhook-id': id, 'webhook-timestamp': String(timestampSecs), 'webhook-signature': `v1,${mac}` };
}
