/**
 * `hostgate/prometheus`: the per-partner metrics in a prom-client registry. prom-client is an
 * optional peer dependency, imported only here: users who never import this path need not
 * install it.
 */

import { Counter, Gauge, register as globalRegistry, type Registry } from 'prom-client';
import type { Semaphore } from '../semaphore.js';
import {
  type BucketCounts,
  HOLD_BUCKETS_SECONDS,
  MetricsCollector,
  type MetricsCollectorOptions,
  type PartnerMetrics,
  WAIT_BUCKETS_SECONDS,
} from './collector.js';
import type { GateSource } from './leaks.js';

export interface RegisterMetricsOptions extends MetricsCollectorOptions {
  /** Where to register (default prom-client's global `register`). */
  registry?: Registry;
  /** Metric name prefix (default `hostgate_`). */
  prefix?: string;
}

export interface RegisteredMetrics {
  /** The collector behind the metrics (its `collect()` gives the same numbers as rows). */
  readonly collector: MetricsCollector;
  /** The registered metric names. */
  readonly names: readonly string[];
  /** Removes every metric this call registered from the registry. */
  unregister(): void;
}

type Rows = () => PartnerMetrics[];

/**
 * Registers hostgate's per-partner metrics (label `partner`: the partner name, an origin key
 * for the first `maxOriginLabels` unknown origins, then `(other origins)`). Values are read
 * from the gates when the registry is scraped — once per scrape for all metrics — and at no
 * other time: no timer, no cost on the request path.
 *
 * | metric                              | type      | what                                         |
 * | ----------------------------------- | --------- | -------------------------------------------- |
 * | `hostgate_permits_limit`            | gauge     | the cap in force (adaptive: effective limit) |
 * | `hostgate_permits_contract_limit`   | gauge     | the partner's contract (the adaptive ceiling)|
 * | `hostgate_permits_held`             | gauge     | permits held now                             |
 * | `hostgate_permits_available`        | gauge     | `limit - held`: at 0 while idle = a leak     |
 * | `hostgate_queued`                   | gauge     | callers waiting for a permit                 |
 * | `hostgate_leak_suspects`            | gauge     | permits held past `leakWarnAfter`            |
 * | `hostgate_stalled`                  | gauge     | 1: exhausted, no response bytes for a while  |
 * | `hostgate_limit_changes_total`      | counter   | changes of an adaptive effective limit       |
 * | `hostgate_shared_permits_held`      | gauge     | shared gates: held by every replica          |
 * | `hostgate_shared_queued`            | gauge     | shared gates: waiting in Redis, all replicas |
 * | `hostgate_shared_processes`         | gauge     | shared gates: live processes                 |
 * | `hostgate_shared_store_up`          | gauge     | shared gates: 1 while Redis answers          |
 * | `hostgate_shared_leases_lost_total` | counter   | shared gates: leases Redis lost under us     |
 * | `hostgate_acquired_total`           | counter   | permits granted                              |
 * | `hostgate_released_total`           | counter   | permits returned (any way)                   |
 * | `hostgate_shed_total{reason}`       | counter   | `queue_full`, `queue_timeout`, `deadline`,   |
 * |                                     |           | `store_unavailable` (the `shed*` stats)      |
 * | `hostgate_aborted_total{stage}`     | counter   | `waiting`, `in_flight` (client disconnects)  |
 * | `hostgate_hold_timeouts_total`      | counter   | permits taken back after `maxHold`           |
 * | `hostgate_double_releases_total`    | counter   | `release()` of a released permit             |
 * | `hostgate_retries_total`            | counter   | retries (only with `retrier`)                |
 * | `hostgate_queue_wait_seconds`       | histogram | time from asking to grant                    |
 * | `hostgate_permit_hold_seconds`      | histogram | time from grant to release                   |
 *
 * @example
 * import { register } from 'prom-client';
 * import { registerMetrics } from 'hostgate/prometheus';
 * registerMetrics(limiter, { registry: register, retrier });
 * app.get('/metrics', async (_req, res) => {
 *   res.type(register.contentType).send(await register.metrics());
 * });
 */
