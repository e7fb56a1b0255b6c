import { Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { statusHandler } from '../../middleware/index.js';
import { reportResponse } from '../../src/gate/outcomes.js';
import { HostLimiter, MetricsCollector, type Permit } from '../../src/index.js';
import { registerMetrics } from '../../src/observe/prometheus.js';

/** An adaptive partner whose limit was cut once by a 503, reported as the HTTP layers do. */
function cutOnce() {
  const limiter = new HostLimiter({
    partners: [
      { name: 'billing', hosts: ['billing.example'], limit: 50, adaptive: { initial: 10 } },
      { name: 'search', hosts: ['search.example'], limit: 8 },
    ],
  });
  const gate = limiter.gate('billing')!;
  const permit = gate.tryAcquire() as Permit;
  reportResponse(permit, 503, {}, 1);
  permit.release();
  return limiter;
}

describe('the effective limit is visible everywhere', () => {
  it('in the metrics collector rows', () => {
    const rows = new MetricsCollector(cutOnce()).collect();
    expect(rows.find((r) => r.partner === 'billing')).toMatchObject({
      limit: 9,
      contractLimit: 50,
      limitChanges: 1,
      adaptive: true,
    });
    expect(rows.find((r) => r.partner === 'search')).toMatchObject({
      limit: 8,
      contractLimit: 8,
      limitChanges: 0,
      adaptive: false,
    });
  });

  it('in Prometheus: a contract-limit gauge and a limit-changes counter', async () => {
    const registry = new Registry();
    registerMetrics(cutOnce(), { registry });
    const text = await registry.metrics();
    expect(text).toContain('hostgate_permits_limit{partner="billing"} 9');
    expect(text).toContain('hostgate_permits_contract_limit{partner="billing"} 50');
    expect(text).toContain('hostgate_limit_changes_total{partner="billing"} 1');
  });

  it('on the status page', () => {
    let html = '';
    const res = {
      setHeader() {},
      end(text: string) {
        html = text;
      },
    };
    statusHandler(cutOnce())({ url: '/', headers: {} } as never, res as never);
    expect(html).toContain('adaptive: limit 9 of contract 50');
    expect(html).not.toContain('of contract 8');
  });
});
