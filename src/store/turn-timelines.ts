/**
 * The agent turns' timelines of each call (migration 18; docs/latency.md): one row per turn,
 * appended once the turn's timeline is complete, read back by GET /v1/calls/{id} (`latency`).
 *
 * A table rather than a JSON column on calls: each turn is one INSERT that touches no other row,
 * where a column would be a read-modify-write of a growing document per turn, contending with
 * the call's own updates (end, analysis). The rows carry the call's organization (copied from
 * the call by the INSERT itself) so every read is scoped by organization like the call's, and
 * they go with the call (ON DELETE CASCADE).
 */
import type { TurnMark, TurnTimeline } from '../domain/turn-latency.ts';
import { TURN_MARKS } from '../domain/turn-latency.ts';
import type { SqlClient } from './sql-client.ts';

/** Migration 18's SQL, the same text in both dialects (DOUBLE PRECISION: epoch ms with its fraction). */
export const CALL_TURN_TIMELINES_SQL = `
      CREATE TABLE call_turn_timelines (
        call_id TEXT NOT NULL REFERENCES calls(id) ON DELETE CASCADE,
        org_id TEXT NOT NULL,
        turn_index INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        marks TEXT NOT NULL,              -- JSON object: mark name -> epoch ms
        barge_in_at DOUBLE PRECISION,     -- epoch ms the caller cut the turn; null: not cut
        PRIMARY KEY (call_id, turn_index)
      );
    `;

interface Row {
  turn_index: number;
  turn_id: string;
  kind: string;
  marks: string;
  barge_in_at: number | null;
}

export class TurnTimelineRepo {
  constructor(private readonly db: SqlClient) {}

  /**
   * Appends complete timelines, all in one transaction. A turn already stored (same call and
   * index) is kept; a call that is gone stores nothing.
   */
  async add(entries: ReadonlyArray<{ callId: string; turn: TurnTimeline }>): Promise<void> {
    if (entries.length === 0) return;
    await this.db.transaction(async (tx) => {
      for (const { callId, turn } of entries) {
        await tx.run(
          `INSERT INTO call_turn_timelines (call_id, org_id, turn_index, turn_id, kind, marks, barge_in_at)
           SELECT c.id, c.org_id, ?, ?, ?, ?, ? FROM calls c WHERE c.id = ?
           ON CONFLICT (call_id, turn_index) DO NOTHING`,
          [turn.index, turn.turnId, turn.kind, JSON.stringify(knownMarks(turn.marks)), turn.bargeInAt ?? null, callId],
        );
      }
    });
  }

  /** The call's turns in order; [] for a call of another organization. */
  async list(orgId: string, callId: string): Promise<TurnTimeline[]> {
    const rows = await this.db.all<Row>(
      'SELECT turn_index, turn_id, kind, marks, barge_in_at FROM call_turn_timelines WHERE call_id = ? AND org_id = ? ORDER BY turn_index',
      [callId, orgId],
    );
    return rows.map((r) => ({
      index: Number(r.turn_index),
      turnId: r.turn_id,
      kind: r.kind,
      marks: knownMarks(JSON.parse(r.marks) as Record<string, unknown>),
      ...(r.barge_in_at !== null ? { bargeInAt: Number(r.barge_in_at) } : {}),
    }));
  }
}

/** Only the marks the domain knows, each a finite number. */
function knownMarks(marks: Partial<Record<string, unknown>>): Partial<Record<TurnMark, number>> {
  const out: Partial<Record<TurnMark, number>> = {};
  for (const m of TURN_MARKS) {
    const v = marks[m];
    if (typeof v === 'number' && Number.isFinite(v)) out[m] = v;
  }
  return out;
}
