/** Small, dependency-free statistics and number formatting for the benchmarks. */

/** Median of the finite values; `undefined` when there are none. */
export function median(values: readonly number[]): number | undefined {
  const xs = values.filter(Number.isFinite).sort((a, b) => a - b);
  if (xs.length === 0) return undefined;
  const mid = xs.length >> 1;
  return xs.length % 2 === 1 ? xs[mid]! : (xs[mid - 1]! + xs[mid]!) / 2;
}

/** Spread of the runs as (max - min) / median, to show how noisy a median is. */
export function relativeSpread(values: readonly number[]): number | undefined {
  const xs = values.filter(Number.isFinite);
  const m = median(xs);
  if (m === undefined || m === 0) return undefined;
  return (Math.max(...xs) - Math.min(...xs)) / Math.abs(m);
}

export function summarize(values: readonly number[]): {
  median: number | undefined;
  min: number | undefined;
  max: number | undefined;
  spread: number | undefined;
  runs: number[];
} {
  const xs = values.filter(Number.isFinite);
  return {
    median: median(xs),
    min: xs.length ? Math.min(...xs) : undefined,
    max: xs.length ? Math.max(...xs) : undefined,
    spread: relativeSpread(xs),
    runs: [...xs],
  };
}

const NA = 'n/a';

/** Operations per second, e.g. `412 k/s`, `1.23 M/s`. */
export function formatOps(opsPerSec: number | undefined): string {
  if (opsPerSec === undefined || !Number.isFinite(opsPerSec)) return NA;
  if (opsPerSec >= 1e6) return `${(opsPerSec / 1e6).toFixed(2)} M/s`;
  if (opsPerSec >= 1e4) return `${(opsPerSec / 1e3).toFixed(0)} k/s`;
  if (opsPerSec >= 1e3) return `${(opsPerSec / 1e3).toFixed(1)} k/s`;
  return `${opsPerSec.toFixed(0)} /s`;
}

/** A byte count, e.g. `412 B`, `3.1 KiB`. */
export function formatBytes(bytes: number | undefined): string {
  if (bytes === undefined || !Number.isFinite(bytes)) return NA;
  if (Math.abs(bytes) >= 1024 * 1024) return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
  if (Math.abs(bytes) >= 10 * 1024) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${bytes.toFixed(0)} B`;
}

/** A duration in ms, with precision that suits its size. */
export function formatMs(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return NA;
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`;
  if (ms >= 100) return `${ms.toFixed(0)} ms`;
  if (ms >= 10) return `${ms.toFixed(1)} ms`;
  return `${ms.toFixed(2)} ms`;
}

/** A ratio such as `1.00×`; `n/a` when either side is missing. */
export function formatRatio(ratio: number | undefined): string {
  if (ratio === undefined || !Number.isFinite(ratio)) return NA;
  if (ratio >= 100) return `${ratio.toFixed(0)}×`;
  if (ratio > 0 && ratio < 0.01) return `${ratio.toPrecision(2)}×`;
  return `${ratio.toFixed(2)}×`;
}

export function ratio(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0) {
    return undefined;
  }
  return a / b;
}
