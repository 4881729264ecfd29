/**
 * AES-256-GCM for secrets at rest (trunk passwords, carrier auth tokens).
 * Stored form: "v1:" + base64(iv[12] | tag[16] | ciphertext). The version prefix lets the key or
 * the algorithm change later without guessing.
 */
import { createCipheriv, createDecipheriv, createHmac, randomBytes } from 'node:crypto';

export class SecretBox {
  readonly #key: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw new RangeError('SecretBox key must be 32 bytes');
    this.#key = key;
  }

  seal(plaintext: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv);
    const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return 'v1:' + Buffer.concat([iv, cipher.getAuthTag(), ct]).toString('base64');
  }

  /**
   * HMAC-SHA256 of `data` under a key derived from this box's key for `purpose` (never the AES key
   * itself): a value only holders of the key can compute, the same on every node sharing it.
   */
  digest(purpose: string, data: string): Buffer {
    const subkey = createHmac('sha256', this.#key).update(`callbridge:${purpose}`).digest();
    return createHmac('sha256', subkey).update(data).digest();
  }

  /** @throws Error when the value was not sealed with this key (wrong key or tampered). */
  open(sealed: string): string {
    if (!sealed.startsWith('v1:')) throw new Error('unknown secret format');
    const raw = Buffer.from(sealed.slice(3), 'base64');
    const decipher = createDecipheriv('aes-256-gcm', this.#key, raw.subarray(0, 12));
    decipher.setAuthTag(raw.subarray(12, 28));
    return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
  }
}
