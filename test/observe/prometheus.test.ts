import { Registry } from 'prom-client';
import { type Dispatcher, request } from 'undici';
import { describe, expect, it, vi } from 'vitest';
import {
  ClientDisconnectedError,
  HostLimiter,
  limitFetch,
  limitHosts,
  MetricsCollector,
  OTHER_ORIGINS,
  QueueFullError,
  QueueTimeoutError,
  Retrier,
  Semaphore,
  WAIT_BUCKETS_SECONDS,
} from '../../src/index.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import { expectInvariant } from '../helpers/invariant.js';
import { useLoopback } from '../helpers/loopback.js';
import { labelValues, metricValue, parseMetrics } from './prom-text.js';

const loop = useLoopback();

/** Every counter and gauge of one partner, as the registry renders them. */
function scraped(text: string, p: string) {
  const v = (name: string, extra: Record<string, string> = {}) =>
    metricValue(text, name, { partner: p, ...extra });
  return {
    limit: v('hostgate_permits_limit'),
    held: v('hostgate_permits_held'),
    available: v('hostgate_permits_available'),
    queued: v('hostgate_queued'),
    acquired: v('hostgate_acquired_total'),
    released: v('hostgate_released_total'),
    queueFull: v('hostgate_shed_total', { reason: 'queue_full' }),
    queueTimeout: v('hostgate_shed_total', { reason: 'queue_timeout' }),
    abortedWaiting: v('hostgate_aborted_total', { stage: 'waiting' }),
    abortedInFlight: v('hostgate_aborted_total', { stage: 'in_flight' }),
    holdTimeouts: v('hostgate_hold_timeouts_total'),
    doubleReleases: v('hostgate_double_releases_total'),
    waitCount: v('hostgate_queue_wait_seconds_count'),
    holdCount: v('hostgate_permit_hold_seconds_count'),
  };
}

function fromStats(gate: Semaphore) {
  const s = gate.stats();
  return {
    limit: s.limit,
    held: s.held,
    available: s.available,
    queued: s.queued,
    acquired: s.acquired,
    released: s.released,
    queueFull: s.shedQueueFull,
    queueTimeout: s.shedQueueTimeout,
    abortedWaiting: s.abortedWaiting,
    abortedInFlight: s.abortedInFlight,
    holdTimeouts: s.holdTimeouts,
    doubleReleases: s.doubleReleases,
    waitCount: s.wait.count,
    holdCount: s.hold.count,
  };
}

function settle<T>(promise: Promise<T>) {
  return promise.then(
    (value) => ({ ok: true as const, value }),
    (error: unknown) => ({ ok: false as const, error }),
  );
}

async function drain(response: Promise<Dispatcher.ResponseData>): Promise<void> {
  await (await response).body.dump();
}

