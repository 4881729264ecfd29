/**
 * Our signing against the Standard Webhooks library from npm (`standardwebhooks`, what a
 * receiver uses): a signed request verifies there, and a changed body, id, timestamp or secret
 * does not.
 */
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { newWebhookSecret, signWebhook, webhookSecretKey } from '../../src/events/standard-webhooks.ts';

describe('Standard Webhooks signing', () => {
  const secret = newWebhookSecret();
  const body = JSON.stringify({ type: 'call.ended', id: 'evt_1', data: { call: { id: 'c1', transcript: 'héllo' } } });

  it('a new secret is whsec_ + base64 of 32 random bytes, and two differ', () => {
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(webhookSecretKey(secret)).toHaveLength(32);
    expect(newWebhookSecret()).not.toBe(secret);
  });

  it('verifies with the published library', () => {
    const headers = signWebhook(secret, 'msg_1', body);
    expect(new Webhook(secret).verify(body, headers)).toEqual(JSON.parse(body));
  });

  it('a changed body, id, timestamp or secret does not verify', () => {
    const headers = signWebhook(secret, 'msg_1', body);
    const wh = new Webhook(secret);
    expect(() => wh.verify(body + ' ', headers)).toThrow();
    expect(() => wh.verify(body, { ...headers, 'webhook-id': 'msg_2' })).toThrow();
    expect(() => wh.verify(body, { ...headers, 'webhook-timestamp': String(Number(headers['webhook-timestamp']) - 1) })).toThrow();
    expect(() => new Webhook(newWebhookSecret()).verify(body, headers)).toThrow();
  });

  it('a timestamp far from the receiver clock is refused by the receiver (replay window)', () => {
    const headers = signWebhook(secret, 'msg_1', body, Math.floor(Date.now() / 1000) - 3600);
    expect(() => new Webhook(secret).verify(body, headers)).toThrow();
  });

  it('a malformed secret is refused with a clear error', () => {
    expect(() => signWebhook('not-a-secret', 'm', body)).toThrow(/whsec_/);
    expect(() => webhookSecretKey('whsec_')).toThrow(/base64/);
  });
});
