/**
 * The registration client's pure parts: when a granted binding is refreshed, the back-off after
 * failures, and which expiry a 200 grants (our Contact's parameter over the Expires header).
 */
import { describe, expect, it } from 'vitest';
import { createRequest, createResponse } from '../../src/sip/message/index.ts';
import { grantedExpirySecs, refreshDelaySecs, retryDelayMs } from '../../src/sip/ua/outbound-registration.ts';

const CONTACT = 'sip:cb0011223344556677@192.0.2.10:5060';

function ok(headers: [string, string | number][]) {
  const req = createRequest({ method: 'REGISTER', uri: 'sip:carrier.example', from: '<sip:acct@carrier.example>;tag=a', to: '<sip:acct@carrier.example>', headers: [['Via', 'SIP/2.0/UDP 192.0.2.10:5060;branch=z9hG4bKx']] });
  return createResponse(req, 200, 'OK', { headers });
}

describe('refreshDelaySecs', () => {
  it('refreshes short grants at half, long ones a minute before their end, never sooner than 1 s', () => {
    expect(refreshDelaySecs(4)).toBe(2);
    expect(refreshDelaySecs(60)).toBe(30);
    expect(refreshDelaySecs(120)).toBe(60);
    expect(refreshDelaySecs(3600)).toBe(3540);
    expect(refreshDelaySecs(1)).toBe(1);
    for (const g of [2, 10, 90, 600, 7200]) expect(refreshDelaySecs(g)).toBeLessThan(g);
  });
});

describe('retryDelayMs', () => {
  const retry = { initialMs: 5000, maxMs: 300_000 };
  it('doubles per failure up to the cap, jittered between half and all of it', () => {
    expect(retryDelayMs(1, retry, () => 0.999999)).toBe(5000);
    expect(retryDelayMs(1, retry, () => 0)).toBe(2500);
    expect(retryDelayMs(2, retry, () => 0.999999)).toBe(10_000);
    expect(retryDelayMs(4, retry, () => 0.999999)).toBe(40_000);
    expect(retryDelayMs(7, retry, () => 0.999999)).toBe(300_000);
    expect(retryDelayMs(500, retry, () => 0)).toBe(150_000);
  });
});

describe('grantedExpirySecs', () => {
  it("takes our Contact's expires parameter over the Expires header", () => {
    expect(grantedExpirySecs(ok([['Contact', `<sip:other@192.0.2.99>;expires=999`], ['Contact', `<${CONTACT}>;expires=120`], ['Expires', 3600]]), CONTACT)).toBe(120);
  });
  it('falls back to Expires when our Contact is not listed or has no parameter, else undefined', () => {
    expect(grantedExpirySecs(ok([['Contact', '<sip:other@192.0.2.99>;expires=999'], ['Expires', 300]]), CONTACT)).toBe(300);
    expect(grantedExpirySecs(ok([['Contact', `<${CONTACT}>`], ['Expires', 45]]), CONTACT)).toBe(45);
    expect(grantedExpirySecs(ok([]), CONTACT)).toBeUndefined();
  });
});