describe('registerMetrics (prom-client)', () => {
  it('agrees with stats() and with the partner after mixed traffic with disconnects and shedding', async () => {
    const limiter = new HostLimiter({
      partners: [
        { name: 'partner', hosts: [loop.partner.origin], limit: 4, maxQueue: 3, queueTimeout: 150 },
      ],
      unknownHosts: 'reject',
    });
    const gate = limiter.gate('partner')!;
    const registry = new Registry();
    registerMetrics(limiter, { registry });
    const dispatcher = loop.agent.compose(limitHosts(limiter));
    const get = (path: string, signal?: AbortSignal) =>
      request(`${loop.partner.url}${path}`, { dispatcher, signal });

    // Four in flight at the partner, parked until released.
    const inFlight = [0, 1, 2, 3].map(() => new AbortController());
    const held = inFlight.map((c) => settle(get('/held', c.signal)));
    await loop.partner.waitForActive(4);

    // Three wait; one of them is cancelled by its client; two more are shed at once.
    const waitAbort = new AbortController();
    const waiting = [settle(get('/ok')), settle(get('/ok', waitAbort.signal)), settle(get('/ok'))];
    const full = await Promise.all([settle(get('/ok')), settle(get('/ok'))]);
    for (const r of full) expect(!r.ok && r.error).toBeInstanceOf(QueueFullError);
    expect(gate.queued).toBe(3);
    waitAbort.abort(new ClientDisconnectedError());
    const text0 = await registry.metrics();
    expect(scraped(text0, 'partner')).toEqual(fromStats(gate));
    expect(scraped(text0, 'partner')).toMatchObject({ held: 4, available: 0, queued: 2 });

    // The other two time out in the queue.
    const waited = await Promise.all(waiting);
    expect(waited.filter((r) => !r.ok && r.error instanceof QueueTimeoutError)).toHaveLength(2);

    // Two clients disconnect mid-request (one as outbound() does, one plain abort()).
    inFlight[0]!.abort(new ClientDisconnectedError());
    inFlight[1]!.abort();
    await loop.partner.waitForClosedEarly(2);
    loop.partner.release(); // the other two answer
    const done = await Promise.all(held);
    for (const r of done.slice(2)) if (r.ok) await r.value.body.dump();
    expect(done.filter((r) => r.ok)).toHaveLength(2);

    // Then ordinary traffic through both client layers, with one body cancelled early.
    for (let i = 0; i < 5; i++) await drain(get('/ok?size=1000'));
    const limited = limitFetch((input: string, init?: RequestInit) => fetch(input, init), limiter);
    for (let i = 0; i < 3; i++) await (await limited(`${loop.partner.url}/ok?size=100`)).text();
    const fetchAbort = new AbortController();
    const res = await limited(`${loop.partner.url}/stall`, { signal: fetchAbort.signal });
    expect(res.status).toBe(200);
    fetchAbort.abort(new ClientDisconnectedError());
    await loop.partner.waitForClosedEarly(3);

    // An aborted request's permit may come back just after the partner saw the close.
    await vi.waitFor(() => expect(gate.held).toBe(0), { timeout: 2000, interval: 5 });
    expectInvariant(gate);
    const text = await registry.metrics();
    const metrics = scraped(text, 'partner');
    expect(metrics).toEqual(fromStats(gate));
    expect(metrics).toEqual({
      limit: 4,
      held: 0,
      available: 4,
      queued: 0,
      acquired: 13, // 4 held + 5 + 3 + 1 stalled
      released: 13,
      queueFull: 2,
      queueTimeout: 2,
      abortedWaiting: 1,
      abortedInFlight: 3,
      holdTimeouts: 0,
      doubleReleases: 0,
      waitCount: 13,
      holdCount: 13,
    });
    // The partner's own view: every permit was one request it saw, and every in-flight
    // abort was one request it saw closed early; it never saw more than the limit.
    expect(loop.partner.arrived).toBe(metrics.acquired);
    expect(loop.partner.closedEarly).toBe(metrics.abortedInFlight);
    expect(loop.partner.peak).toBeLessThanOrEqual(4);

    // Histograms: cumulative buckets ending in +Inf = count.
    const buckets = parseMetrics(text).filter(
      (s) => s.name === 'hostgate_queue_wait_seconds_bucket' && s.labels.partner === 'partner',
    );
    expect(buckets.map((b) => b.labels.le)).toEqual([...WAIT_BUCKETS_SECONDS.map(String), '+Inf']);
    for (let i = 1; i < buckets.length; i++) {
      expect(buckets[i]!.value).toBeGreaterThanOrEqual(buckets[i - 1]!.value);
    }
    expect(buckets.at(-1)!.value).toBe(13);
    expect(buckets[0]!.value).toBeGreaterThanOrEqual(9); // immediate grants wait 0
    const waitSum = metricValue(text, 'hostgate_queue_wait_seconds_sum', { partner: 'partner' })!;
    expect(waitSum).toBeCloseTo(gate.stats().wait.sumMs / 1000, 6);
  });

  it('keeps label values bounded, and counters whole, under many distinct unknown hosts', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'billing', hosts: ['api.billing.example'], limit: 2 }],
      unknownHosts: { limit: 1 },
      maxHosts: 8,
      evictIdleAfter: 0, // every origin a gate of its own, evicted when idle
    });
    const registry = new Registry();
    const { collector } = registerMetrics(limiter, { registry, maxOriginLabels: 5 });
    let lastOther = 0;
    for (let i = 0; i < 300; i++) {
      const gate = limiter.gateFor(`https://h${i}.attacker.example/path?${i}`)!;
      gate.tryAcquire()!.release();
      if (i % 3 === 0) {
        // Read often enough that no gate is evicted unread: then no count is lost.
        const other = collector.collect().find((r) => r.partner === OTHER_ORIGINS);
        expect(other?.acquired ?? 0).toBeGreaterThanOrEqual(lastOther); // monotonic
        lastOther = other?.acquired ?? 0;
      }
    }
    expect(limiter.gates().size).toBeLessThanOrEqual(9);
    const text = await registry.metrics();
    const partners = labelValues(text, 'partner');
    expect(partners.size).toBe(1 + 5 + 1); // billing, five origins, (other origins)
    expect(partners).toContain('billing');
    expect(partners).toContain(OTHER_ORIGINS);
    expect(partners).toContain('https://h0.attacker.example:443');
    expect([...partners].some((p) => p.includes('/path') || p.includes('?'))).toBe(false);
    const acquired = parseMetrics(text)
      .filter((s) => s.name === 'hostgate_acquired_total')
      .reduce((sum, s) => sum + s.value, 0);
    expect(acquired).toBe(300);
  });

  it('reads the gates only when scraped, once per scrape', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'billing', hosts: ['api.billing.example'], limit: 2 }],
    });
    const registry = new Registry();
    const { collector, names, unregister } = registerMetrics(limiter, { registry });
    let reads = 0;
    const collect = collector.collect.bind(collector);
    collector.collect = () => {
      reads++;
      return collect();
    };
    limiter.gate('billing')!.tryAcquire();
    expect(reads).toBe(0);
    await registry.metrics();
    expect(reads).toBe(1);
    await registry.metrics();
    expect(reads).toBe(2);
    expect(names).toContain('hostgate_permits_available');
    unregister();
    expect(await registry.metrics()).toBe('\n');
  });

  it('exports the retry layer’s retries per partner', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'partner', hosts: [loop.partner.origin], limit: 4 }],
    });
    const retrier = new Retrier({ limiter, baseDelay: 1, sleep: () => Promise.resolve() });
    const registry = new Registry();
    registerMetrics(limiter, { registry, retrier });
    const fetchWithRetry = retrier.wrap(limitFetch(fetch, limiter));
    const res = await fetchWithRetry(`${loop.partner.url}/flaky?id=a&fails=2&code=503`);
    expect(res.status).toBe(200);
    await res.text();
    const text = await registry.metrics();
    expect(metricValue(text, 'hostgate_retries_total', { partner: 'partner' })).toBe(2);
    expect(metricValue(text, 'hostgate_acquired_total', { partner: 'partner' })).toBe(3);
    expect(retrier.stats().partner!.retries).toBe(2);
  });

  it('uses one word per number: each shed*/aborted* count is the label value its name says', async () => {
    const gate = new Semaphore({ name: 'words', limit: 1, maxQueue: 1, queueTimeout: 1 });
    const registry = new Registry();
    const { collector } = registerMetrics(gate, { registry });
    const permit = gate.tryAcquire()!;
    const timedOut = gate.acquire().catch((e: unknown) => e); // queued, then its wait deadline
    await expect(gate.acquire()).rejects.toBeInstanceOf(QueueFullError);
    expect(await timedOut).toBeInstanceOf(QueueTimeoutError);
    const caller = new AbortController();
    const leaving = gate.acquire({ signal: caller.signal }).catch(() => {});
    caller.abort();
    await leaving;
    permit.release();

    const snake = (camel: string) => camel.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`).slice(1);
    const stats = gate.stats() as unknown as Record<string, number>;
    const [row] = collector.collect();
    const rowCounts = row as unknown as Record<string, number>;
    const text = await registry.metrics();
    const checked: string[] = [];
    for (const [key, value] of Object.entries(rowCounts)) {
      const shed = /^shed([A-Z]\w*)$/.exec(key);
      const aborted = /^aborted([A-Z]\w*)$/.exec(key);
      if ((shed === null && aborted === null) || key === 'shedPerSecond') continue; // a rate
      const [name, label, suffix] =
        shed === null
          ? ['hostgate_aborted_total', 'stage', aborted![1]!]
          : ['hostgate_shed_total', 'reason', shed[1]!];
      expect(metricValue(text, name, { partner: 'words', [label]: snake(suffix) }), key).toBe(
        value,
      );
      if (key in stats) expect(stats[key], key).toBe(value); // and the same key in stats()
      checked.push(key);
    }
    for (const key of Object.keys(stats)) {
      if (/^(shed|aborted)[A-Z]/.test(key))
        expect(checked, `stats().${key} in the rows`).toContain(key);
    }
    expect(row).toMatchObject({ shedQueueFull: 1, shedQueueTimeout: 1, abortedWaiting: 1 });
    expect(checked).toEqual(expect.arrayContaining(['shedDeadline', 'shedStoreUnavailable']));
  });

  it('computes the shed rate and p99 wait over its window of reads', () => {
    let now = 0;
    const limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: ['p.example'], limit: 1, maxQueue: 0 }],
    });
    const collector = new MetricsCollector(limiter, { now: () => now });
    const gate = limiter.gate('p')!;
    const permit = gate.tryAcquire()!;
    for (let i = 0; i < 20; i++) gate.acquire().catch(() => {});
    now = 10_000;
    const [row] = collector.collect();
    expect(row!.windowSeconds).toBe(10);
    expect(row!.shedPerSecond).toBeCloseTo(2, 6);
    expect(row!.waitP99Ms).toBeLessThanOrEqual(0.1); // the one grant was immediate
    permit.release();
  });

  it('rejects bad options with a TypeError naming them', () => {
    const limiter = new HostLimiter({});
    expect(() => registerMetrics(limiter, { registry: new Registry(), prefix: '1x' })).toThrow(
      /prefix/,
    );
    expect(() =>
      registerMetrics(limiter, { registry: new Registry(), maxOriginLabels: -1 }),
    ).toThrow(/maxOriginLabels/);
    expect(() => new MetricsCollector(limiter, { retrier: {} as never })).toThrow(/retrier/);
    expect(() => new MetricsCollector({} as never)).toThrow(TypeError);
  });
});
