import { MeterProvider, MetricReader } from '@opentelemetry/sdk-metrics';
import { Registry } from 'prom-client';
import { Agent, request } from 'undici';
import { afterEach, expect, it } from 'vitest';
import { statusHandler } from '../../middleware/index.js';
import { HostLimiter, limitHosts, PermitHoldTimeoutError } from '../../src/index.js';
import { registerOtelMetrics } from '../../src/observe/otel.js';
import { registerMetrics } from '../../src/observe/prometheus.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { describeRedis } from '../helpers/redis-server.js';
import { CLIENT_KINDS, privateRedis, useFleet, zcard } from './clients.js';

const redis = privateRedis();

class Reader extends MetricReader {
  protected onForceFlush = () => Promise.resolve();
  protected onShutdown = () => Promise.resolve();
}

for (const kind of CLIENT_KINDS) {
  describeRedis(`a shared partner in metrics, status and maxHold, on ${kind}`, () => {
    const fleet = useFleet(kind, redis);
    let partner: Partner | undefined;
    let agent: Agent | undefined;
    afterEach(async () => {
      await agent?.destroy();
      await partner?.close();
    });

    async function limiter(options: { maxHold?: number } = {}) {
      const store = await fleet.store();
      const rule = { name: 'billing', hosts: ['api.billing.example'], limit: 4, shared: true };
      return { store, limiter: new HostLimiter({ store, partners: [{ ...rule, ...options }] }) };
    }

    it('shows this process and the whole cluster side by side', async () => {
      const here = await limiter();
      const there = await limiter();
      const theirs = [
        await there.limiter.gate('billing')!.acquire(),
        await there.limiter.gate('billing')!.acquire(),
      ];
      // The cluster view is as of this process's last Redis answer: here, its own grant.
      const mine = await here.limiter.gate('billing')!.acquire();
      const registry = new Registry();
      registerMetrics(here.limiter, { registry });
      const text = await registry.metrics();
      expect(text).toContain('hostgate_permits_held{partner="billing"} 1');
      expect(text).toContain('hostgate_shared_permits_held{partner="billing"} 3');
      expect(text).toContain('hostgate_shared_processes{partner="billing"} 2');
      expect(text).toContain('hostgate_shared_store_up{partner="billing"} 1');
      const reader = new Reader();
      const provider = new MeterProvider({ readers: [reader] });
      const registered = registerOtelMetrics(here.limiter, { meter: provider.getMeter('test') });
      const { resourceMetrics } = await reader.collect();
      registered.unregister();
      const otel = new Map(
        resourceMetrics.scopeMetrics
          .flatMap((scope) => scope.metrics)
          .map((m) => [m.descriptor.name, m.dataPoints[0]?.value]),
      );
      expect(otel.get('hostgate.active_request_leases')).toBe(1);
      expect(otel.get('hostgate.shared.active_request_leases')).toBe(3);
      expect(otel.get('hostgate.shared.leases_lost')).toBe(0);
      await provider.shutdown();
      // The deadline rule's view: every replica's holders are ahead of a call arriving here.
      expect(here.limiter.gate('billing')).toMatchObject({ held: 1, load: { held: 3, limit: 4 } });
      const status = statusHandler(here.limiter).body();
      expect(status.partners[0]).toMatchObject({
        partner: 'billing',
        held: 1,
        shared: { held: 3, queued: 0, processes: 2, storeUp: true },
      });
      for (const permit of [mine, ...theirs]) permit.release();
    });

    it('takes back a shared permit after maxHold: the request is aborted, the lease returned', async () => {
      partner = await startPartner();
      const store = await fleet.store();
      const shared = new HostLimiter({
        store,
        partners: [{ name: 'slow', hosts: [partner.origin], limit: 1, shared: true, maxHold: 150 }],
      });
      agent = new Agent().compose(limitHosts(shared)) as unknown as Agent;
      const failure = await request(`${partner.origin}/stall`, { dispatcher: agent })
        .then((res) => res.body.text())
        .catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(PermitHoldTimeoutError);
      await store.settled();
      expect(shared.gate('slow')!.stats()).toMatchObject({ held: 0, holdTimeouts: 1 });
      expect(await zcard(redis(), 'slow', 'h')).toBe(0);
      expect(partner.peak).toBe(1);
    });

    it('reports a shared permit held past leakWarnAfter as a leak suspect', async () => {
      const { limiter: l } = await limiter({ maxHold: 60_000 });
      const gate = l.gate('billing')!;
      gate.leakWarnAfter = 1;
      const permit = await gate.acquire();
      permit.request = {
        method: 'GET',
        origin: 'https://api.billing.example',
        path: '/x?secret=1',
      };
      const started = gate.now();
      while (gate.now() - started < 5) await new Promise((r) => setTimeout(r, 5));
      const [suspect] = l.leaks();
      expect(suspect).toMatchObject({ partner: 'billing' });
      expect(JSON.stringify(suspect)).not.toContain('secret');
      permit.release();
    });
  });
}
