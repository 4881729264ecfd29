/**
 * The call counters (`call_counts`) as they should be, counted from the calls themselves: what the
 * counting triggers of migration 3 keep, as one query both dialects run. A test compares a
 * database's non-zero counters with it.
 */
export const CALL_COUNTS_RECOUNT = `SELECT org_id, 'all' AS dim, '' AS val, count(*) AS n FROM calls GROUP BY org_id
  UNION ALL SELECT org_id, 'status', status, count(*) FROM calls GROUP BY org_id, status
  UNION ALL SELECT org_id, 'source', source, count(*) FROM calls GROUP BY org_id, source
  UNION ALL SELECT org_id, 'outbound', CAST(outbound AS TEXT), count(*) FROM calls GROUP BY org_id, outbound
  UNION ALL SELECT org_id, 'outcome', coalesce(outcome, ''), count(*) FROM calls GROUP BY org_id, coalesce(outcome, '')
  UNION ALL SELECT org_id, 'agent', coalesce(agent_id, ''), count(*) FROM calls GROUP BY org_id, coalesce(agent_id, '')`;
