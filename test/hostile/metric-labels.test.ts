/**
 * Issue 36 item 8: attackers do not own the named metric labels. The 20 per-origin label values
 * went to the first origins seen: after 50,000 attacker origins they held all 20, and the real
 * unnamed hosts showed only as `(other origins)`. Named partners always get their own label;
 * the other origins theirs by traffic, not by arrival.
 */
import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { HostLimiter, type HostLimiterOptions, OVERFLOW_ORIGINS } from '../../src/index.js';
import { OTHER_ORIGINS } from '../../src/observe/collector.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import { labelValues, parseMetrics } from '../observe/prom-text.js';

/** The unnamed hosts the service really calls (no DNS, nothing is sent: gates only). */
const REAL = ['http://127.0.0.1:8001', 'http://127.0.0.1:8002', 'http://127.0.0.1:8003'];

describe('metric labels go by traffic, not arrival (issue 36 item 8)', () => {
  it.each<[string, HostLimiterOptions]>([['default limiter', {}]])(
    '%s: 50,000 one-call attacker origins, first and throughout, leave the real hosts their labels',
    async (_what, options) => {
      let clock = 0;
      const limiter = new HostLimiter({
        partners: [{ name: 'billing', hosts: ['api.billing.example'], limit: 5 }],
        ...options,
      });
      const registry = new Registry();
      const { collector } = registerMetrics(limiter, { registry, now: () => clock });
      const call = (url: string) => limiter.gateFor(url)!.tryAcquire()?.release();
      // The attacker comes first: 40 origins seen before any real host.
      for (let i = 0; i < 40; i++) call(`http://127.0.0.1:${20_000 + i}`);
      collector.collect();
      let attacker = 40;
      while (attacker < 50_000) {
        // Per "second": the real hosts 20 calls each, 1,000 new attacker origins one call each.
        for (const url of REAL) for (let i = 0; i < 20; i++) call(`${url}/api`);
        for (let i = 0; i < 1000; i++) {
          call(`http://127.0.0.1:${20_000 + (attacker++ % 40_000)}/${attacker}`);
        }
        call('https://api.billing.example/x');
        clock += 1000;
        collector.collect(); // a scrape a second
      }
      const labels = labelValues(await registry.metrics(), 'partner');
      for (const url of REAL) expect(labels).toContain(url);
      expect(labels).toContain('billing');
      // Bounded: billing, at most 20 origins, (other origins), the overflow gate.
      expect(labels.size).toBeLessThanOrEqual(1 + 20 + 2);
      expect(
        [...labels].every(
          (l) =>
            l === 'billing' ||
            l === OTHER_ORIGINS ||
            l === OVERFLOW_ORIGINS ||
            l.startsWith('http://127.0.0.1:'),
        ),
      ).toBe(true);
      // Each real host's own series counted its calls since it got its label: most of them.
      const acquired = parseMetrics(await registry.metrics()).filter(
        (s) => s.name === 'hostgate_acquired_total' && REAL.includes(s.labels.partner!),
      );
      for (const sample of acquired) expect(sample.value).toBeGreaterThan(0.9 * 20 * 49);
    },
  );

  it('a named partner keeps its label however little traffic it has', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'quiet', hosts: ['quiet.example'], limit: 1 }],
    });
    const registry = new Registry();
    const { collector } = registerMetrics(limiter, { registry, maxOriginLabels: 2 });
    for (let i = 0; i < 500; i++) {
      for (let j = 0; j < 5; j++)
        limiter
          .gateFor(`http://127.0.0.1:${9000 + i}`)!
          .tryAcquire()
          ?.release();
      if (i % 50 === 0) collector.collect();
    }
    const labels = labelValues(await registry.metrics(), 'partner');
    expect(labels).toContain('quiet');
  });
});
