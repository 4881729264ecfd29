/** The call record's mappings (src/domain/call.ts; tables in docs/calls.md). */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  durationSeconds,
  endStatusOf,
  failedDialEnd,
  outcomeOf,
  pagination,
  parseInstant,
  partyNumber,
  sourceOf,
  toCall,
  transcriptFromRuntime,
  type CallRecord,
} from '../../src/domain/call.ts';

const record = (over: Partial<CallRecord> = {}): CallRecord => ({
  id: '5d0f3a9e-8c1b-4f7a-9e2d-6b4c3a2f1e00',
  org_id: '5d0f3a9e-8c1b-4f7a-9e2d-6b4c3a2f1e01',
  agent_id: null,
  graph_version_id: null,
  sip_trunk_id: null,
  direction: 'inbound',
  source: 'sip',
  status: 'started',
  end_status: null,
  from: '+15550001111',
  to: '+15550002222',
  party_number: '+15550001111',
  created_at: '2026-01-01T00:00:00.000Z',
  started_at: null,
  ended_at: null,
  termination_reason: null,
  outcome: null,
  transcript: { entries: [] },
  summary: null,
  extracted_variables: [],
  analyzed_at: null,
  has_recording: false,
  carrier_call_id: null,
  tags: [],
  machine_detection: null,
  ...over,
});

describe('transcriptFromRuntime', () => {
  it('maps agent/user/tool lines and keeps interrupted', () => {
    const t = transcriptFromRuntime([
      { role: 'agent', text: 'Hello!', at: '2026-01-01T00:00:00.000Z', turn_id: 't1' },
      { role: 'user', text: 'What time is it?', at: '2026-01-01T00:00:01.000Z' },
      { role: 'tool', text: 'clock: 10:00: morning', at: '2026-01-01T00:00:02.000Z' },
      { role: 'agent', text: 'It is ten', at: '2026-01-01T00:00:03.000Z', turn_id: 't2', interrupted: true },
      { role: 'tool', text: 'no separator', at: '2026-01-01T00:00:04.000Z' },
      { role: 'agent', text: 'Bye', at: '2026-01-01T00:00:05.000Z', interrupted: false },
    ]);
    expect(t.entries).toEqual([
      { index: 0, role: 'assistant', message: 'Hello!', type: 'message', createdAt: '2026-01-01T00:00:00.000Z', turnId: 't1' },
      { index: 1, role: 'user', message: 'What time is it?', type: 'message', createdAt: '2026-01-01T00:00:01.000Z' },
      { index: 2, message: 'clock: 10:00: morning', type: 'tool_call', toolCall: { toolName: 'clock', output: '10:00: morning' }, createdAt: '2026-01-01T00:00:02.000Z' },
      { index: 3, role: 'assistant', message: 'It is ten', type: 'message', createdAt: '2026-01-01T00:00:03.000Z', turnId: 't2', interrupted: true },
      { index: 4, message: 'no separator', type: 'tool_call', toolCall: { toolName: 'no separator' }, createdAt: '2026-01-01T00:00:04.000Z' },
      { index: 5, role: 'assistant', message: 'Bye', type: 'message', createdAt: '2026-01-01T00:00:05.000Z' },
    ]);
    expect(transcriptFromRuntime([])).toEqual({ entries: [] });
  });

  it("maps a tool call and its output to the service's tool_call and tool_call_output entries", () => {
    const call = { callId: 'tc1', toolName: 'lookup_order', arguments: '{"order_id":"42"}', startedAt: '2026-01-01T00:00:02.000Z' };
    const t = transcriptFromRuntime([
      { role: 'tool', text: 'lookup_order({"order_id":"42"})', at: '2026-01-01T00:00:02.000Z', toolCall: call },
      { role: 'tool', text: 'lookup_order: shipped', at: '2026-01-01T00:00:03.000Z', toolCall: { ...call, output: 'shipped', endedAt: '2026-01-01T00:00:03.000Z' }, toolCallOutput: 'shipped' },
    ]);
    expect(t.entries).toEqual([
      { index: 0, type: 'tool_call', toolCall: call, createdAt: '2026-01-01T00:00:02.000Z' },
      { index: 1, type: 'tool_call_output', toolCall: { ...call, output: 'shipped', endedAt: '2026-01-01T00:00:03.000Z' }, toolCallOutput: 'shipped', createdAt: '2026-01-01T00:00:03.000Z' },
    ]);
  });
});

