/**
 * Markdown tables and number formatting for the overload report. (bench/lib has similar
 * helpers for the Semaphore benchmark; this file keeps the overload benchmark self-contained.)
 */

export type Align = 'left' | 'right';

/** A GitHub-flavoured Markdown table with padded columns, readable as plain text too. */
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

/** A byte count: `412 B`, `3.1 KiB`, `12.4 MiB`. */
export function formatBytes(bytes: number | undefined): string {
  if (bytes === undefined || !Number.isFinite(bytes)) return 'n/a';
  if (Math.abs(bytes) >= 1024 * 1024) return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
  if (Math.abs(bytes) >= 10 * 1024) return `${(bytes / 1024).toFixed(0)} KiB`;
  if (Math.abs(bytes) >= 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${bytes.toFixed(0)} B`;
}

/** A duration in ms, with precision that suits its size. */
export function formatMs(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return 'n/a';
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms >= 100) return `${ms.toFixed(0)} ms`;
  if (ms >= 10) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(2)} ms`;
}
