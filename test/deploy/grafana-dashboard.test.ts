/**
 * deploy/grafana/callbridge.json queries only metrics the daemon exports. A real daemon (REST,
 * SIP, the bridge's metrics, as `npm start` wires them) is started and its /metrics read; every
 * PromQL expression of the dashboard (panel targets, also inside rows, and the template
 * variables' `label_values(...)` queries) is parsed for metric names, and each must be a metric
 * family in that text. Histogram series (`_bucket`, `_sum`, `_count`) count as their histogram.
 * A function name PromQL does not have fails too. A dashboard with no panel querying the call,
 * quality and REST metrics it is for fails as well.
 *
 * The parser is deliberately small: it removes string literals, template variables (`$x`,
 * `${x}`), label matchers (`{...}`), range and subquery selectors (`[...]`), `offset` and `@`
 * modifiers, grouping clauses (`by (...)`, `on (...)`...) and numbers, then reads what remains: a name followed by `(` is a
 * function, a PromQL keyword is skipped, anything else is a metric name. The second test feeds it
 * a made-up metric and function to show that it catches them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startTestDaemon, type TestDaemon } from '../helpers/daemon.ts';

const DASHBOARD = resolve(dirname(fileURLToPath(import.meta.url)), '../../deploy/grafana/callbridge.json');

/** PromQL functions and aggregation operators (https://prometheus.io/docs/prometheus/latest/querying/functions/). */
const FUNCTIONS = new Set([
  // aggregation operators
  'sum', 'min', 'max', 'avg', 'group', 'stddev', 'stdvar', 'count', 'count_values', 'bottomk', 'topk', 'quantile', 'limitk', 'limit_ratio',
  // functions
  'abs', 'absent', 'absent_over_time', 'ceil', 'changes', 'clamp', 'clamp_max', 'clamp_min', 'day_of_month', 'day_of_week', 'day_of_year',
  'days_in_month', 'delta', 'deriv', 'exp', 'floor', 'histogram_avg', 'histogram_count', 'histogram_fraction', 'histogram_quantile',
  'histogram_stddev', 'histogram_stdvar', 'histogram_sum', 'holt_winters', 'double_exponential_smoothing', 'hour', 'idelta', 'increase',
  'irate', 'label_join', 'label_replace', 'ln', 'log2', 'log10', 'minute', 'month', 'predict_linear', 'rate', 'resets', 'round',
  'scalar', 'sgn', 'sort', 'sort_desc', 'sort_by_label', 'sort_by_label_desc', 'sqrt', 'time', 'timestamp', 'vector', 'year',
  'avg_over_time', 'min_over_time', 'max_over_time', 'sum_over_time', 'count_over_time', 'quantile_over_time', 'stddev_over_time',
  'stdvar_over_time', 'last_over_time', 'present_over_time', 'mad_over_time',
  'acos', 'acosh', 'asin', 'asinh', 'atan', 'atanh', 'cos', 'cosh', 'sin', 'sinh', 'tan', 'tanh', 'deg', 'rad', 'pi',
]);
/** Binary operators and modifiers written as words, and the number literals. */
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'atan2', 'inf', 'nan']);

/** The metric names an expression selects, and the function names it calls that PromQL does not have. */
function parsePromql(expr: string): { metrics: Set<string>; unknownFunctions: Set<string> } {
  const s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, ' ')
    .replace(/\$\{[^}]*\}|\$\w+/g, ' ')
    .replace(/\{[^{}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\boffset\s+-?[0-9a-z]+|@\s*(?:start\(\)|end\(\)|[\d.]+)/gi, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/gi, ' ')
    .replace(/(^|[^\w:.])\d+(\.\d+)?([eE][+-]?\d+)?(?![\w:])/g, '$1 ')
    .replace(/(^|[^\w:.])\.\d+(?![\w:])/g, '$1 ');
  const metrics = new Set<string>();
  const unknownFunctions = new Set<string>();
  for (const m of s.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const name = m[0];
    const after = s.slice(m.index + name.length).trimStart();
    if (after.startsWith('(')) {
      if (!FUNCTIONS.has(name)) unknownFunctions.add(name);
    } else if (!KEYWORDS.has(name.toLowerCase())) {
      metrics.add(name);
    }
  }
  return { metrics, unknownFunctions };
}

interface Query {
  where: string;
  expr: string;
}

/** Every PromQL query of a dashboard: panel targets (rows' nested panels too) and template variables. */
function dashboardQueries(dashboard: any): Query[] {
  const out: Query[] = [];
  const visit = (panels: any[] | undefined): void => {
    for (const p of panels ?? []) {
      for (const t of p.targets ?? []) {
        if (typeof t.expr === 'string') out.push({ where: `panel "${p.title}" ${t.refId ?? ''}`.trim(), expr: t.expr });
      }
      visit(p.panels);
    }
  };
  visit(dashboard.panels);
  for (const v of dashboard.templating?.list ?? []) {
    if (v.type !== 'query') continue;
    const texts = [v.definition, typeof v.query === 'string' ? v.query : v.query?.query].filter((x): x is string => typeof x === 'string' && x !== '');
    for (const text of texts) {
      // Grafana's variable functions: label_values(selector, label) and query_result(expr) hold
      // PromQL; label_values(label) and label_names() name no metric.
      const inner = /^\s*label_values\(\s*(.+?)\s*,\s*[\w.]+\s*\)\s*$/.exec(text)?.[1] ?? /^\s*query_result\((.*)\)\s*$/.exec(text)?.[1];
      if (inner !== undefined) out.push({ where: `variable $${v.name}`, expr: inner });
      else if (!/^\s*(label_values\(\s*[\w.]+\s*\)|label_names\(\s*\))\s*$/.test(text)) out.push({ where: `variable $${v.name}`, expr: text });
    }
  }
  return out;
}

/** Metric families of a Prometheus text exposition, by name, with their type. */
function exposedFamilies(text: string): Map<string, string> {
  const families = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) families.set(m[1]!, m[2]!);
  return families;
}