describe('record mappings', () => {
  it('source, party number, outcome, end status, failed dials', () => {
    expect([sourceOf('inbound'), sourceOf('outbound'), sourceOf('web')]).toEqual(['sip', 'sip', 'api']);
    expect([partyNumber('inbound', 'A', 'B'), partyNumber('outbound', 'A', 'B'), partyNumber('web', 'A', 'B')]).toEqual(['A', 'B', 'A']);
    expect(outcomeOf('transfer')).toBe('transferred');
    for (const r of ['agent_hangup', 'timeout', 'silence_timeout']) expect(outcomeOf(r)).toBe('ended_by_agent');
    for (const r of ['client_closed', 'caller side ended: remote_bye', 'callee side ended: remote_bye']) expect(outcomeOf(r)).toBe('ended_by_user');
    for (const r of ['error', 'token_expired', 'busy (486)', 'toString', '__proto__']) expect(outcomeOf(r)).toBeUndefined();
    expect([endStatusOf('error'), endStatusOf('client_closed')]).toEqual(['failed', 'completed']);
    expect(failedDialEnd('busy', 486)).toEqual({ termination_reason: 'busy (486)', status: 'ended', end_status: 'busy' });
    expect(failedDialEnd('no_answer')).toEqual({ termination_reason: 'no_answer', status: 'ended', end_status: 'no_answer' });
    expect(failedDialEnd('auth_failed', 403)).toEqual({ termination_reason: 'auth_failed (403)', status: 'auth_failed', end_status: 'failed' });
    expect(failedDialEnd('unreachable')).toEqual({ termination_reason: 'unreachable', status: 'ended', end_status: 'failed' });
  });

  it('duration is whole seconds from started_at to ended_at', () => {
    expect(durationSeconds('2026-01-01T00:00:00.000Z', '2026-01-01T00:01:01.600Z')).toBe(62);
    expect(durationSeconds(null, '2026-01-01T00:01:01.600Z')).toBeUndefined();
    expect(durationSeconds('2026-01-01T00:00:00.000Z', null)).toBeUndefined();
  });

  it('toCall omits what has no value and shows the rest', () => {
    const running = toCall(record());
    for (const k of ['agent_id', 'graph_version_id', 'termination_reason', 'connected_at', 'started_at', 'ended_at', 'summary', 'duration_seconds', 'sip_trunk_id', 'end_status', 'outcome']) {
      expect(running, k).not.toHaveProperty(k);
    }
    expect(Object.values(running)).not.toContain(null);
    expect(running).toMatchObject({ organization_id: record().org_id, party_number: '+15550001111', status: 'started', source: 'sip', outbound: false, extracted_variables: [], tags: [], transcript: { entries: [] }, direction: 'inbound', has_recording: false });
    const ended = toCall(
      record({
        agent_id: 'a',
        graph_version_id: 'v',
        sip_trunk_id: 's',
        direction: 'outbound',
        party_number: '+15550002222',
        status: 'ended',
        end_status: 'completed',
        started_at: '2026-01-01T00:00:10.000Z',
        ended_at: '2026-01-01T00:01:10.000Z',
        termination_reason: 'transfer',
        outcome: 'transferred',
        summary: 'ok',
        has_recording: true,
        tags: ['vip'],
      }),
    );
    expect(ended).toMatchObject({
      agent_id: 'a',
      graph_version_id: 'v',
      sip_trunk_id: 's',
      outbound: true,
      party_number: '+15550002222',
      connected_at: '2026-01-01T00:00:10.000Z',
      started_at: '2026-01-01T00:00:10.000Z',
      ended_at: '2026-01-01T00:01:10.000Z',
      duration_seconds: 60,
      termination_reason: 'transfer',
      end_status: 'completed',
      outcome: 'transferred',
      summary: 'ok',
      has_recording: true,
      tags: ['vip'],
    });
  });
});

