/**
 * store.url and store.pool_size (src/config.ts): which database the store uses, and what start-up
 * refuses. The URL may hold a password: no message repeats it.
 */
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../src/config.ts';

const KEY = Buffer.alloc(32, 7).toString('base64');
const SECRETS = { security: { encryption_key: KEY, token_secret: KEY } };
const PASSWORD = 'pw-Zq81-never-shown';

function refusal(overrides: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): string {
  try {
    loadConfig(overrides, env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('the configuration was accepted');
}

describe('store settings', () => {
  it('default to the embedded SQLite database with a pool of 10 for PostgreSQL', () => {
    expect(loadConfig({}, {}).store).toEqual({ url: '', pool_size: 10 });
  });

  it('take a postgres:// or postgresql:// URL from CALLBRIDGE_STORE_URL, with both secrets set', () => {
    for (const url of [`postgres://cb:${PASSWORD}@127.0.0.1:5432/cb`, 'postgresql://cb@localhost/cb?sslmode=disable']) {
      const c = loadConfig(SECRETS, { CALLBRIDGE_STORE_URL: url, CALLBRIDGE_STORE_POOL_SIZE: '3' });
      expect(c.store).toEqual({ url, pool_size: 3 });
    }
  });

  it('refuse another scheme or a string that is not a URL, naming the setting and not the value', () => {
    for (const url of [`mysql://cb:${PASSWORD}@127.0.0.1/cb`, `sqlite:${PASSWORD}`, PASSWORD, `postgres//cb:${PASSWORD}@host/db`]) {
      const message = refusal(SECRETS, { CALLBRIDGE_STORE_URL: url });
      expect(message).toContain('store.url');
      expect(message).toMatch(/postgres:\/\/ or postgresql:\/\//);
      expect(message).not.toContain(PASSWORD);
    }
  });

  it('refuse PostgreSQL without security.encryption_key or security.token_secret, naming both', () => {
    const url = `postgres://cb:${PASSWORD}@127.0.0.1/cb`;
    for (const security of [{}, { encryption_key: KEY }, { token_secret: KEY }]) {
      const message = refusal({ store: { url }, security });
      expect(message).toContain('security.encryption_key');
      expect(message).toContain('security.token_secret');
      expect(message).not.toContain(PASSWORD);
    }
    // The embedded SQLite generates them into data_dir instead.
    expect(loadConfig({}, {}).security).toEqual({ encryption_key: '', token_secret: '' });
  });

  it('refuse a pool of no connections', () => {
    expect(refusal({ store: { pool_size: 0 } })).toContain('store.pool_size');
    expect(refusal({}, { CALLBRIDGE_STORE_POOL_SIZE: 'ten' })).toContain('store.pool_size');
  });
});
