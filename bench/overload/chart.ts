/**
 * A self-contained SVG (no scripts, fonts or external assets): goodput, mean call latency and
 * end-to-end p99 against permits, one line per limiter, the seed's values dashed.
 */
import type { ContenderKind } from './driver.js';
import { SEED_ROWS, type Summary, shortLabel } from './report.js';

interface Series {
  label: string;
  color: string;
  dashed?: boolean;
  points: { x: number; y: number }[];
}

const COLORS: Record<ContenderKind, string> = {
  hostgate: '#1b6ac9',
  'hostgate-bounded': '#0a8a4a',
  'p-limit': '#d9731a',
  undici: '#8e44ad',
};

const W = 1140;
const H = 410;
const PANEL_W = 300;
const PANEL_H = 250;
const TOP = 76;
const LEFT = 60;
const GAP = 80;

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function fmt(y: number): string {
  if (y >= 1000) return `${(y / 1000).toFixed(y % 1000 === 0 ? 0 : 1)}k`;
  return String(Math.round(y * 100) / 100);
}

function panel(
  index: number,
  title: string,
  unit: string,
  series: Series[],
  xs: number[],
  yScale: 'linear' | 'log',
): string {
  const x0 = LEFT + index * (PANEL_W + GAP);
  const y0 = TOP;
  // One column per row of the table (the seed's permit counts are not evenly spread on any
  // scale: on a log axis 350, 500 and 600 would collide).
  const px = (x: number) => x0 + (xs.indexOf(x) / Math.max(1, xs.length - 1)) * PANEL_W;
  const ys = series.flatMap((s) => s.points.map((p) => p.y)).filter((y) => Number.isFinite(y));
  let ticks: number[];
  let py: (y: number) => number;
  if (yScale === 'log') {
    const lo = 10 ** Math.floor(Math.log10(Math.max(1, Math.min(...ys.filter((y) => y > 0)))));
    const hi = 10 ** Math.ceil(Math.log10(Math.max(...ys, 10)));
    ticks = [];
    for (let t = lo; t <= hi; t *= 10) ticks.push(t);
    py = (y: number) =>
      y0 +
      PANEL_H -
      ((Math.log10(Math.max(lo, y)) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) *
        PANEL_H;
  } else {
    const raw = Math.max(...ys, 1) * 1.05;
    // A "nice" step (1, 2, 2.5 or 5 × 10^k) giving at most 6 intervals.
    const pow = 10 ** Math.floor(Math.log10(raw / 6));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((st) => raw / st <= 6)!;
    ticks = [];
    for (let t = 0; t < raw + step - 1e-9; t += step) ticks.push(t);
    const top = ticks[ticks.length - 1]!;
    py = (y: number) => y0 + PANEL_H - (y / top) * PANEL_H;
  }
  const out: string[] = [];
  out.push(
    `<text x="${x0}" y="${y0 - 12}" class="t">${esc(title)} <tspan class="u">(${esc(unit)})</tspan></text>`,
  );
  out.push(
    `<rect x="${x0}" y="${y0}" width="${PANEL_W}" height="${PANEL_H}" fill="none" stroke="#999"/>`,
  );
  for (const t of ticks) {
    const y = py(t);
    out.push(`<line x1="${x0}" x2="${x0 + PANEL_W}" y1="${y}" y2="${y}" stroke="#eee"/>`);
    out.push(`<text x="${x0 - 6}" y="${y + 4}" class="a" text-anchor="end">${fmt(t)}</text>`);
  }
  for (const x of xs) {
    const X = px(x);
    out.push(`<line x1="${X}" x2="${X}" y1="${y0}" y2="${y0 + PANEL_H}" stroke="#f2f2f2"/>`);
    out.push(`<text x="${X}" y="${y0 + PANEL_H + 16}" class="a" text-anchor="middle">${x}</text>`);
  }
  out.push(
    `<text x="${x0 + PANEL_W / 2}" y="${y0 + PANEL_H + 34}" class="a" text-anchor="middle">permits (one column per row of the table)</text>`,
  );
  for (const s of series) {
    const pts = s.points.filter((p) => Number.isFinite(p.y));
    if (pts.length === 0) continue;
    const d = pts.map((p, i) => `${i ? 'L' : 'M'}${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`);
    out.push(
      `<path d="${d.join(' ')}" fill="none" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="5 4"' : ''}/>`,
    );
    for (const p of pts) {
      out.push(
        `<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="3" fill="${s.dashed ? '#fff' : s.color}" stroke="${s.color}"/>`,
      );
    }
  }
  return out.join('\n');
}

export function renderChart(
  summaries: readonly Summary[],
  kinds: readonly ContenderKind[],
  subtitle: string,
): string {
  const xs = [...new Set(summaries.map((s) => s.permits))].sort((a, b) => a - b);
  const seedXs = SEED_ROWS.filter((r) => xs.includes(r.permits));
  const series = (pick: (s: Summary) => number, only = kinds): Series[] =>
    only.map((kind) => ({
      label: shortLabel(kind),
      color: COLORS[kind],
      points: summaries
        .filter((s) => s.kind === kind)
        .sort((a, b) => a.permits - b.permits)
        .map((s) => ({ x: s.permits, y: pick(s) })),
    }));
  const seed = (pick: (r: (typeof SEED_ROWS)[number]) => number): Series => ({
    label: 'seed',
    color: '#555',
    dashed: true,
    points: seedXs.map((r) => ({ x: r.permits, y: pick(r) })),
  });
  const legend = [
    { label: 'seed table', color: '#555', dashed: true },
    ...kinds.map((k) => ({ label: shortLabel(k), color: COLORS[k], dashed: false })),
  ]
    .map((item, i) => {
      const x = LEFT + i * 210;
      const y = H - 14;
      return `<line x1="${x}" x2="${x + 26}" y1="${y - 4}" y2="${y - 4}" stroke="${item.color}" stroke-width="2"${item.dashed ? ' stroke-dasharray="5 4"' : ''}/><text x="${x + 32}" y="${y}" class="a">${esc(item.label)}</text>`;
    })
    .join('\n');
  // The seed's table is about unbounded waiting; the bounded gate appears where it differs.
  const unbounded = kinds.filter((k) => k !== 'hostgate-bounded');
  const body = [
    panel(
      0,
      'Goodput',
      'successful calls/s',
      [seed((r) => r.goodput), ...series((s) => s.goodput, unbounded)],
      xs,
      'linear',
    ),
    panel(
      1,
      'Mean call latency',
      'ms, from dispatch',
      [seed((r) => r.meanMs), ...series((s) => s.callMean, unbounded)],
      xs,
      'linear',
    ),
    panel(
      2,
      'End-to-end p99',
      'ms, wait + call; log',
      series((s) => s.e2eP99),
      xs,
      'log',
    ),
  ].join('\n');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" role="img" aria-label="Overload benchmark: goodput and latency against permits">
<style>text{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;fill:#222}.t{font-size:14px;font-weight:600}.u{font-weight:400;fill:#666}.a{font-size:11px;fill:#444}.h{font-size:16px;font-weight:700}.s{font-size:11px;fill:#666}</style>
<rect width="100%" height="100%" fill="#fff"/>
<text x="${LEFT}" y="22" class="h">10,000 tasks, N permits: a partner that serves 40 at a time, 40 ms each, 500 ms call timeout</text>
<text x="${LEFT}" y="40" class="s">${esc(subtitle)}</text>
${body}
${legend}
</svg>
`;
}
