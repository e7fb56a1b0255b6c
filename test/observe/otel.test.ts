import { MeterProvider, MetricReader, type ResourceMetrics } from '@opentelemetry/sdk-metrics';
import { request } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitHosts, QueueFullError, Semaphore } from '../../src/index.js';
import { registerOtelMetrics } from '../../src/observe/otel.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useLoopback } from '../helpers/loopback.js';

/** A reader that collects only when the test asks: no timer, no exporter. */
class OnDemandReader extends MetricReader {
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

interface Point {
  value: number | { count: number; sum?: number; buckets: { counts: number[] } };
  attributes: Record<string, unknown>;
}

/** The data points of one instrument, found by name in a collection. */
function points(metrics: ResourceMetrics, name: string): Point[] {
  for (const scope of metrics.scopeMetrics) {
    for (const metric of scope.metrics) {
      if (metric.descriptor.name === name) return metric.dataPoints as unknown as Point[];
    }
  }
  return [];
}

function value(metrics: ResourceMetrics, name: string, attributes: Record<string, string>) {
  const point = points(metrics, name).find((p) =>
    Object.entries(attributes).every(([k, v]) => p.attributes[k] === v),
  );
  return point?.value;
}

const loop = useLoopback({ keepAliveTimeout: 10_000 });
let reader: OnDemandReader;
let provider: MeterProvider;

beforeEach(() => {
  reader = new OnDemandReader();
  provider = new MeterProvider({ readers: [reader] });
});

afterEach(async () => {
  await provider.shutdown();
});

const collect = async () => (await reader.collect()).resourceMetrics;

describe('hostgate/otel: the per-partner instruments on an OpenTelemetry meter', () => {
  it('reports leases, queue, results and durations after real traffic through a gate', async () => {
    const limiter = new HostLimiter({
      partners: [
        {
          name: 'billing',
          hosts: [loop.partner.origin],
          limit: 3,
          maxQueue: 5,
          queueTimeout: 10_000,
        },
      ],
    });
    const gate = limiter.gate('billing')!;
    const meter = provider.getMeter('test');
    const registered = registerOtelMetrics(limiter, { meter });
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    const billing = { 'hostgate.partner': 'billing' };

    const calls = Array.from({ length: 7 }, () =>
      request(`${loop.partner.url}/held`, { dispatcher }).then((r) => r.body.text()),
    );
    await loop.partner.waitForActive(3);
    const ac = new AbortController();
    const cancelled = request(`${loop.partner.url}/ok`, { dispatcher, signal: ac.signal }).catch(
      (e: unknown) => e,
    );
    const shed = await request(`${loop.partner.url}/ok`, { dispatcher }).catch((e: unknown) => e);
    expect(shed).toBeInstanceOf(QueueFullError);
    ac.abort();
    expect(await cancelled).toMatchObject({ name: 'AbortError' });

    let m = await collect();
    expect(value(m, 'hostgate.active_request_leases', billing)).toBe(3);
    expect(value(m, 'hostgate.queued_requests', billing)).toBe(4);
    expect(value(m, 'hostgate.lease.limit', billing)).toBe(3);
    expect(value(m, 'hostgate.available_leases', billing)).toBe(0);
    const result = (r: string) =>
      value(m, 'hostgate.requests', { ...billing, 'hostgate.result': r });
    expect(result('acquired')).toBe(3);
    expect(result('queue_full')).toBe(1);
    expect(result('queue_timeout')).toBe(0);
    expect(result('request_canceled')).toBe(1);

    loop.partner.openHeld();
    await Promise.all(calls);
    // A gate of no limiter of ours publishes on the same channels: not counted.
    new Semaphore({ limit: 1, name: 'billing' }).tryAcquire()?.release();
    m = await collect();
    expect(value(m, 'hostgate.active_request_leases', billing)).toBe(0);
    expect(value(m, 'hostgate.queued_requests', billing)).toBe(0);
    expect(result('acquired')).toBe(7);
    expect(value(m, 'hostgate.released_leases', billing)).toBe(7);
    expect(value(m, 'hostgate.stalled', billing)).toBe(0);
    const lease = value(m, 'hostgate.request_lease.duration', billing) as { count: number };
    const queue = value(m, 'hostgate.request.time_in_queue', billing) as {
      count: number;
      sum: number;
    };
    expect(lease.count).toBe(7);
    expect(queue.count).toBe(7);
    expect(queue.sum).toBeGreaterThan(0); // four of them waited
    expectInvariant(gate);
    registered.unregister();
    await request(`${loop.partner.url}/ok`, { dispatcher }).then((r) => r.body.text());
    m = await collect();
    expect(result('acquired')).toBe(7); // the SDK repeats the last observation: no callback ran
    const after = value(m, 'hostgate.request.time_in_queue', billing) as { count: number };
    expect(after.count).toBe(7);
  });

  it('refuses a bad prefix or meter with a TypeError naming it', () => {
    const gate = new Semaphore({ limit: 1, name: 'g' });
    expect(() => registerOtelMetrics(gate, { prefix: '1x' })).toThrow(/prefix .* got "1x"/);
    expect(() => registerOtelMetrics(gate, { meter: {} as never })).toThrow(/meter must be/);
  });

  it('observes a bare Semaphore under its name, with retries when given a retrier', async () => {
    const gate = new Semaphore({ limit: 2, name: 'batch' });
    const retrier = { stats: () => ({ batch: { retries: 4 } }) };
    const registered = registerOtelMetrics(gate, { meter: provider.getMeter('t'), retrier });
    const permit = gate.tryAcquire()!;
    const m = await collect();
    expect(value(m, 'hostgate.active_request_leases', { 'hostgate.partner': 'batch' })).toBe(1);
    expect(value(m, 'hostgate.retries', { 'hostgate.partner': 'batch' })).toBe(4);
    permit.release();
    registered.unregister();
  });
});
