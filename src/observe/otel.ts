/**
 * `hostgate/otel`: the per-partner metrics through the OpenTelemetry metrics API.
 * `@opentelemetry/api` is an optional peer dependency, imported only here.
 *
 * There is no OpenTelemetry semantic convention for client-side concurrency limiting yet
 * (open-telemetry/semantic-conventions#3361). Names, units and attributes follow the stable
 * ASP.NET Core rate-limiting metrics (`aspnetcore.rate_limiting.active_request_leases`,
 * `.request_lease.duration`, `.request.time_in_queue`, `.queued_requests`, `.requests` with a
 * `result` attribute), with `hostgate.` for `aspnetcore.rate_limiting.` and a partner for a
 * policy; the other instruments carry what hostgate/prometheus carries.
 *
 * @packageDocumentation
 * @module hostgate/otel
 */

import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import {
  type Attributes,
  type BatchObservableResult,
  type Histogram,
  type Meter,
  metrics,
  type Observable,
} from '@opentelemetry/api';
import type { AcquireMessage, ReleaseMessage } from '../gate/diagnostics.js';
import type { Semaphore } from '../gate/semaphore.js';
import {
  BREAKER_STATE_VALUES,
  HOLD_BUCKETS_SECONDS,
  MetricsCollector,
  type MetricsCollectorOptions,
  type PartnerMetrics,
  type PriorityClassMetrics,
  type SharedPartnerMetrics,
  WAIT_BUCKETS_SECONDS,
} from './collector.js';
import type { GateSource } from './leaks.js';

export interface RegisterOtelMetricsOptions extends MetricsCollectorOptions {
  /** The meter to create instruments on (default `metrics.getMeter('hostgate')`). */
  meter?: Meter;
  /** Instrument name prefix, without the dot (default `hostgate`). */
  prefix?: string;
}

export interface RegisteredOtelMetrics {
  /** The collector behind the observable instruments. */
  readonly collector: MetricsCollector;
  /** The instrument names. */
  readonly names: readonly string[];
  /** Stops observing and recording (the meter keeps the instruments, now silent). */
  unregister(): void;
}

/** The attribute that names the partner (ASP.NET Core's `aspnetcore.rate_limiting.policy`). */
export const PARTNER_ATTRIBUTE = 'hostgate.partner';
/** The attribute of `hostgate.requests` (ASP.NET Core's `aspnetcore.rate_limiting.result`). */
export const RESULT_ATTRIBUTE = 'hostgate.result';
/** The attribute naming a priority class, on what a partner with classes splits per class. */
export const CLASS_ATTRIBUTE = 'hostgate.priority_class';

