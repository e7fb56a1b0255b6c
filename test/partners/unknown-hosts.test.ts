import { Agent, fetch, getGlobalDispatcher, setGlobalDispatcher } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { HostLimiter, limitHosts } from '../../src/index.js';
import { expectInvariant } from '../helpers/invariant.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { released } from '../helpers/until.js';

describe('unknown hosts by default: counted, not capped', () => {
  const cleanup: (() => Promise<unknown> | unknown)[] = [];
  afterEach(async () => {
    for (const fn of cleanup.splice(0).reverse()) await fn();
  });

  async function partner(): Promise<Partner> {
    const p = await startPartner();
    cleanup.push(() => p.close());
    return p;
  }

  // The report of issue 23: `setGlobalDispatcher(new Agent().compose(limitHosts(limiter)))`
  // failed 248 of 300 fetches to an internal service no rule named (the old default capped every
  // unnamed origin at 10 with 100 waiting). Adding a partner rule must not break other traffic.
  it('lets 300 concurrent fetches to an unnamed host through a global limitHosts dispatcher, while the named partner stays capped', async () => {
    const internal = await partner();
    const billing = await partner();
    const limiter = new HostLimiter({
      partners: [
        { name: 'billing', hosts: [billing.origin], limit: 5, maxQueue: 100, queueTimeout: 15_000 },
      ],
    });
    const agent = new Agent({ keepAliveTimeout: 5000 });
    const previous = getGlobalDispatcher();
    setGlobalDispatcher(agent.compose(limitHosts(limiter)));
    cleanup.push(() => agent.destroy());
    cleanup.push(() => setGlobalDispatcher(previous));

    const call = async (url: string) => {
      const res = await fetch(url);
      await res.text();
      return res.status;
    };
    const internalCalls = Array.from({ length: 300 }, () => call(`${internal.url}/held`));
    const billingCalls = Array.from({ length: 30 }, () => call(`${billing.url}/held`));

    // All 300 are open at the internal service at once: nothing capped or queued them (a call
    // that fails instead fails the test at once).
    const failed = new Promise<never>((_, reject) => {
      for (const c of [...internalCalls, ...billingCalls]) c.catch(reject);
    });
    await Promise.race([internal.waitForActive(300), failed]);
    await billing.waitForActive(5);
    const gate = limiter.gateFor(internal.origin)!;
    expect(gate.held).toBe(300);
    expectInvariant(gate);
    const billingGate = limiter.gate('billing')!;
    expect(billingGate.held).toBe(5);
    expect(billingGate.queued).toBe(25);
    expectInvariant(billingGate);
    // Counted and visible under its origin, as every unnamed host is.
    expect(limiter.stats()[internal.origin.replace(/\/$/, '')]?.held).toBe(300);

    internal.openHeld();
    billing.openHeld();
    const results = await Promise.allSettled([...internalCalls, ...billingCalls]);
    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    expect(internal.peak).toBe(300);
    expect(billing.peak).toBe(5);
    await released(gate);
    await released(billingGate);
    expectInvariant(gate);
    expectInvariant(billingGate);
  }, 30_000);

  it('caps unnamed hosts only when asked to (unknownHosts: { limit })', async () => {
    const internal = await partner();
    const limiter = new HostLimiter({ unknownHosts: { limit: 2, maxQueue: 0 } });
    const dispatcher = new Agent().compose(limitHosts(limiter));
    cleanup.push(() => dispatcher.destroy());
    const first = Array.from({ length: 2 }, () =>
      fetch(`${internal.url}/held`, { dispatcher }).then((r) => r.text()),
    );
    await internal.waitForActive(2);
    await expect(fetch(`${internal.url}/held`, { dispatcher })).rejects.toMatchObject({
      cause: { code: 'HOSTGATE_QUEUE_FULL' },
    });
    internal.openHeld();
    await Promise.all(first);
    expect(internal.peak).toBe(2);
  });
});
