import type { IncomingMessage, ServerResponse } from 'node:http';
import { checkKnownKeys, checkObject, describe, positiveInteger } from '../src/common/options.js';
import {
  type GateSource,
  type LeakSuspect,
  leakSuspects,
  MetricsCollector,
  type MetricsCollectorOptions,
  type PartnerMetrics,
  type Semaphore,
} from '../src/index.js';

export interface StatusOptions extends MetricsCollectorOptions {
  /** Page title (default `hostgate`). */
  title?: string;
  /** Seconds between the HTML page's reloads (default 5; each reload is a read). */
  refreshSeconds?: number;
}

/** One partner in the JSON body: {@link PartnerMetrics} without the raw buckets, plus its marks. */
export interface PartnerStatus extends Omit<PartnerMetrics, 'wait' | 'hold'> {
  /** Grants so far and their mean wait, ms. */
  wait: { count: number; meanMs: number };
  hold: { count: number; meanMs: number };
  /** `leak` (a suspect exists), `stalled` (the leak signature), or `ok`. */
  state: 'leak' | 'stalled' | 'ok';
}

/** A leak suspect in the JSON body. */
export type LeakStatus = LeakSuspect;

export interface StatusBody {
  generatedAt: string;
  partners: PartnerStatus[];
  leaks: LeakStatus[];
}

export interface StatusHandler {
  (req: IncomingMessage, res: ServerResponse): void;
  /** The collector behind the page: its rate window is this handler's own reads. */
  readonly collector: MetricsCollector;
  /** What the handler would serve as JSON now. */
  body(): StatusBody;
}

const STATUS_KEYS = [
  'title',
  'refreshSeconds',
  'maxOriginLabels',
  'stallAfter',
  'retrier',
  'now',
] as const;

/**
 * A status page for a limiter: JSON for `Accept: application/json` (or `?format=json`), else
 * a self-contained HTML page (no scripts, no external assets) with one row per partner — a
 * bar of held/limit, queue depth, shed rate, p99 wait — and a red mark where a permit is a
 * leak suspect or the gate sits exhausted while its requests make no progress.
 * Mount it where only operators reach it: it names partners, paths and code locations.
 *
 * @example
 * app.get('/internal/hostgate', statusHandler(limiter));
 */
export function statusHandler(
  limiter: GateSource | Semaphore,
  options: StatusOptions = {},
): StatusHandler {
  checkObject('statusHandler options', options);
  checkKnownKeys('statusHandler', options, STATUS_KEYS);
  const { title = 'hostgate', refreshSeconds = 5, ...collectorOptions } = options;
  if (typeof title !== 'string') {
    throw new TypeError(`statusHandler: title must be a string, got ${describe(title)}`);
  }
  positiveInteger('refreshSeconds', refreshSeconds);
  const collector = new MetricsCollector(limiter, collectorOptions);
  const source: GateSource | Semaphore = limiter;

  const body = (): StatusBody => {
    const rows = collector.collect();
    const leaks = leakSuspects(source);
    return {
      generatedAt: new Date().toISOString(),
      partners: rows.map(toStatus),
      leaks,
    };
  };

  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const status = body();
    res.setHeader('cache-control', 'no-store');
    res.setHeader('vary', 'accept');
    if (wantsJson(req)) {
      res.setHeader('content-type', 'application/json; charset=utf-8');
      res.end(JSON.stringify(status));
      return;
    }
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.setHeader('content-security-policy', "default-src 'none'; style-src 'unsafe-inline'");
    res.end(renderHtml(status, title, refreshSeconds));
  };
  return Object.assign(handler, { collector, body });
}

function toStatus(row: PartnerMetrics): PartnerStatus {
  const { wait, hold, ...rest } = row;
  const mean = (h: PartnerMetrics['wait']) => (h.count === 0 ? 0 : (h.sumSeconds * 1000) / h.count);
  return {
    ...rest,
    wait: { count: wait.count, meanMs: mean(wait) },
    hold: { count: hold.count, meanMs: mean(hold) },
    state: row.leakSuspects > 0 ? 'leak' : row.stalled ? 'stalled' : 'ok',
  };
}

/** JSON when asked for with a higher q than HTML, or with `?format=json`. */
function wantsJson(req: IncomingMessage): boolean {
  if (/[?&]format=json(?:&|$)/.test(req.url ?? '')) return true;
  const accept = req.headers.accept;
  if (accept === undefined) return false;
  let json = 0;
  let html = 0;
  for (const part of accept.split(',')) {
    const [type = '', ...params] = part.trim().toLowerCase().split(';');
    const qParam = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const q = qParam === undefined ? 1 : Number(qParam.slice(2)) || 0;
    if (type === 'application/json') json = Math.max(json, q);
    else if (type === 'text/html') html = Math.max(html, q);
  }
  return json > html;
}

const ESCAPES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

function ms(value: number | null): string {
  if (value === null) return '–';
  if (value >= 1000) return `${(value / 1000).toFixed(value >= 10_000 ? 0 : 1)} s`;
  if (value >= 10) return `${Math.round(value)} ms`;
  return `${value.toFixed(value >= 1 ? 1 : 2)} ms`;
}

