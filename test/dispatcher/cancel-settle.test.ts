import { Agent, fetch, interceptors, request } from 'undici';
import { afterEach, beforeEach, describe, expect, test } from 'vitest';
import { limitHosts } from '../../src/dispatcher/limit-hosts.js';
import { limitFetch } from '../../src/fetch.js';
import { HostLimiter } from '../../src/host-limiter.js';
import { until } from '../express/helpers.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { prng } from '../helpers/prng.js';

/**
 * A request cancelled while at the partner must keep its permit until the partner has seen
 * the connection close; otherwise the next waiter reaches the partner first and it sees
 * cap + 1 (measured: about 2% of in-flight cancellations when the permit returned at once).
 */
describe('a cancelled request keeps its permit until the connection is down', () => {
  let partner: Partner;
  let agent: Agent;
  beforeEach(async () => {
    partner = await startPartner();
    agent = new Agent();
  });
  afterEach(async () => {
    await agent.close();
    await partner.close();
  });

  // 'retry': an outer interceptor that speaks only the controller API, so the gate takes its
  // controller-API handler; 'limitFetch': the fetch wrapper over undici.fetch.
  test.each(['request', 'fetch', 'retry', 'limitFetch'])(
    'in-flight cancellations never put the partner over its cap (%s)',
    async (via) => {
      const CAP = 5;
      const limiter = new HostLimiter({
        partners: [
          { name: 'p', hosts: [partner.origin], limit: CAP, maxQueue: 1000, queueTimeout: 10_000 },
        ],
      });
      const gate = limiter.gate('p')!;
      const dispatcher =
        via === 'retry'
          ? agent.compose(limitHosts(limiter), interceptors.retry({ maxRetries: 0 }))
          : via === 'limitFetch'
            ? agent
            : agent.compose(limitHosts(limiter));
      const limited = limitFetch(fetch, limiter);
      let started = 0;
      let cancelled = 0;
      const random = prng(0xca9ce1);
      // 8 workers against a cap of 5: short waits, so most cancellations hit requests in flight.
      await Promise.all(
        Array.from({ length: 8 }, async () => {
          while (started++ < 600) {
            const controller = new AbortController();
            const url = `${partner.url}/ok?delay=${5 + Math.floor(random() * 20)}`;
            if (random() < 0.3) {
              // Chaos, not synchronisation: cancel at a random moment of the call.
              setTimeout(() => controller.abort(new Error('cancelled')), random() * 25);
            }
            try {
              if (via === 'limitFetch') {
                const r = await limited(url, { dispatcher, signal: controller.signal });
                await r.text();
              } else if (via === 'fetch') {
                const r = await fetch(url, { dispatcher, signal: controller.signal });
                await r.text();
              } else {
                const r = await request(url, { dispatcher, signal: controller.signal });
                await r.body.text();
              }
            } catch {
              cancelled++;
            }
          }
        }),
      );
      expect(cancelled).toBeGreaterThan(50);
      expect(partner.closedEarly).toBeGreaterThan(20); // many were cancelled in flight
      expect(partner.peak).toBeLessThanOrEqual(CAP);
      // A cancelled fetch rejects at once; its permit follows a few turns later, by design.
      await until(() => gate.held === 0, 'released');
      expect(gate.held).toBe(0);
      expect(gate.queued).toBe(0);
      expectInvariant(gate);
    },
  );

  test('errors other than a cancellation are passed on at once', async () => {
    const limiter = new HostLimiter({
      partners: [{ name: 'p', hosts: [partner.origin], limit: 1 }],
    });
    const dispatcher = agent.compose(limitHosts(limiter));
    // /reset destroys the socket mid-body: an error the caller did not cause.
    const r = await request(`${partner.url}/reset`, { dispatcher });
    await expect(r.body.text()).rejects.toThrow();
    expect(limiter.gate('p')!.held).toBe(0);
  });
});
