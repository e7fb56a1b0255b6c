import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { Registry } from 'prom-client';
import { afterEach, expect, it } from 'vitest';
import { statusHandler } from '../../middleware/index.js';
import { HostLimiter, limitFetch } from '../../src/index.js';
import { registerOtelMetrics } from '../../src/observe/otel.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import { metricValue } from '../observe/prom-text.js';

class OnDemandReader extends MetricReader {
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

/** `/down` drops the connection; `/spent` answers 200 with the budget spent for 30 s. */
async function startPartner(): Promise<string> {
  const server = http.createServer((req, res) => {
    if (req.url === '/down') req.socket.destroy();
    else res.writeHead(200, { ratelimit: '"default";r=0;t=30' }).end('ok');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  closers.push(
    () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

it('shows an open breaker, the partner’s hold and rate sheds in stats, Prometheus, OpenTelemetry and the status page', async () => {
  const [down, spent, metered] = await Promise.all([
    startPartner(),
    startPartner(),
    startPartner(),
  ]);
  const limiter = new HostLimiter({
    partners: [
      { name: 'down', hosts: [down], limit: 2, breaker: { failures: 2, halfOpenAfterMs: 60_000 } },
      { name: 'spent', hosts: [spent], limit: 2, queueTimeout: 100 },
      // One call a minute (headers unread: the partner's spent budget would hold it first): the
      // second call's slot is a minute past its 100 ms deadline.
      {
        name: 'metered',
        hosts: [metered],
        limit: 2,
        queueTimeout: 100,
        rateLimitHeaders: false,
        rate: { limit: 1, per: 60_000 },
      },
    ],
  });
  const registry = new Registry();
  registerMetrics(limiter, { registry });
  const reader = new OnDemandReader();
  const provider = new MeterProvider({ readers: [reader] });
  closers.push(() => provider.shutdown());
  const registered = registerOtelMetrics(limiter, { meter: provider.getMeter('test') });
  closers.push(async () => registered.unregister());
  const fetchLimited = limitFetch(fetch, limiter);
  const call = (url: string) =>
    fetchLimited(url).then(
      (r) => r.text(),
      (e: unknown) => e,
    );

  for (let i = 0; i < 2; i++) await call(`${down}/down`); // opens it
  await call(`${down}/down`); // shed: breaker_open
  await call(`${spent}/x`); // spends the budget for 30 s
  await call(`${spent}/x`); // shed at once: its 100 ms deadline ends first (partner_hold)
  await call(`${metered}/x`); // its slot
  await call(`${metered}/x`); // shed at once: rate_limited

  const stats = limiter.stats();
  expect(stats.down!.breaker).toMatchObject({ state: 'open', opened: 1, shed: 1 });
  expect(stats.spent!.partnerHold).toMatchObject({ holds: 1, shed: 1, source: 'RateLimit' });
  expect(stats.spent!.partnerHold!.remainingMs).toBeGreaterThan(25_000);
  expect(stats.metered!.rate).toMatchObject({ shedRateLimited: 1 });

  const text = await registry.metrics();
  expect(metricValue(text, 'hostgate_breaker_state', { partner: 'down' })).toBe(2);
  expect(metricValue(text, 'hostgate_breaker_opened_total', { partner: 'down' })).toBe(1);
  expect(
    metricValue(text, 'hostgate_shed_total', { partner: 'down', reason: 'breaker_open' }),
  ).toBe(1);
  expect(
    metricValue(text, 'hostgate_shed_total', { partner: 'spent', reason: 'partner_hold' }),
  ).toBe(1);
  expect(
    metricValue(text, 'hostgate_shed_total', { partner: 'metered', reason: 'rate_limited' }),
  ).toBe(1);
  expect(metricValue(text, 'hostgate_partner_hold_seconds', { partner: 'spent' })).toBeGreaterThan(
    25,
  );
  expect(metricValue(text, 'hostgate_breaker_state', { partner: 'spent' })).toBeUndefined();

  const { resourceMetrics } = await reader.collect();
  const point = (name: string, attributes: Record<string, string>) =>
    resourceMetrics.scopeMetrics
      .flatMap((s) => s.metrics)
      .find((m) => m.descriptor.name === name)
      ?.dataPoints.find((p) => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v))
      ?.value;
  expect(point('hostgate.breaker.state', { 'hostgate.partner': 'down' })).toBe(2);
  expect(point('hostgate.breaker.opened', { 'hostgate.partner': 'down' })).toBe(1);
  expect(
    point('hostgate.requests', { 'hostgate.partner': 'down', 'hostgate.result': 'breaker_open' }),
  ).toBe(1);
  expect(
    point('hostgate.requests', {
      'hostgate.partner': 'metered',
      'hostgate.result': 'rate_limited',
    }),
  ).toBe(1);
  expect(point('hostgate.partner_hold.remaining', { 'hostgate.partner': 'spent' })).toBeGreaterThan(
    25,
  );

  const status = statusHandler(limiter);
  const body = status.body();
  const row = (name: string) => body.partners.find((p) => p.partner === name)!;
  expect(row('down')).toMatchObject({ breaker: { state: 'open', opened: 1 }, shedBreakerOpen: 1 });
  expect(row('spent')).toMatchObject({ breaker: null, shedPartnerHold: 1 });
  expect(row('spent').partnerHoldMs).toBeGreaterThan(25_000);
  expect(row('metered')).toMatchObject({ shedRateLimited: 1 });
  const html = await new Promise<string>((resolve) => {
    const res = Object.assign(new http.ServerResponse(new http.IncomingMessage(null as never)), {
      end(chunk: string) {
        resolve(chunk);
        return this;
      },
    });
    status({ headers: {}, url: '/' } as http.IncomingMessage, res as http.ServerResponse);
  });
  expect(html).toContain('● breaker open');
  expect(html).toMatch(/held by the partner: \d+ s left/);
});