function renderRow(p: PartnerStatus): string {
  const used = p.limit === 0 ? 0 : Math.min(100, (p.held / p.limit) * 100);
  const level = used >= 100 ? 'full' : used >= 70 ? 'high' : 'low';
  const mark =
    p.state === 'leak'
      ? `<span class="mark bad">● leak suspect${p.leakSuspects > 1 ? `s (${p.leakSuspects})` : ''}</span>`
      : p.state === 'stalled'
        ? `<span class="mark bad">● stalled: no permit free, no progress for ${ms(p.quietMs)}</span>`
        : '<span class="mark good">● ok</span>';
  const gone = p.gates === 0 ? ' <span class="dim">(no live gate)</span>' : '';
  // docs/contracts.md: the partner's breaker and its own hold, beside the gate's state.
  const breaker =
    p.breaker === null || p.breaker.state === 'closed'
      ? ''
      : ` <span class="mark bad">● breaker ${p.breaker.state}</span>`;
  const held =
    p.partnerHoldMs !== null && p.partnerHoldMs > 0
      ? ` <span class="dim">held by the partner: ${ms(p.partnerHoldMs)} left</span>`
      : '';
  return `<tr data-partner="${escapeHtml(p.partner)}" data-state="${p.state}">
<th scope="row">${escapeHtml(p.partner)}${gone}</th>
<td><div class="bar ${level}" role="meter" aria-valuemin="0" aria-valuemax="${p.limit}" aria-valuenow="${p.held}"><div class="fill" style="width:${used.toFixed(1)}%"></div><span>${p.held} / ${p.limit}</span></div>${p.adaptive ? `<span class="dim">adaptive: limit ${p.limit} of contract ${p.contractLimit}</span>` : ''}${p.shared === null ? '' : `<span class="dim">all replicas: ${p.shared.held} / ${p.contractLimit} held, ${p.shared.queued} queued, ${p.shared.processes} processes${p.shared.storeUp ? '' : ' — <b>Redis unreachable</b>'}</span>`}</td>
<td class="num">${p.queued}<span class="dim"> / ${p.maxQueue}</span></td>
<td class="num">${p.shedPerSecond.toFixed(p.shedPerSecond >= 10 ? 0 : 2)}<span class="dim"> (${p.shedQueueFull + p.shedQueueTimeout + p.shedDeadline + p.shedStoreUnavailable + p.shedPartnerHold + p.shedBreakerOpen + p.shedRateLimited} total)</span></td>
<td class="num">${ms(p.waitP99Ms)}</td>
<td>${mark}${breaker}${held}</td>
</tr>`;
}

function renderLeak(l: LeakStatus): string {
  const target = `${l.method ?? '?'} ${l.origin ?? ''}${l.path ?? ''}`;
  const where = l.acquiredFrom === undefined ? '' : `<pre>${escapeHtml(l.acquiredFrom)}</pre>`;
  return `<li data-partner="${escapeHtml(l.partner)}"><b>${escapeHtml(l.partner)}</b> — <code>${escapeHtml(target)}</code>, held ${ms(l.heldMs)} (warns after ${ms(l.leakWarnAfterMs)})${where}</li>`;
}

function renderHtml(status: StatusBody, title: string, refreshSeconds: number): string {
  const rows = status.partners.map(renderRow).join('\n');
  const leaks =
    status.leaks.length === 0
      ? ''
      : `<h2>Leak suspects</h2>\n<ul class="leaks">${status.leaks.map(renderLeak).join('\n')}</ul>`;
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="${refreshSeconds}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)} — partner gates</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1b1f24;background:#fff}
h1{font-size:1.25rem;margin:0 0 .25rem}h2{font-size:1rem;margin:1.5rem 0 .5rem}
.dim{color:#6b7280}table{border-collapse:collapse;min-width:48rem}
th,td{padding:.4rem .6rem;border-bottom:1px solid #e5e7eb;text-align:left;vertical-align:middle}
thead th{font-weight:600;color:#374151;background:#f9fafb}.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{position:relative;width:14rem;height:1.2rem;background:#eef2f7;border-radius:3px;overflow:hidden}
.fill{height:100%}.low .fill{background:#4ade80}.high .fill{background:#fbbf24}.full .fill{background:#f87171}
.bar span{position:absolute;inset:0;text-align:center;font-size:12px;line-height:1.2rem;font-variant-numeric:tabular-nums}
.mark{font-weight:600;white-space:nowrap}.bad{color:#dc2626}.good{color:#16a34a}
tr[data-state="leak"],tr[data-state="stalled"]{background:#fef2f2}
pre{margin:.25rem 0 .5rem;padding:.4rem;background:#f3f4f6;font-size:12px;overflow:auto}
</style>
</head>
<body>
<h1>${escapeHtml(title)} — partner gates</h1>
<p class="dim">${escapeHtml(status.generatedAt)} · reloads every ${refreshSeconds} s · rates over the last ${Math.round(status.partners[0]?.windowSeconds ?? 0)} s · <a href="?format=json">JSON</a></p>
<table>
<thead><tr><th>partner</th><th>held / limit</th><th class="num">queued</th><th class="num">shed/s</th><th class="num">p99 wait</th><th>state</th></tr></thead>
<tbody>
${rows}
</tbody>
</table>
${leaks}
</body>
</html>
`;
}
