/**
 * Priority classes in the metrics (a `priority_class` label / `hostgate.priority_class`
 * attribute on what a class accounts for) and `tryAcquire({ weight, priority })`.
 */
import { MeterProvider, MetricReader, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import { Registry } from 'prom-client';
import { afterEach, describe, expect, it } from 'vitest';
import { QueueFullError, Semaphore } from '../../src/index.js';
import { MetricsCollector } from '../../src/observe/collector.js';
import { registerOtelMetrics } from '../../src/observe/otel.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import { expectInvariant } from '../helpers/invariant.js';
import { metricValue } from '../observe/prom-text.js';

const CLASSES = [
  { name: 'interactive', share: 0.75 },
  { name: 'batch', share: 0.25, maxQueue: 1 },
];

/** A gate with classes in a known state: 1 held, 1 interactive and 1 batch queued, sheds of each kind. */
async function loadedGate(): Promise<{ gate: Semaphore; release: () => Promise<void> }> {
  // Observed from construction: the first grant's wait is in the class histograms too.
  const gate = new Semaphore({
    limit: 1,
    maxQueue: 3,
    name: 'billing',
    priorities: CLASSES,
    observe: true,
  });
  const held = gate.tryAcquire({ priority: 'batch' })!;
  expect(held).toBeDefined();
  const interactive = gate.acquire();
  const batch = gate.acquire({ priority: 'batch' });
  // The batch class is full (maxQueue 1): its next arrival is refused.
  await expect(gate.acquire({ priority: 'batch' })).rejects.toBeInstanceOf(QueueFullError);
  // An interactive waiter that gives up.
  const controller = new AbortController();
  const gone = gate.acquire({ signal: controller.signal });
  controller.abort(new Error('client went away'));
  await expect(gone).rejects.toThrow('client went away');
  return {
    gate,
    async release() {
      held.release(); // interactive first: both classes at the same pass, the higher wins
      (await interactive).release();
      (await batch).release();
    },
  };
}

describe('priority classes in stats and metrics', () => {
  it('stats().priorities carries each class its wait summary', async () => {
    const { gate, release } = await loadedGate();
    const s = gate.stats();
    expect(s.priorities?.interactive).toMatchObject({ queued: 1, abortedWaiting: 1 });
    expect(s.priorities?.batch).toMatchObject({ queued: 1, acquired: 1, shedQueueFull: 1 });
    expect(s.priorities?.batch?.wait.count).toBe(1);
    await release();
    const after = gate.stats();
    expect(after.priorities?.interactive?.wait.count).toBe(1);
    expect(gate.waitTimesOf('interactive').count).toBe(1);
    expect(() => gate.waitTimesOf('bulk')).toThrow(TypeError);
    expectInvariant(gate);
  });

  it('the collector splits queue depth, grants, sheds and waits by class, adding up to the partner', async () => {
    const { gate, release } = await loadedGate();
    const collector = new MetricsCollector(gate);
    const [row] = collector.collect();
    expect(row!.priorities).not.toBeNull();
    const classes = row!.priorities!;
    expect(classes.interactive).toMatchObject({ queued: 1, acquired: 0, abortedWaiting: 1 });
    expect(classes.batch).toMatchObject({ queued: 1, acquired: 1, shedQueueFull: 1 });
    const sum = (pick: (c: (typeof classes)[string]) => number) =>
      Object.values(classes).reduce((total, c) => total + pick(c), 0);
    expect(sum((c) => c.queued)).toBe(row!.queued);
    expect(sum((c) => c.acquired)).toBe(row!.acquired);
    expect(sum((c) => c.shedQueueFull)).toBe(row!.shedQueueFull);
    expect(sum((c) => c.abortedWaiting)).toBe(row!.abortedWaiting);
    await release();
    const [later] = collector.collect();
    expect(later!.priorities!.interactive!.acquired).toBe(1);
    expect(later!.priorities!.interactive!.wait.count).toBe(1);
    expect(Object.values(later!.priorities!).reduce((total, c) => total + c.wait.count, 0)).toBe(
      later!.wait.count,
    );
  });

  it('a gate without classes has no per-class part', () => {
    const gate = new Semaphore({ limit: 1, name: 'plain' });
    gate.tryAcquire()!.release();
    expect(new MetricsCollector(gate).collect()[0]!.priorities).toBeNull();
  });

  it('Prometheus: priority_class label on queued, acquired, shed, aborted and queue wait', async () => {
    const { gate, release } = await loadedGate();
    const registry = new Registry();
    registerMetrics(gate, { registry });
    const text = await registry.metrics();
    const labels = (priority_class: string, extra: Record<string, string> = {}) => ({
      partner: 'billing',
      priority_class,
      ...extra,
    });
    expect(metricValue(text, 'hostgate_queued', labels('interactive'))).toBe(1);
    expect(metricValue(text, 'hostgate_queued', labels('batch'))).toBe(1);
    expect(metricValue(text, 'hostgate_queued', { partner: 'billing' })).toBeUndefined();
    expect(metricValue(text, 'hostgate_acquired_total', labels('batch'))).toBe(1);
    expect(
      metricValue(text, 'hostgate_shed_total', labels('batch', { reason: 'queue_full' })),
    ).toBe(1);
    expect(
      metricValue(text, 'hostgate_shed_total', labels('interactive', { reason: 'queue_full' })),
    ).toBe(0);
    // Not a class's doing: no class label.
    expect(
      metricValue(text, 'hostgate_shed_total', { partner: 'billing', reason: 'deadline' }),
    ).toBe(0);
    expect(
      metricValue(text, 'hostgate_aborted_total', labels('interactive', { stage: 'waiting' })),
    ).toBe(1);
    expect(
      metricValue(text, 'hostgate_aborted_total', { partner: 'billing', stage: 'in_flight' }),
    ).toBe(0);
    expect(metricValue(text, 'hostgate_queue_wait_seconds_count', labels('batch'))).toBe(1);
    await release();
    const after = await registry.metrics();
    expect(metricValue(after, 'hostgate_queue_wait_seconds_count', labels('interactive'))).toBe(1);
    expect(
      metricValue(
        after,
        'hostgate_queue_wait_seconds_bucket',
        labels('interactive', { le: '+Inf' }),
      ),
    ).toBe(1);
    expect(metricValue(after, 'hostgate_queued', labels('interactive'))).toBe(0);
  });

  it('Prometheus: a gate without classes keeps its series unlabelled', async () => {
    const gate = new Semaphore({ limit: 1, name: 'plain' });
    gate.tryAcquire()!.release();
    const registry = new Registry();
    registerMetrics(gate, { registry });
    const text = await registry.metrics();
    expect(metricValue(text, 'hostgate_queued', { partner: 'plain' })).toBe(0);
    expect(metricValue(text, 'hostgate_acquired_total', { partner: 'plain' })).toBe(1);
    expect(text).not.toContain('priority_class=');
  });

  describe('OpenTelemetry', () => {
    class OnDemandReader extends MetricReader {
      protected onForceFlush(): Promise<void> {
        return Promise.resolve();
      }
      protected onShutdown(): Promise<void> {
        return Promise.resolve();
      }
    }
    let provider: MeterProvider | undefined;
    afterEach(async () => {
      await provider?.shutdown();
    });

    interface Point {
      value: number | { count: number; sum: number };
      attributes: Record<string, unknown>;
    }
    function value(metrics: ResourceMetrics, name: string, attributes: Record<string, string>) {
      for (const scope of metrics.scopeMetrics) {
        for (const metric of scope.metrics) {
          if (metric.descriptor.name !== name) continue;
          const point = (metric.dataPoints as unknown as Point[]).find(
            (p) =>
              Object.keys(p.attributes).length === Object.keys(attributes).length &&
              Object.entries(attributes).every(([k, v]) => p.attributes[k] === v),
          );
          return point?.value;
        }
      }
      return undefined;
    }

    it('hostgate.priority_class on queued_requests, requests and time_in_queue', async () => {
      const reader = new OnDemandReader();
      provider = new MeterProvider({ readers: [reader] });
      // Registered first: the grants' wait times are recorded as they happen.
      let t = 0;
      const gate = new Semaphore({
        limit: 1,
        maxQueue: 3,
        name: 'billing',
        priorities: CLASSES,
        now: () => t,
      });
      const registered = registerOtelMetrics(gate, { meter: provider.getMeter('test') });
      const held = gate.tryAcquire({ priority: 'batch' })!;
      const interactive = gate.acquire();
      const batch = gate.acquire({ priority: 'batch' });
      const attrs = (c: string, extra: Record<string, string> = {}) => ({
        'hostgate.partner': 'billing',
        'hostgate.priority_class': c,
        ...extra,
      });
      let metrics = (await reader.collect()).resourceMetrics;
      expect(value(metrics, 'hostgate.queued_requests', attrs('interactive'))).toBe(1);
      expect(value(metrics, 'hostgate.queued_requests', attrs('batch'))).toBe(1);
      expect(
        value(metrics, 'hostgate.requests', attrs('batch', { 'hostgate.result': 'acquired' })),
      ).toBe(1);
      expect(
        value(metrics, 'hostgate.requests', {
          'hostgate.partner': 'billing',
          'hostgate.result': 'deadline',
        }),
      ).toBe(0);
      t = 20;
      held.release();
      (await interactive).release();
      (await batch).release();
      metrics = (await reader.collect()).resourceMetrics;
      const waited = value(metrics, 'hostgate.request.time_in_queue', attrs('interactive'));
      expect(waited).toMatchObject({ count: 1 });
      expect((waited as { sum: number }).sum).toBeCloseTo(0.02);
      registered.unregister();
      expectInvariant(gate);
    });
  });
});

describe('tryAcquire({ weight, priority })', () => {
  it('takes a class and a weight, counted in that class', () => {
    const gate = new Semaphore({ limit: 4, priorities: CLASSES });
    const permit = gate.tryAcquire({ weight: 3, priority: 'batch' })!;
    expect(permit.weight).toBe(3);
    expect(gate.stats().priorities?.batch?.acquired).toBe(1);
    expect(gate.tryAcquire({ weight: 2 })).toBeUndefined();
    const one = gate.tryAcquire({ priority: 'interactive' })!;
    expect(gate.stats().priorities?.interactive?.acquired).toBe(1);
    expect(gate.tryAcquire({})).toBeUndefined();
    permit.release();
    one.release();
    expectInvariant(gate);
  });

  it('keeps tryAcquire(weight) and never overtakes a waiter of any class', async () => {
    const gate = new Semaphore({ limit: 2, priorities: CLASSES });
    const heavy = gate.tryAcquire(2)!;
    expect(heavy.weight).toBe(2);
    const waiting = gate.acquire({ priority: 'batch' });
    heavy.release();
    // The batch waiter was granted in the release; nothing is free for the interactive class.
    expect(gate.tryAcquire({ priority: 'interactive', weight: 2 })).toBeUndefined();
    const one = gate.tryAcquire({ priority: 'interactive' })!;
    expect(one).toBeDefined();
    (await waiting).release();
    one.release();
    expectInvariant(gate);
  });

  it('refuses bad input with a clear error', () => {
    const gate = new Semaphore({ limit: 2, priorities: CLASSES });
    expect(() => gate.tryAcquire({ priority: 'bulk' })).toThrow(
      /priority must be one of interactive, batch/,
    );
    expect(() => gate.tryAcquire({ weight: 3 })).toThrow(RangeError);
    expect(() => gate.tryAcquire({ weight: 0 })).toThrow(TypeError);
    expect(() => gate.tryAcquire({ wieght: 1 } as never)).toThrow(TypeError);
    expect(() => gate.tryAcquire('1' as never)).toThrow(TypeError);
    expect(gate.held).toBe(0);
  });
});
