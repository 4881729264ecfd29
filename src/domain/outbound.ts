/**
 * Outbound lists and runs (docs/outbound.md): the settings of a run, the states of its contacts,
 * the outcome of one attempt and what follows from it. Pure functions, no I/O.
 */
import { validation } from './errors.ts';
import type { CallRecord } from './call.ts';
import { CsvError, parse } from 'csv-parse/sync';

/** Most contacts one request may add (POST /v1/outbound-lists, POST .../contacts). */
export const MAX_CONTACTS_PER_REQUEST = 10_000;
/** Most variables one contact may carry (as a dial's variables). */
export const MAX_CONTACT_VARIABLES = 100;

export const RUN_STATUSES = ['scheduled', 'running', 'paused', 'completed', 'canceled'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

/**
 * A contact of a run: pending (due at next_attempt_at), dialing (claimed by a node, the dial not
 * yet placed), calling (placed, its call not ended), then completed (answered), failed (out of
 * attempts, or an outcome the run does not retry) or canceled (the run was canceled first).
 */
export const CONTACT_STATES = ['pending', 'dialing', 'calling', 'completed', 'failed', 'canceled'] as const;
export type ContactState = (typeof CONTACT_STATES)[number];

/** The outcome of one attempt, read from its call record's end. */
export const ATTEMPT_OUTCOMES = ['completed', 'busy', 'no_answer', 'failed', 'machine'] as const;
export type AttemptOutcome = (typeof ATTEMPT_OUTCOMES)[number];
export const RETRYABLE_OUTCOMES = ['busy', 'no_answer', 'failed', 'machine'] as const;
export type RetryableOutcome = (typeof RETRYABLE_OUTCOMES)[number];

export const WEEKDAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'] as const;
export type Weekday = (typeof WEEKDAYS)[number];

export interface RunWindow {
  timezone: string;
  days: Weekday[];
  /** "HH:MM", local time of `timezone`. */
  start: string;
  end: string;
}

export interface RunSettings {
  max_concurrent: number;
  calls_per_minute?: number;
  retry: { max_attempts: number; backoff_secs: number; on: RetryableOutcome[] };
  window?: RunWindow;
  machine_detection?: { mode: 'off' | 'hangup' | 'leave_message'; message?: string };
}

/** A contact's variables: the same list of { key, value } a dial takes. */
export type ContactVariables = Array<{ key: string; value: string }>;

const HHMM = /^([01][0-9]|2[0-3]):([0-5][0-9])$/;
const minutesOf = (hhmm: string): number => {
  const m = HHMM.exec(hhmm);
  return m ? Number(m[1]) * 60 + Number(m[2]) : NaN;
};

/** Whether the Intl API knows `zone` as a time zone (an IANA name such as Europe/Berlin). */
export function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

/** @throws validation naming the field when the window cannot be used. */
export function checkWindow(w: RunWindow): void {
  if (!isTimeZone(w.timezone)) throw validation(`body.window.timezone: "${w.timezone}" is not an IANA time zone`);
  for (const d of w.days) if (!(WEEKDAYS as readonly string[]).includes(d)) throw validation(`body.window.days: "${d}" is not one of ${WEEKDAYS.join(', ')}`);
  if (w.days.length === 0) throw validation('body.window.days must name at least one day');
  if (!HHMM.test(w.start)) throw validation('body.window.start must be "HH:MM" (24-hour)');
  if (!HHMM.test(w.end)) throw validation('body.window.end must be "HH:MM" (24-hour)');
  if (w.start === w.end) throw validation('body.window.start and end must differ');
}

/**
 * Whether `at` falls inside the window, in the window's time zone. start < end: that span of each
 * listed day. start > end: a window across midnight, which belongs to the day it starts on (a
 * "fri 22:00-02:00" window includes Saturday 01:00).
 */
export function inWindow(w: RunWindow, at: Date): boolean {
  const parts = new Intl.DateTimeFormat('en-US', { timeZone: w.timezone, weekday: 'short', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).formatToParts(at);
  const part = (type: string) => parts.find((p) => p.type === type)?.value ?? '';
  const day = WEEKDAYS.indexOf(part('weekday').toLowerCase() as Weekday);
  const now = Number(part('hour')) * 60 + Number(part('minute'));
  const start = minutesOf(w.start);
  const end = minutesOf(w.end);
  const listed = (d: number) => w.days.includes(WEEKDAYS[(d + 7) % 7]!);
  if (start < end) return listed(day) && now >= start && now < end;
  return (listed(day) && now >= start) || (listed(day - 1) && now < end);
}

/**
 * Of a run's contact time zones (null: a contact without one, which follows the window's own
 * zone), those where the window is open at `at`: its days, start and end read in each zone.
 */
export function openZones(w: RunWindow, zones: ReadonlyArray<string | null>, at: Date): Array<string | null> {
  return zones.filter((z) => inWindow(z === null ? w : { ...w, timezone: z }, at));
}

/** The end reason of a call answering-machine detection hung up on (src/agent/runtime/machine-detection.ts). */
export const MACHINE_HANGUP_REASON = 'machine_detected';

/**
 * The outcome of an attempt from its ended call record: answered (it has started_at: a person or
 * a machine picked up and the call was bridged) is completed unless answering-machine detection
 * hung up on a machine (termination_reason machine_detected, docs/machine-detection.md); a
 * message left on a machine (voicemail_left) is completed: the run's message was delivered.
 * Otherwise the record's end_status.
 */
export function attemptOutcome(r: Pick<CallRecord, 'status' | 'end_status' | 'started_at'> & { termination_reason?: string | null }): AttemptOutcome {
  const end = r.end_status as string | null;
  if (r.termination_reason === MACHINE_HANGUP_REASON) return 'machine';
  if (end === 'completed' || r.started_at !== null) return 'completed';
  if (end === 'busy' || end === 'no_answer') return end;
  return 'failed';
}

/** What follows an attempt: done (completed or given up) or another attempt after the backoff. */
export function nextAfter(outcome: AttemptOutcome, attempts: number, settings: RunSettings, runStatus: RunStatus): { state: 'completed' | 'failed' | 'canceled' } | { state: 'pending'; delayMs: number } {
  if (outcome === 'completed') return { state: 'completed' };
  if (runStatus === 'canceled') return { state: 'canceled' };
  const retry = settings.retry;
  if ((retry.on as readonly string[]).includes(outcome) && attempts < retry.max_attempts) return { state: 'pending', delayMs: retry.backoff_secs * 1000 };
  return { state: 'failed' };
}

/**
 * The contacts of a text/csv body: a header row naming `phone_number`, optionally `timezone` (the
 * contact's IANA time zone; an empty field: none) and one column per variable, then one row per
 * contact (RFC 4180: fields may be quoted, "" inside quotes is one ").
 * @throws validation naming the row for a malformed body.
 */
export function parseContactsCsv(text: string): Array<{ phone_number: string; variables: ContactVariables; timezone?: string }> {
  const rows = parseCsv(text.replace(/^\uFEFF/, ''));
  const header = rows.shift();
  if (header === undefined) throw validation('body: the CSV has no header row');
  const phoneAt = header.findIndex((h) => h.trim() === 'phone_number');
  if (phoneAt < 0) throw validation('body: the CSV header must name a phone_number column');
  const names = header.map((h) => h.trim());
  const zoneAt = names.indexOf('timezone');
  if (new Set(names).size !== names.length) throw validation('body: the CSV header names a column twice');
  return rows
    .filter((r) => !(r.length === 1 && r[0]!.trim() === ''))
    .map((r, i) => {
      if (r.length !== header.length) throw validation(`body: CSV row ${i + 2} has ${r.length} fields, the header ${header.length}`);
      const variables = names.flatMap((key, j) => (j === phoneAt || j === zoneAt || key === '' ? [] : [{ key, value: r[j]! }]));
      const timezone = zoneAt < 0 ? '' : r[zoneAt]!.trim();
      return { phone_number: r[phoneAt]!.trim(), variables, ...(timezone !== '' ? { timezone } : {}) };
    });
}

/** RFC 4180 rows through csv-parse; a body it cannot read is a validation error naming where. */
function parseCsv(text: string): string[][] {
  try {
    // Row lengths are checked by the caller (naming the row); a stray quote inside an unquoted
    // field is kept as text, as spreadsheets write it.
    return parse(text, { record_delimiter: ['\r\n', '\n', '\r'], relax_column_count: true, relax_quotes: true }) as string[][];
  } catch (err) {
    if (err instanceof CsvError && err.code === 'CSV_QUOTE_NOT_CLOSED') throw validation('body: the CSV ends inside a quoted field');
    throw validation(`body: the CSV cannot be read: ${(err as Error).message}`);
  }
}
