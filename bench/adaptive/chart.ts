/**
 * A self-contained SVG (no scripts, fonts or external assets): two panels over time — the
 * effective limit, and goodput per 250 ms — one line per limiter, the partner's capacity dashed.
 */
export interface TimeSeries {
  label: string;
  color: string;
  dashed?: boolean;
  points: { x: number; y: number }[];
}

const W = 1000;
const H = 380;
const PANEL_W = 420;
const PANEL_H = 250;
const TOP = 60;
const LEFT = 60;
const GAP = 90;

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

function panel(index: number, title: string, yMax: number, xMax: number, series: TimeSeries[]) {
  const x0 = LEFT + index * (PANEL_W + GAP);
  const sx = (x: number) => x0 + (x / xMax) * PANEL_W;
  const sy = (y: number) => TOP + PANEL_H - (Math.min(y, yMax) / yMax) * PANEL_H;
  const out: string[] = [
    `<text x="${x0}" y="${TOP - 12}" font-size="14" font-weight="600">${esc(title)}</text>`,
    `<rect x="${x0}" y="${TOP}" width="${PANEL_W}" height="${PANEL_H}" fill="none" stroke="#ccc"/>`,
  ];
  for (let i = 0; i <= 4; i++) {
    const y = (yMax * i) / 4;
    out.push(
      `<line x1="${x0}" x2="${x0 + PANEL_W}" y1="${sy(y)}" y2="${sy(y)}" stroke="#eee"/>`,
      `<text x="${x0 - 6}" y="${sy(y) + 4}" font-size="11" text-anchor="end">${Math.round(y)}</text>`,
    );
  }
  for (let s = 0; s <= xMax / 1000; s += Math.ceil(xMax / 1000 / 8)) {
    out.push(
      `<text x="${sx(s * 1000)}" y="${TOP + PANEL_H + 16}" font-size="11" text-anchor="middle">${s} s</text>`,
    );
  }
  for (const s of series) {
    const d = s.points.map((p, i) => `${i ? 'L' : 'M'}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`);
    out.push(
      `<path d="${d.join('')}" fill="none" stroke="${s.color}" stroke-width="${s.dashed ? 1.5 : 1.8}"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>`,
    );
  }
  return out.join('\n');
}

export function renderTimeChart(
  title: string,
  xMax: number,
  limits: TimeSeries[],
  limitMax: number,
  goodput: TimeSeries[],
  goodputMax: number,
): string {
  const legend = [...limits.filter((s) => !s.dashed), ...limits.filter((s) => s.dashed)]
    .map((s, i) => {
      const x = LEFT + (i % 6) * 160;
      const y = H - 30 + Math.floor(i / 6) * 16;
      return `<line x1="${x}" x2="${x + 22}" y1="${y - 4}" y2="${y - 4}" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/><text x="${x + 28}" y="${y}" font-size="12">${esc(s.label)}</text>`;
    })
    .join('\n');
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif">
<rect width="100%" height="100%" fill="#fff"/>
<text x="${LEFT}" y="24" font-size="16" font-weight="600">${esc(title)}</text>
${panel(0, 'Effective limit (permits)', limitMax, xMax, limits)}
${panel(1, 'Goodput (calls/s, 250 ms buckets)', goodputMax, xMax, goodput)}
${legend}
</svg>
`;
}
