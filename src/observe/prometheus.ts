/**
 * `hostgate/prometheus`: the per-partner metrics in a prom-client registry. prom-client is an
 * optional peer dependency, imported only here: users who never import this path need not
 * install it.
 *
 * @packageDocumentation
 * @module hostgate/prometheus
 */

import { Counter, Gauge, register as globalRegistry, type Registry } from 'prom-client';
import type { Semaphore } from '../gate/semaphore.js';
import {
  BREAKER_STATE_VALUES,
  type BucketCounts,
  HOLD_BUCKETS_SECONDS,
  MetricsCollector,
  type MetricsCollectorOptions,
  type PartnerMetrics,
  type PriorityClassMetrics,
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
/** A histogram's series of a row: [its priority_class, or none, and its buckets]. */
type Pick = (r: PartnerMetrics) => [string | undefined, BucketCounts][];

/** The label that names a priority class, on the series a partner with classes splits. */
export const CLASS_LABEL = 'priority_class';

/**
 * Registers hostgate's per-partner metrics (label `partner`: the partner name, always; an
 * origin key for the `maxOriginLabels` unknown origins with the most traffic, the others
 * `(other origins)`; see origin-labels.ts). Values are read
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
 * | `hostgate_shared_block`             | gauge     | leased shared gates: this process's block    |
 * | `hostgate_shared_demand`            | gauge     | leased shared gates: this process's demand   |
 * | `hostgate_acquired_total`           | counter   | permits granted                              |
 * | `hostgate_released_total`           | counter   | permits returned (any way)                   |
 * | `hostgate_shed_total{reason}`       | counter   | `queue_full`, `queue_timeout`, `deadline`,   |
 * |                                     |           | `store_unavailable`, `partner_hold`,         |
 * |                                     |           | `breaker_open`, `rate_limited` (`shed*`)     |
 * | `hostgate_partner_hold_seconds`     | gauge     | left of the partner's own hold (headers)     |
 * | `hostgate_breaker_state`            | gauge     | 0 closed, 1 half-open, 2 open                |
 * | `hostgate_breaker_opened_total`     | counter   | times the partner's breaker opened           |
 * | `hostgate_aborted_total{stage}`     | counter   | `waiting`, `in_flight` (client disconnects)  |
 * | `hostgate_hold_timeouts_total`      | counter   | permits taken back after `maxHold`           |
 * | `hostgate_double_releases_total`    | counter   | `release()` of a released permit             |
 * | `hostgate_retries_total`            | counter   | retries (only with `retrier`)                |
 * | `hostgate_queue_wait_seconds`       | histogram | time from asking to grant                    |
 * | `hostgate_permit_hold_seconds`      | histogram | time from grant to release                   |
 *
 * A partner with priority classes splits `hostgate_queued`, `hostgate_acquired_total`,
 * `hostgate_shed_total{reason=queue_full|queue_timeout}`, `hostgate_aborted_total{stage=waiting}`
 * and `hostgate_queue_wait_seconds` by a `priority_class` label (one series per class; they
 * add up to the partner's total).
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

  /** `byClass`: a partner with priority classes gets one series per class instead. */
  const gauge = (
    name: string,
    help: string,
    value: (r: PartnerMetrics) => number | undefined,
    byClass?: (c: PriorityClassMetrics) => number,
  ) => {
    names.push(prefix + name);
    new Gauge({
      name: prefix + name,
      help,
      labelNames: byClass === undefined ? ['partner'] : ['partner', CLASS_LABEL],
      registers,
      collect() {
        this.reset();
        for (const r of rows()) {
          if (!live(r)) continue;
          if (byClass !== undefined && r.priorities !== null) {
            for (const [c, m] of Object.entries(r.priorities)) {
              this.set({ partner: r.partner, [CLASS_LABEL]: c }, byClass(m));
            }
            continue;
          }
          const v = value(r);
          if (v !== undefined) this.set({ partner: r.partner }, v);
        }
      },
    });
  };
  /** Values: [the `extra` label's value, count, and for a class-split count its class]. */
  const counter = (
    name: string,
    help: string,
    extra: string | undefined,
    values: (r: PartnerMetrics) => [string | undefined, number, string?][],
    split = false,
  ) => {
    names.push(prefix + name);
    const labelNames = extra === undefined ? ['partner'] : ['partner', extra];
    new Counter({
      name: prefix + name,
      help,
      labelNames: split ? [...labelNames, CLASS_LABEL] : labelNames,
      registers,
      collect() {
        this.reset();
        for (const r of rows()) {
          for (const [labelValue, value, priorityClass] of values(r)) {
            const labels: Record<string, string> = { partner: r.partner };
            if (extra !== undefined && labelValue !== undefined) labels[extra] = labelValue;
            if (priorityClass !== undefined) labels[CLASS_LABEL] = priorityClass;
            this.inc(labels, value);
          }
        }
      },
    });
  };
  /** A class-split count: one value per class of a partner with classes, else the total. */
  const perClass = (
    r: PartnerMetrics,
    labelValue: string | undefined,
    total: number,
    pick: (c: PriorityClassMetrics) => number,
  ): [string | undefined, number, string?][] =>
    r.priorities === null
      ? [[labelValue, total]]
      : Object.entries(r.priorities).map(([c, m]) => [labelValue, pick(m), c]);

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
  gauge(
    'queued',
    'Callers waiting for a permit now (per priority_class for a partner with classes).',
    (r) => r.queued,
    (c) => c.queued,
  );
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
  gauge(
    'shared_block',
    "Leased shared gates: this process's block of the cap (permits it may hold now).",
    (r) => r.shared?.block ?? undefined,
  );
  gauge(
    'shared_demand',
    "Leased shared gates: this process's demand (held + queued, smoothed) as last sent to Redis.",
    (r) => r.shared?.demand ?? undefined,
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
  counter(
    'acquired_total',
    'Permits granted (per priority_class for a partner with classes).',
    undefined,
    (r) => perClass(r, undefined, r.acquired, (c) => c.acquired),
    true,
  );
  counter('released_total', 'Permits returned, however they came back.', undefined, (r) => [
    [undefined, r.released],
  ]);
  counter(
    'shed_total',
    'Callers refused without being served, by reason (queue_full and queue_timeout per priority_class for a partner with classes).',
    'reason',
    (r) => [
      ...perClass(r, 'queue_full', r.shedQueueFull, (c) => c.shedQueueFull),
      ...perClass(r, 'queue_timeout', r.shedQueueTimeout, (c) => c.shedQueueTimeout),
      ['deadline', r.shedDeadline],
      ['store_unavailable', r.shedStoreUnavailable],
      ['partner_hold', r.shedPartnerHold],
      ['breaker_open', r.shedBreakerOpen],
      ['rate_limited', r.shedRateLimited],
    ],
    true,
  );
  // docs/contracts.md: the partner's own hold and its breaker, for rules that have them.
  gauge(
    'partner_hold_seconds',
    "Seconds left of the partner's own hold (rate-limit headers, Retry-After): no call goes before.",
    (r) => (r.partnerHoldMs === null ? undefined : r.partnerHoldMs / 1000),
  );
  gauge(
    'breaker_state',
    "The partner's breaker: 0 closed, 1 half-open (probes), 2 open (every call shed).",
    (r) => (r.breaker === null ? undefined : BREAKER_STATE_VALUES[r.breaker.state]),
  );
  counter('breaker_opened_total', "Times the partner's breaker opened.", undefined, (r) =>
    r.breaker === null ? [] : [[undefined, r.breaker.opened]],
  );
  counter(
    'aborted_total',
    'Requests aborted by their caller (client disconnect): while waiting (per priority_class for a partner with classes), or in flight.',
    'stage',
    (r) => [
      ...perClass(r, 'waiting', r.abortedWaiting, (c) => c.abortedWaiting),
      ['in_flight', r.abortedInFlight],
    ],
    true,
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
      'Time from asking for a permit to its grant (0 for an immediate grant); per priority_class for a partner with classes.',
      WAIT_BUCKETS_SECONDS,
      (r) =>
        r.priorities === null
          ? [[undefined, r.wait]]
          : Object.entries(r.priorities).map(([c, m]) => [c, m.wait]),
      rows,
    ),
    new CollectedHistogram(
      `${prefix}permit_hold_seconds`,
      'Time a permit was held: from dispatch until the response ended.',
      HOLD_BUCKETS_SECONDS,
      (r) => [[undefined, r.hold]],
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
  readonly #pick: Pick;
  readonly #rows: Rows;

  constructor(name: string, help: string, bounds: readonly number[], pick: Pick, rows: Rows) {
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
      for (const [priorityClass, h] of this.#pick(r)) {
        const labels: Record<string, string> = { partner: r.partner };
        if (priorityClass !== undefined) labels[CLASS_LABEL] = priorityClass;
        this.#bounds.forEach((le, i) => {
          values.push({ labels: { ...labels, le }, value: h.buckets[i]!, metricName: bucket });
        });
        values.push({ labels: { ...labels, le: '+Inf' }, value: h.count, metricName: bucket });
        values.push({ labels, value: h.sumSeconds, metricName: `${this.name}_sum` });
        values.push({ labels, value: h.count, metricName: `${this.name}_count` });
      }
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
