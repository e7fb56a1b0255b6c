/**
 * A leased rate with costs (issue 32, the cost stall the fault campaign found beside item 5): a
 * process sends at its share with `floor(burst × share / limit)` of the burst, and a call of
 * cost `c` conforms only with a burst of `c - 1` or more. Each process now reports the share
 * its costliest waiting head needs, a floor of its rate share met oldest head first as the cap's
 * floors are. The oracles: a partner's own arrival log (cost units in any window of `per` within
 * `limit + burst`) and the wait of the costly call.
 */
import { afterEach, expect, it } from 'vitest';
import type { LeasedSemaphore } from '../../src/redis/index.js';
import { expectPromiseKept, oracle } from '../helpers/rate-oracle.js';
import { describeRedis } from '../helpers/redis-server.js';
import { privateRedis, useFleet } from './clients.js';

const redis = privateRedis();
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describeRedis('a leased rate with costs', () => {
  const fleet = useFleet('node-redis', redis);

  it('the cost stall: a call of cost 3 in one process while three others keep the rate busy with calls of cost 1 is sent (its share grows to 5, burst 2), and the partner sees the promise kept', async () => {
    // rate 10/s burst 4: a share's burst is floor(0.4 × share); cost 3 needs a burst of 2, so
    // a share of 5. Four busy processes: the level is 2-3, burst 0-1: before, the call waited
    // for its deadline (8 s) every time.
    const o = await oracle(cleanups);
    const rate = { limit: 10, per: 1000, burst: 4 };
    const options = {
      name: 'costly',
      limit: 8,
      mode: 'leased',
      leaseMs: 1000,
      refreshMs: 200,
      rate,
    } as const;
    const gates: LeasedSemaphore[] = [];
    for (let i = 0; i < 4; i++) gates.push((await fleet.store()).semaphore(options));
    const costs = new Map<string, number>();
    let id = 0;
    const call = (gate: LeasedSemaphore, cost: number) => {
      const name = String(id++);
      costs.set(name, cost);
      return gate.run(
        async () => {
          const response = await o.fetch(`${o.origin}/?id=${name}`);
          await response.text();
        },
        { cost, timeout: 8000 },
      );
    };
    let busy = true;
    const loops = gates.slice(1).flatMap((gate) =>
      Array.from({ length: 3 }, async () => {
        while (busy) await call(gate, 1);
      }),
    );
    try {
      // The three busy processes share the rate: wait until each has sent.
      while (costs.size < 12) await new Promise((resolve) => setTimeout(resolve, 20));
      const asked = performance.now();
      await call(gates[0]!, 3);
      const waited = performance.now() - asked;
      expect(waited, 'the cost-3 call waited (ms)').toBeLessThan(5000);
    } finally {
      busy = false;
      await Promise.all(loops);
    }
    expectPromiseKept(o, rate, (name) => costs.get(name) ?? 1);
  }, 20_000);
});
