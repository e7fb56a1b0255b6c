/** Reads Prometheus text exposition (what `registry.metrics()` returns) for assertions. */

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

export function parseMetrics(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (match === null) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? '').matchAll(/([a-zA-Z_]\w*)="((?:[^"\\]|\\.)*)"/g)) {
      labels[key!] = value!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
    }
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

/** The one sample of `name` whose labels are exactly `labels`; undefined when absent. */
export function metricValue(
  text: string,
  name: string,
  labels: Record<string, string>,
): number | undefined {
  const wanted = JSON.stringify(Object.entries(labels).sort());
  const found = parseMetrics(text).filter(
    (s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === wanted,
  );
  if (found.length > 1) throw new Error(`${name} ${wanted} appears ${found.length} times`);
  return found[0]?.value;
}

/** Every value `label` takes across all samples (all metrics). */
export function labelValues(text: string, label: string): Set<string> {
  const values = new Set<string>();
  for (const s of parseMetrics(text))
    if (s.labels[label] !== undefined) values.add(s.labels[label]!);
  return values;
}