/**
 * Registers hostgate's per-partner instruments on an OpenTelemetry meter. Gauges and counters
 * are observable: read from the gates in one batch callback when a reader collects, and at no
 * other time (no timer). The two duration histograms are the exception the API forces (it has
 * no observable histogram): they are recorded as permits are granted and returned, from the
 * `hostgate:acquire`/`hostgate:release` diagnostics channels, which cost nothing unsubscribed.
 *
 * | instrument (prefix `hostgate`)        | kind                | unit        | what                          |
 * | ------------------------------------- | ------------------- | ----------- | ----------------------------- |
 * | `hostgate.active_request_leases`      | observable up-down  | `{request}` | permits held now              |
 * | `hostgate.queued_requests`            | observable up-down  | `{request}` | callers waiting for a permit  |
 * | `hostgate.requests{hostgate.result}`  | observable counter  | `{request}` | `acquired`, `queue_full`, `queue_timeout`, `deadline` (shed early for a request's deadline), `store_unavailable`, `partner_hold`, `breaker_open`, `rate_limited` (the `shed*` stats), `request_canceled` (ASP.NET Core's value; `abortedWaiting` in stats) |
 * | `hostgate.request_lease.duration`     | histogram           | `s`         | grant to release              |
 * | `hostgate.request.time_in_queue`      | histogram           | `s`         | asking to grant (0 at once)   |
 * | `hostgate.lease.limit`                | observable gauge    | `{request}` | the partner's cap             |
 * | `hostgate.available_leases`           | observable up-down  | `{request}` | `limit - held`: 0 while idle = a leak |
 * | `hostgate.released_leases`            | observable counter  | `{request}` | permits returned (any way)    |
 * | `hostgate.aborted_requests`           | observable counter  | `{request}` | aborted in flight by their caller |
 * | `hostgate.lease.hold_timeouts`        | observable counter  | `{request}` | taken back after `maxHold`    |
 * | `hostgate.lease.double_releases`      | observable counter  | `{request}` | `release()` of a released permit |
 * | `hostgate.leak_suspects`              | observable up-down  | `{request}` | held past `leakWarnAfter`     |
 * | `hostgate.stalled`                    | observable gauge    | `1`         | 1: exhausted, partner silent  |
 * | `hostgate.shared.active_request_leases` | observable up-down | `{request}` | shared gates: held by every replica |
 * | `hostgate.shared.queued_requests`     | observable up-down  | `{request}` | shared gates: waiting in Redis, all replicas |
 * | `hostgate.shared.leases_lost`         | observable counter  | `{request}` | shared gates: leases Redis lost under us |
 * | `hostgate.shared.block`               | observable up-down  | `{request}` | leased shared gates: this process's block |
 * | `hostgate.shared.demand`              | observable up-down  | `{request}` | leased shared gates: this process's demand |
 * | `hostgate.retries`                    | observable counter  | `{request}` | retries (only with `retrier`) |
 * | `hostgate.partner_hold.remaining`     | observable gauge    | `s`         | left of the partner's own hold (rate-limit headers) |
 * | `hostgate.breaker.state`              | observable gauge    | `1`         | 0 closed, 1 half-open, 2 open |
 * | `hostgate.breaker.opened`             | observable counter  | `{open}`    | times the breaker opened      |
 *
 * Every instrument has the attribute `hostgate.partner`: the partner's name, always; unknown
 * origins by origin key for the `maxOriginLabels` with the most traffic, the others
 * `(other origins)` (origin-labels.ts). A partner with priority
 * classes splits `queued_requests`, `requests` (but `deadline` and `store_unavailable`) and
 * `request.time_in_queue` by `hostgate.priority_class`: one point per class, adding up to the
 * partner's.
 *
 * @example
 * import { metrics } from '@opentelemetry/api';
 * import { registerOtelMetrics } from 'hostgate/otel';
 * registerOtelMetrics(limiter, { meter: metrics.getMeter('billing-service'), retrier });
 */