export function registerMetrics(
  limiter: GateSource | Semaphore,
  options: RegisterMetricsOptions = {},
): RegisteredMetrics {
  const { registry = globalRegistry, prefix = 'hostgate_', ...collectorOptions } = options;
  if (typeof prefix !== 'string' || !/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(prefix)) {
    throw new TypeError(`prefix must be a valid metric name prefix, got ${JSON.stringify(prefix)}`);
  }
  const collector = new MetricsCollector(limiter, collectorOptions);
  // One read per scrape: the registry calls every metric's collect() in one synchronous pass.
  let cached: PartnerMetrics[] | undefined;
  const rows: Rows = () => {
    if (cached === undefined) {
      cached = collector.collect();
      queueMicrotask(() => {
        cached = undefined;
      });
    }
    return cached;
  };
  const registers = [registry];
  const names: string[] = [];
  const live = (r: PartnerMetrics) => r.gates > 0;

  const gauge = (name: string, help: string, value: (r: PartnerMetrics) => number | undefined) => {
    names.push(prefix + name);
    new Gauge({
      name: prefix + name,
      help,
      labelNames: ['partner'],
      registers,
      collect() {
        this.reset();
        for (const r of rows()) {
          const v = live(r) ? value(r) : undefined;
          if (v !== undefined) this.set({ partner: r.partner }, v);
        }
      },
    });
  };
  const counter = (
    name: string,
    help: string,
    extra: string | undefined,
    values: (r: PartnerMetrics) => [string | undefined, number][],
  ) => {
    names.push(prefix + name);
    new Counter({
      name: prefix + name,
      help,
      labelNames: extra === undefined ? ['partner'] : ['partner', extra],
      registers,
      collect() {
        this.reset();
        for (const r of rows()) {
          for (const [labelValue, value] of values(r)) {
            const labels: Record<string, string> = { partner: r.partner };
            if (extra !== undefined && labelValue !== undefined) labels[extra] = labelValue;
            this.inc(labels, value);
          }
        }
      },
    });
  };

  gauge(
    'permits_limit',
    "Concurrency cap in force (permits): an adaptive partner's effective limit.",
    (r) => r.limit,
  );
  gauge(
    'permits_contract_limit',
    "The partner's contract limit: the ceiling of an adaptive limit (= permits_limit if fixed).",
    (r) => r.contractLimit,
  );
  gauge('permits_held', 'Permits held now: requests in flight to the partner.', (r) => r.held);
  gauge(
    'permits_available',
    'Permits free now (limit - held). Zero while the partner is idle names a leak.',
    (r) => r.available,
  );
  gauge('queued', 'Callers waiting for a permit now.', (r) => r.queued);
  gauge('leak_suspects', 'Permits held past leakWarnAfter now.', (r) => r.leakSuspects);
  gauge(
    'stalled',
    '1 when no permit is free and the holders got no response bytes for stallAfter.',
    (r) => (r.stalled ? 1 : 0),
  );
  // Shared gates (hostgate/redis) only: the whole cluster, beside this process's numbers above.
  gauge(
    'shared_permits_held',
    'Shared gates: permits held by every replica together (as of the last Redis answer).',
    (r) => r.shared?.held,
  );
  gauge(
    'shared_queued',
    'Shared gates: callers of every replica waiting in Redis.',
    (r) => r.shared?.queued,
  );
  gauge(
    'shared_processes',
    'Shared gates: processes that used the gate within a lease.',
    (r) => r.shared?.processes,
  );
  gauge(
    'shared_store_up',
    "Shared gates: 1 while Redis answers, 0 while the store's onStoreError policy is in force.",
    (r) => (r.shared === null ? undefined : r.shared.storeUp ? 1 : 0),
  );
  counter(
    'shared_leases_lost_total',
    'Shared gates: leases Redis lost while this process held them (stalls, a Redis restart).',
    undefined,
    (r) => (r.shared === null ? [] : [[undefined, r.shared.leasesLost]]),
  );
  counter('limit_changes_total', 'Changes of an adaptive effective limit.', undefined, (r) => [
    [undefined, r.limitChanges],
  ]);
  counter('acquired_total', 'Permits granted.', undefined, (r) => [[undefined, r.acquired]]);
  counter('released_total', 'Permits returned, however they came back.', undefined, (r) => [
    [undefined, r.released],
  ]);
  counter('shed_total', 'Callers refused without being served, by reason.', 'reason', (r) => [
    ['queue_full', r.shedQueueFull],
    ['queue_timeout', r.shedQueueTimeout],
    ['deadline', r.shedDeadline],
    ['store_unavailable', r.shedStoreUnavailable],
  ]);
  counter(
    'aborted_total',
    'Requests aborted by their caller (client disconnect): while waiting, or in flight.',
    'stage',
    (r) => [
      ['waiting', r.abortedWaiting],
      ['in_flight', r.abortedInFlight],
    ],
  );
  counter('hold_timeouts_total', 'Permits taken back after maxHold.', undefined, (r) => [
    [undefined, r.holdTimeouts],
  ]);
  counter(
    'double_releases_total',
    'release() calls on an already released permit (counted, never an extra permit).',
    undefined,
    (r) => [[undefined, r.doubleReleases]],
  );
  if (collectorOptions.retrier !== undefined) {
    counter('retries_total', 'Retry attempts sent (each took its own permit).', undefined, (r) => [
      [undefined, r.retries],
    ]);
  }
  for (const histogram of [
    new CollectedHistogram(
      `${prefix}queue_wait_seconds`,
      'Time from asking for a permit to its grant (0 for an immediate grant).',
      WAIT_BUCKETS_SECONDS,
      (r) => r.wait,
      rows,
    ),
    new CollectedHistogram(
      `${prefix}permit_hold_seconds`,
      'Time a permit was held: from dispatch until the response ended.',
      HOLD_BUCKETS_SECONDS,
      (r) => r.hold,
      rows,
    ),
  ]) {
    names.push(histogram.name);
    // prom-client's Histogram cannot be given bucket counts; the registry needs only get().
    registry.registerMetric(histogram as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  return {
    collector,
    names,
    unregister() {
      for (const name of names) registry.removeSingleMetric(name);
    },
  };
}

interface MetricValue {
  labels: Record<string, string | number>;
  value: number;
  metricName: string;
}

/** A histogram whose buckets come from the gates' own histograms at scrape time. */
class CollectedHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  readonly name: string;
  readonly help: string;
  readonly #bounds: readonly number[];
  readonly #pick: (r: PartnerMetrics) => BucketCounts;
  readonly #rows: Rows;

  constructor(
    name: string,
    help: string,
    bounds: readonly number[],
    pick: (r: PartnerMetrics) => BucketCounts,
    rows: Rows,
  ) {
    this.name = name;
    this.help = help;
    this.#bounds = bounds;
    this.#pick = pick;
    this.#rows = rows;
  }

  get(): Promise<{
    name: string;
    help: string;
    type: string;
    values: MetricValue[];
    aggregator: string;
  }> {
    const values: MetricValue[] = [];
    const bucket = `${this.name}_bucket`;
    for (const r of this.#rows()) {
      const partner = r.partner;
      const h = this.#pick(r);
      this.#bounds.forEach((le, i) => {
        values.push({ labels: { partner, le }, value: h.buckets[i]!, metricName: bucket });
      });
      values.push({ labels: { partner, le: '+Inf' }, value: h.count, metricName: bucket });
      values.push({ labels: { partner }, value: h.sumSeconds, metricName: `${this.name}_sum` });
      values.push({ labels: { partner }, value: h.count, metricName: `${this.name}_count` });
    }
    return Promise.resolve({
      name: this.name,
      help: this.help,
      type: this.type,
      values,
      aggregator: this.aggregator,
    });
  }

  /** Values come from the gates; there is nothing of ours to reset. */
  reset(): void {}
}