describe('parseInstant', () => {
  it('reads RFC 3339 and ISO 8601 forms as the stored form', () => {
    expect(parseInstant('2026-01-31T09:00:00Z', 'from')).toBe('2026-01-31T09:00:00.000Z');
    expect(parseInstant('2026-01-31T09:00:00.5+02:00', 'from')).toBe('2026-01-31T07:00:00.500Z');
    expect(parseInstant('2026-01-31T09:00:00-0130', 'to')).toBe('2026-01-31T10:30:00.000Z');
    expect(parseInstant('2026-01-31 09:00', 'from')).toBe('2026-01-31T09:00:00.000Z');
    expect(parseInstant('2026-01-31T09:00:00', 'from')).toBe('2026-01-31T09:00:00.000Z');
    expect(parseInstant('2026-01-31', 'from')).toBe('2026-01-31T00:00:00.000Z');
    expect(parseInstant('2026-01-31', 'to')).toBe('2026-01-31T23:59:59.999Z');
    // Finer than a millisecond: rounded inward (stored times have whole milliseconds).
    expect(parseInstant('2026-01-31T09:00:00.123456789Z', 'from')).toBe('2026-01-31T09:00:00.124Z');
    expect(parseInstant('2026-01-31T09:00:00.123456789Z', 'to')).toBe('2026-01-31T09:00:00.123Z');
    expect(parseInstant('2026-01-31T09:00:00.123000Z', 'from')).toBe('2026-01-31T09:00:00.123Z');
  });

  it('refuses what is not an instant', () => {
    for (const s of ['', 'yesterday', '2026-13-01', '2026-02-30', '2026-01-31T24:00:00Z', '2026-01-31T09:60:00Z', '2026-01-31T09:00:00+25:00', 'Jan 31 2026', '1769850000', '2026-1-31', '2026-01-31T09:00:00ZZ', '10000-01-01']) {
      expect(parseInstant(s, 'from'), s).toBeUndefined();
    }
  });

  it('agrees with Date.parse on every full RFC 3339 instant', () => {
    fc.assert(
      fc.property(fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true }), fc.integer({ min: -14 * 60, max: 14 * 60 }), (d, off) => {
        const local = new Date(d.getTime() + off * 60_000).toISOString().slice(0, 23);
        const sign = off < 0 ? '-' : '+';
        const abs = Math.abs(off);
        const text = `${local}${sign}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
        expect(parseInstant(text, 'from')).toBe(new Date(Date.parse(text)).toISOString());
        expect(parseInstant(text, 'to')).toBe(d.toISOString());
      }),
    );
  });
});

describe('pagination', () => {
  it('counts pages and says where the neighbours are', () => {
    expect(pagination(1, 20, 0)).toEqual({ page: 1, page_size: 20, total: 0, total_pages: 0, has_next: false, has_prev: false });
    expect(pagination(1, 20, 20)).toEqual({ page: 1, page_size: 20, total: 20, total_pages: 1, has_next: false, has_prev: false });
    expect(pagination(1, 20, 21)).toEqual({ page: 1, page_size: 20, total: 21, total_pages: 2, has_next: true, has_prev: false });
    expect(pagination(2, 20, 21)).toEqual({ page: 2, page_size: 20, total: 21, total_pages: 2, has_next: false, has_prev: true });
    expect(pagination(9, 20, 21)).toEqual({ page: 9, page_size: 20, total: 21, total_pages: 2, has_next: false, has_prev: true });
  });
});
