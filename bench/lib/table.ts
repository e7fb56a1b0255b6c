/** Markdown tables for benchmark reports. */

export type Align = 'left' | 'right';

/** Renders a GitHub-flavoured Markdown table with padded columns (readable as plain text too). */
export function markdownTable(
  headers: readonly string[],
  rows: readonly (readonly string[])[],
  align: readonly Align[] = [],
): string {
  const escapeCell = (cell: string) => cell.replace(/\|/g, '\\|');
  const all = [headers, ...rows].map((row) => headers.map((_, i) => escapeCell(row[i] ?? '')));
  const widths = headers.map((_, i) => Math.max(3, ...all.map((row) => row[i]!.length)));
  const pad = (cell: string, i: number) =>
    align[i] === 'right' ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!);
  const line = (row: readonly string[]) => `| ${row.map(pad).join(' | ')} |`;
  const rule = `| ${widths
    .map((w, i) => (align[i] === 'right' ? `${'-'.repeat(w - 1)}:` : '-'.repeat(w)))
    .join(' | ')} |`;
  const [head, ...body] = all;
  return [line(head!), rule, ...body.map(line)].join('\n');
}
