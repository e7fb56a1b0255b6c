/**
 * A self-contained SVG (no scripts, fonts or external assets): the partner's utilization over
 * time (permits in use / cap, per bucket) while demand moves between the two halves of the
 * fleet, one line per mode, the shifts as dashed verticals.
 */
export interface UtilizationSeries {
  label: string;
  color: string;
  /** [seconds since the shifting phase began, utilization 0..1] */
  points: [number, number][];
}

const W = 900;
const H = 360;
const LEFT = 60;
const TOP = 60;
const PW = 800;
const PH = 230;

export function utilizationChart(
  title: string,
  series: readonly UtilizationSeries[],
  shifts: readonly number[],
  seconds: number,
): string {
  const px = (t: number) => LEFT + (t / seconds) * PW;
  const py = (u: number) => TOP + PH - Math.min(1.05, Math.max(0, u)) * (PH / 1.05);
  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="${LEFT}" y="24" font-size="15" font-weight="bold">${esc(title)}</text>`,
  );
  for (const u of [0, 0.25, 0.5, 0.75, 0.9, 1]) {
    const y = py(u).toFixed(1);
    parts.push(
      `<line x1="${LEFT}" x2="${LEFT + PW}" y1="${y}" y2="${y}" stroke="${u === 0.9 ? '#c33' : '#ddd'}"${u === 0.9 ? ' stroke-dasharray="4 3"' : ''}/>`,
      `<text x="${LEFT - 8}" y="${y}" text-anchor="end" dominant-baseline="middle">${Math.round(u * 100)}%</text>`,
    );
  }
  for (const t of shifts) {
    const x = px(t).toFixed(1);
    parts.push(
      `<line x1="${x}" x2="${x}" y1="${TOP}" y2="${TOP + PH}" stroke="#888" stroke-dasharray="2 4"/>`,
    );
  }
  for (let t = 0; t <= seconds; t += 5) {
    parts.push(
      `<text x="${px(t).toFixed(1)}" y="${TOP + PH + 18}" text-anchor="middle">${t} s</text>`,
    );
  }
  parts.push(
    `<text x="${LEFT + PW / 2}" y="${TOP + PH + 38}" text-anchor="middle">time; demand moves to the other half of the processes at each dashed line (90% target in red)</text>`,
  );
  series.forEach((s, i) => {
    const d = s.points
      .map(([t, u], j) => `${j === 0 ? 'M' : 'L'}${px(t).toFixed(1)},${py(u).toFixed(1)}`)
      .join(' ');
    parts.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="1.8"/>`);
    const lx = LEFT + 10 + i * 270;
    parts.push(
      `<line x1="${lx}" x2="${lx + 24}" y1="42" y2="42" stroke="${s.color}" stroke-width="3"/>`,
      `<text x="${lx + 30}" y="46">${esc(s.label)}</text>`,
    );
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}

function esc(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}
