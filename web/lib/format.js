/** Formatting shared by the console's pages; every result is plain text (rendered escaped). */

/** 'h:mm:ss' or 'm:ss' for a number of seconds. */
export function duration(seconds) {
  if (seconds === undefined || seconds === null || !Number.isFinite(seconds)) return '';
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const ss = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
}

/** Seconds since an ISO instant, now. */
export function secondsSince(iso, now = Date.now()) {
  return iso ? (now - Date.parse(iso)) / 1000 : undefined;
}

/** A local date and time for an ISO instant. */
export function dateTime(iso) {
  return iso ? new Date(iso).toLocaleString() : '';
}

export function percent(ratio) {
  return `${(ratio * 100).toFixed(ratio > 0 && ratio < 0.001 ? 2 : 1)} %`;
}

/** The agents and trunks of the organization by id, for names in tables (loaded once per page). */
export async function loadNames(api) {
  const [agents, trunks] = await Promise.all([api('/v1/agents?limit=100').catch(() => []), api('/v1/sip-trunks?limit=100').catch(() => [])]);
  return {
    agents: new Map(agents.map((a) => [a.id, a.name ?? a.id])),
    trunks: new Map(trunks.map((t) => [t.id, t.name ?? t.outbound_host ?? t.id])),
  };
}