/** The metric family a series name belongs to (histogram and summary series to their family), or undefined. */
function familyOf(name: string, families: Map<string, string>): string | undefined {
  if (families.has(name)) return name;
  const m = /^(.*)_(bucket|sum|count)$/.exec(name);
  if (m) {
    const type = families.get(m[1]!);
    if (type === 'histogram' || (type === 'summary' && m[2] !== 'bucket')) return m[1];
  }
  return undefined;
}

/** What a dashboard queries that the exposition does not have, one line per problem. */
function problems(dashboard: any, families: Map<string, string>): { problems: string[]; queried: Set<string> } {
  const out: string[] = [];
  const queried = new Set<string>();
  for (const q of dashboardQueries(dashboard)) {
    const { metrics, unknownFunctions } = parsePromql(q.expr);
    if (metrics.size === 0) out.push(`${q.where}: no metric in ${q.expr}`);
    for (const f of unknownFunctions) out.push(`${q.where}: ${f}() is not a PromQL function`);
    for (const name of metrics) {
      const family = familyOf(name, families);
      if (family === undefined) out.push(`${q.where}: ${name} is not on /metrics`);
      else queried.add(family);
    }
  }
  return { problems: out, queried };
}

describe('deploy/grafana/callbridge.json against the daemon\'s /metrics', () => {
  let d: TestDaemon;
  let families: Map<string, string>;
  const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8'));

  beforeAll(async () => {
    d = await startTestDaemon();
    const res = await fetch(`${d.url}/metrics`);
    expect(res.status).toBe(200);
    families = exposedFamilies(await res.text());
  });
  afterAll(async () => {
    await d?.close();
  });

  it('every metric a panel or variable queries is exported, and every function exists', () => {
    expect(families.size).toBeGreaterThan(20);
    const queries = dashboardQueries(dashboard);
    expect(queries.length).toBeGreaterThan(20);
    const { problems: found, queried } = problems(dashboard, families);
    expect(found).toEqual([]);
    // What the dashboard is for: calls, setups, failures by reason/outcome, jitter, loss, late
    // frames, TTS first byte, where agent turns' time goes, REST latency.
    for (const family of [
      'callbridge_bridge_calls_active',
      'callbridge_sip_calls_active',
      'callbridge_bridge_call_setups_total',
      'callbridge_bridge_call_failures_total',
      'callbridge_sip_call_outcomes_total',
      'callbridge_bridge_jitter_buffer_depth_ms',
      'callbridge_bridge_packet_loss_ratio',
      'callbridge_bridge_frames_late_total',
      'callbridge_bridge_frames_sent_total',
      'callbridge_tts_first_byte_seconds',
      'callbridge_turn_stage_seconds',
      'callbridge_turn_voice_to_voice_seconds',
      'callbridge_http_request_duration_seconds',
    ]) {
      expect(queried, `no panel queries ${family}`).toContain(family);
    }
  });

  it('the check fails for a made-up metric, a misspelt function and a missing histogram, also inside a collapsed row', () => {
    const broken = {
      panels: [
        {
          type: 'row',
          title: 'collapsed',
          collapsed: true,
          panels: [
            { type: 'timeseries', title: 'made up', targets: [{ refId: 'A', expr: 'sum by (reason) (rate(callbridge_calls_made_up_total{instance=~"$instance"}[$__rate_interval]))' }] },
            { type: 'timeseries', title: 'misspelt', targets: [{ refId: 'A', expr: 'histogram_quantil(0.99, sum by (le) (rate(callbridge_http_request_duration_seconds_bucket[5m])))' }] },
            { type: 'timeseries', title: 'not a histogram', targets: [{ refId: 'A', expr: 'rate(callbridge_bridge_frames_sent_total_bucket[5m]) / 1e3' }] },
          ],
        },
      ],
    };
    expect(problems(broken, families).problems).toEqual([
      'panel "made up" A: callbridge_calls_made_up_total is not on /metrics',
      'panel "misspelt" A: histogram_quantil() is not a PromQL function',
      'panel "not a histogram" A: callbridge_bridge_frames_sent_total_bucket is not on /metrics',
    ]);
  });

  it('the parser reads metric names, not labels, functions, keywords, numbers or template variables', () => {
    expect([...parsePromql('histogram_quantile(0.95, sum by (le, route) (rate(a_bucket{route!="/x", instance=~"$instance"}[$__rate_interval]))) > bool 1.5e-3').metrics]).toEqual(['a_bucket']);
    expect([...parsePromql('sum(rate(x_total[5m] offset 1h)) / on (instance) group_left sum(y) or vector(0)').metrics].sort()).toEqual(['x_total', 'y']);
    expect([...parsePromql('count(up{job="callbridge"} == 0) unless ${metric_var}').metrics]).toEqual(['up']);
  });
});