export function registerOtelMetrics(
  limiter: GateSource | Semaphore,
  options: RegisterOtelMetricsOptions = {},
): RegisteredOtelMetrics {
  const { meter = metrics.getMeter('hostgate'), prefix = 'hostgate', ...rest } = options;
  if (typeof prefix !== 'string' || !/^[a-zA-Z][a-zA-Z0-9_.-]*$/.test(prefix)) {
    throw new TypeError(`prefix must be an instrument name prefix, got ${JSON.stringify(prefix)}`);
  }
  if (typeof meter?.createObservableGauge !== 'function') {
    throw new TypeError('meter must be an OpenTelemetry Meter (metrics.getMeter(name))');
  }
  const collector = new MetricsCollector(limiter, rest);
  const names: string[] = [];
  const name = (suffix: string) => {
    names.push(`${prefix}.${suffix}`);
    return `${prefix}.${suffix}`;
  };
  const unit = '{request}';

  type Values = (r: PartnerMetrics) => [number, Attributes?][];
  interface Reading {
    instrument: Observable;
    /** Counters keep reporting a label whose gates are gone; gauges would repeat stale numbers. */
    counter: boolean;
    values: Values;
  }
  const readings: Reading[] = [];
  const one =
    (value: (r: PartnerMetrics) => number): Values =>
    (r) => [[value(r)]];
  const upDown = (suffix: string, description: string, value: (r: PartnerMetrics) => number) => {
    const instrument = meter.createObservableUpDownCounter(name(suffix), { unit, description });
    readings.push({ instrument, counter: false, values: one(value) });
  };
  const gauge = (suffix: string, description: string, value: (r: PartnerMetrics) => number) => {
    const instrument = meter.createObservableGauge(name(suffix), {
      unit: suffix === 'stalled' ? '1' : unit,
      description,
    });
    readings.push({ instrument, counter: false, values: one(value) });
  };
  const counter = (suffix: string, description: string, values: Values) => {
    const instrument = meter.createObservableCounter(name(suffix), { unit, description });
    readings.push({ instrument, counter: true, values });
  };

  upDown(
    'active_request_leases',
    'Permits held now: requests in flight to their partner.',
    (r) => r.held,
  );
  /** A class-split value: one point per class of a partner with classes, else the total. */
  const perClass = (
    r: PartnerMetrics,
    total: number,
    pick: (c: PriorityClassMetrics) => number,
    attributes: Attributes = {},
  ): [number, Attributes?][] =>
    r.priorities === null
      ? [[total, attributes]]
      : Object.entries(r.priorities).map(([c, m]) => [
          pick(m),
          { ...attributes, [CLASS_ATTRIBUTE]: c },
        ]);
  {
    const instrument = meter.createObservableUpDownCounter(name('queued_requests'), {
      unit,
      description:
        'Requests waiting for a permit of their partner now (per priority class for a partner with classes).',
    });
    readings.push({
      instrument,
      counter: false,
      values: (r) => perClass(r, r.queued, (c) => c.queued),
    });
  }
  const result = (value: string): Attributes => ({ [RESULT_ATTRIBUTE]: value });
  counter(
    'requests',
    'Requests that asked for a permit, by result (per priority class for a partner with classes).',
    (r) => [
      ...perClass(r, r.acquired, (c) => c.acquired, result('acquired')),
      ...perClass(r, r.shedQueueFull, (c) => c.shedQueueFull, result('queue_full')),
      ...perClass(r, r.shedQueueTimeout, (c) => c.shedQueueTimeout, result('queue_timeout')),
      [r.shedDeadline, result('deadline')],
      [r.shedStoreUnavailable, result('store_unavailable')],
      [r.shedPartnerHold, result('partner_hold')],
      [r.shedBreakerOpen, result('breaker_open')],
      [r.shedRateLimited, result('rate_limited')],
      ...perClass(r, r.abortedWaiting, (c) => c.abortedWaiting, result('request_canceled')),
    ],
  );
  gauge('lease.limit', "The partner's concurrency cap (permits).", (r) => r.limit);
  upDown(
    'available_leases',
    'Permits free now (limit - held). Zero while the partner is idle names a leak.',
    (r) => r.available,
  );
  counter(
    'released_leases',
    'Permits returned, however they came back.',
    one((r) => r.released),
  );
  counter(
    'aborted_requests',
    'Requests aborted in flight by their caller (client disconnect).',
    one((r) => r.abortedInFlight),
  );
  counter(
    'lease.hold_timeouts',
    'Permits taken back after maxHold.',
    one((r) => r.holdTimeouts),
  );
  counter(
    'lease.double_releases',
    'release() calls on an already released permit (never an extra permit).',
    one((r) => r.doubleReleases),
  );
  upDown('leak_suspects', 'Permits held past leakWarnAfter now.', (r) => r.leakSuspects);
  // docs/contracts.md: the partner's own hold and its breaker, for rules that have them.
  const guarded = (
    suffix: string,
    unit: string,
    description: string,
    value: (r: PartnerMetrics) => number | undefined,
    isCounter = false,
  ) => {
    const instrument = isCounter
      ? meter.createObservableCounter(name(suffix), { unit, description })
      : meter.createObservableGauge(name(suffix), { unit, description });
    const values: Values = (r) => {
      const v = value(r);
      return v === undefined ? [] : [[v]];
    };
    readings.push({ instrument, counter: isCounter, values });
  };
  guarded(
    'partner_hold.remaining',
    's',
    "Seconds left of the partner's own hold (rate-limit headers, Retry-After): no call goes before.",
    (r) => (r.partnerHoldMs === null ? undefined : r.partnerHoldMs / 1000),
  );
  guarded(
    'breaker.state',
    '1',
    "The partner's breaker: 0 closed, 1 half-open (probes), 2 open (every call shed).",
    (r) => (r.breaker === null ? undefined : BREAKER_STATE_VALUES[r.breaker.state]),
  );
  guarded(
    'breaker.opened',
    '{open}',
    "Times the partner's breaker opened.",
    (r) => r.breaker?.opened,
    true,
  );
  gauge(
    'stalled',
    '1 when no permit is free and the holders got no response bytes for stallAfter.',
    (r) => (r.stalled ? 1 : 0),
  );
  // Shared gates (hostgate/redis) only: the whole cluster, beside this process's numbers above.
  const shared = (
    suffix: string,
    description: string,
    value: (s: SharedPartnerMetrics) => number | null,
    isCounter = false,
  ) => {
    const instrument = isCounter
      ? meter.createObservableCounter(name(suffix), { unit, description })
      : meter.createObservableUpDownCounter(name(suffix), { unit, description });
    const values: Values = (r) => {
      const v = r.shared === null ? null : value(r.shared);
      return v === null ? [] : [[v]];
    };
    readings.push({ instrument, counter: isCounter, values });
  };
  shared(
    'shared.active_request_leases',
    'Shared gates: permits held by every replica together (as of the last Redis answer).',
    (s) => s.held,
  );
  shared(
    'shared.queued_requests',
    'Shared gates: requests of every replica waiting in Redis.',
    (s) => s.queued,
  );
  shared(
    'shared.block',
    "Leased shared gates: this process's block of the cap (permits it may hold now).",
    (s) => s.block,
  );
  shared(
    'shared.demand',
    "Leased shared gates: this process's demand (held + queued, smoothed) as last sent.",
    (s) => s.demand,
  );
  shared(
    'shared.leases_lost',
    'Shared gates: leases Redis lost while this process held them (stalls, a Redis restart).',
    (s) => s.leasesLost,
    true,
  );
  if (rest.retrier !== undefined) {
    counter(
      'retries',
      'Retry attempts sent (each took its own permit).',
      one((r) => r.retries),
    );
  }
  const observables = readings.map((r) => r.instrument);
  const observe = (result: BatchObservableResult) => {
    for (const r of collector.collect()) {
      const live = r.gates > 0;
      for (const { instrument, counter, values } of readings) {
        if (!live && !counter) continue;
        for (const [value, extra] of values(r)) {
          result.observe(instrument, value, { [PARTNER_ATTRIBUTE]: r.partner, ...extra });
        }
      }
    }
  };
  meter.addBatchObservableCallback(observe, observables);

  const leaseDuration = meter.createHistogram(name('request_lease.duration'), {
    unit: 's',
    description: 'Time a permit was held: from dispatch until the response ended.',
    advice: { explicitBucketBoundaries: [...HOLD_BUCKETS_SECONDS] },
  });
  const timeInQueue = meter.createHistogram(name('request.time_in_queue'), {
    unit: 's',
    description: 'Time from asking for a permit to its grant (0 for an immediate grant).',
    advice: { explicitBucketBoundaries: [...WAIT_BUCKETS_SECONDS] },
  });
  const ours = ownGates(limiter);
  const classed = new WeakMap<Semaphore, boolean>();
  const record = (
    histogram: Histogram,
    gate: Semaphore,
    partner: string | undefined,
    ms: number,
    priorityClass?: string,
  ) => {
    // NaN: a permit granted before its gate measured anything (see `Semaphore.observed`).
    if (!Number.isFinite(ms) || !ours(gate)) return;
    const label = collector.labelFor(partner ?? gate.name ?? 'default', gate);
    const attributes: Attributes = { [PARTNER_ATTRIBUTE]: label };
    if (priorityClass !== undefined) {
      let hasClasses = classed.get(gate);
      if (hasClasses === undefined) {
        hasClasses = gate.stats().priorities !== undefined;
        classed.set(gate, hasClasses);
      }
      if (hasClasses) attributes[CLASS_ATTRIBUTE] = priorityClass;
    }
    histogram.record(ms / 1000, attributes);
  };
  const onAcquire = (message: unknown) => {
    const m = message as AcquireMessage;
    record(timeInQueue, m.gate, m.partner, m.waitedMs, m.priority);
  };
  const onRelease = (message: unknown) => {
    const m = message as ReleaseMessage;
    record(leaseDuration, m.gate, m.partner, m.heldMs);
  };
  subscribe('hostgate:acquire', onAcquire);
  subscribe('hostgate:release', onRelease);

  return {
    collector,
    names,
    unregister() {
      meter.removeBatchObservableCallback(observe, observables);
      unsubscribe('hostgate:acquire', onAcquire);
      unsubscribe('hostgate:release', onRelease);
    },
  };
}

/**
 * Whether a gate that published belongs to `limiter` (channels are process-wide). A gate is
 * looked up in the limiter once; the answer is kept as long as the gate lives.
 */
function ownGates(limiter: GateSource | Semaphore): (gate: Semaphore) => boolean {
  const known = new WeakMap<Semaphore, boolean>();
  return (gate) => {
    let mine = known.get(gate);
    if (mine === undefined) {
      mine =
        gate === limiter || [...((limiter as GateSource).gates?.().values() ?? [])].includes(gate);
      known.set(gate, mine);
    }
    return mine;
  };
}
