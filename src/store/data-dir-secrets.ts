/**
 * Secrets that default to being generated once and kept in the data directory (mode 0600), so a
 * fresh install needs no configuration and a restart keeps decrypting what it stored.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** The configured base64 secret, or the one in <dataDir>/<file>, created on first use. */
export function loadOrCreateSecret(dataDir: string, file: string, configured: string): Buffer {
  if (configured) return Buffer.from(configured, 'base64');
  const path = join(dataDir, file);
  if (existsSync(path)) {
    const key = Buffer.from(readFileSync(path, 'utf8').trim(), 'base64');
    if (key.length !== 32) throw new Error(`${path} does not hold a 32-byte base64 secret`);
    return key;
  }
  const key = randomBytes(32);
  writeFileSync(path, key.toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
  return key;
}
