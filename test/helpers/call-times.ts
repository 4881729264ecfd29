/**
 * What every ended call that connected shows in its record, whatever its kind (SIP inbound or
 * outbound, carrier, web session): the service's times and reason (docs/calls.md "Times").
 */
import { expect } from 'vitest';

export function expectCallTimes(rec: Record<string, any>): void {
  const json = JSON.stringify(rec);
  expect(typeof rec.termination_reason, json).toBe('string');
  for (const k of ['created_at', 'connected_at', 'started_at', 'ended_at']) {
    expect(typeof rec[k], `${k}: ${json}`).toBe('string');
    expect(new Date(rec[k]).toISOString(), `${k}: ${json}`).toBe(rec[k]);
  }
  // One moment, shown under both names.
  expect(rec.connected_at, json).toBe(rec.started_at);
  expect(rec.created_at <= rec.started_at && rec.started_at <= rec.ended_at, json).toBe(true);
  expect(rec.duration_seconds, json).toBe(Math.round((Date.parse(rec.ended_at) - Date.parse(rec.started_at)) / 1000));
}
