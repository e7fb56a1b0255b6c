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
import { expectPromiseKept, type Oracle, oracle } from '../helpers/rate-oracle.js';
import { describeRedis } from '../helpers/redis-server.js';
import { privateRedis, useFleet } from './clients.js';

const redis = privateRedis();
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * `n` fresh processes of one leased gate (cap 8, lease 2 s, refresh 500 ms) at `rate`, the
 * oracle's loop stalls counted from here, and `send(p, cost, timeout)`: one call of `cost`
 * through process `p` to the partner, its cost kept for the partner's windows (`costOf`).
 */
async function costFleet(
  fleet: ReturnType<typeof useFleet>,
  o: Oracle,
  n: number,
  name: string,
  rate: { limit: number; per: number; burst: number },
) {
  const options = { name, limit: 8, mode: 'leased', leaseMs: 2000, refreshMs: 500, rate } as const;
  const gates: LeasedSemaphore[] = [];
  for (let i = 0; i < n; i++) gates.push((await fleet.store()).semaphore(options));
  o.loop.reset(); // the slack counts the loop's stalls from here, not the stores' start
  const costs = new Map<string, number>();
  let id = 0;
  const send = (p: number, cost: number, timeout: number) => {
    const call = String(id++);
    costs.set(call, cost);
    return gates[p]!.run(
      async () => {
        const response = await o.fetch(`${o.origin}/?id=${call}`);
        await response.text();
      },
      { cost, timeout },
    );
  };
  return { send, costOf: (call: string) => costs.get(call) ?? 1 };
}

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

describeRedis('a leased rate with costs: the idle credit', () => {
  const fleet = useFleet('node-redis', redis);

  it('campaign seed 98056: a fresh fleet of 6 at rate 25/500 ms burst 8 with costs up to 3 uses 80% of the rate from one refresh after its first call (was 26-50%), within limit + burst', async () => {
    // Cost 3 needed a share of 7 (a burst share of 2) where the equal split is 4: heads met one
    // floor at a time, each cut counted for a window; the fleet sent 13-25 of 50 units in that
    // second. A share now sends a call its share and burst share carry once it has gone that
    // much beyond a full bucket: cost 3 needs a share of 3.
    const o = await oracle(cleanups);
    const rate = { limit: 25, per: 500, burst: 8 };
    const options = {
      name: 'costs',
      limit: 9,
      mode: 'leased',
      leaseMs: 2000,
      refreshMs: 500,
      rate,
    } as const;
    const callers = [3, 7, 12, 11, 8, 2];
    const gates: LeasedSemaphore[] = [];
    for (let i = 0; i < callers.length; i++) {
      gates.push((await fleet.store()).semaphore(options));
    }
    let seed = 98056;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const costs = new Map<string, number>();
    let id = 0;
    let busy = true;
    let first: number | undefined;
    let firstSent!: () => void;
    const started = new Promise<void>((resolve) => {
      firstSent = resolve;
    });
    const loops = callers.flatMap((n, p) =>
      Array.from({ length: n }, async () => {
        while (busy) {
          const cost = [1, 1, 2, 3][Math.floor(random() * 4)]!;
          const hold = 5 + random() * 25;
          const name = String(id++);
          costs.set(name, cost);
          await gates[p]!.run(
            async () => {
              first ??= performance.now();
              firstSent();
              const response = await o.fetch(`${o.origin}/?id=${name}`);
              await response.text();
              await new Promise((resolve) => setTimeout(resolve, hold));
            },
            { cost, timeout: 5000 },
          ).catch(() => undefined);
        }
      }),
    );
    try {
      await started;
      // One refresh and 300 ms after the first call, for a second: the campaign's fresh window.
      const from = first! + options.refreshMs + 300;
      await new Promise((resolve) => setTimeout(resolve, from + 1000 - performance.now() + 50));
      const units = [...o.arrivals]
        .filter(([, at]) => at >= from && at < from + 1000)
        .reduce((sum, [name]) => sum + (costs.get(name) ?? 1), 0);
      console.log(`fresh fleet of 6 at 25 per 500 ms: ${units} rate units in its second`);
      // 40-41 here (13-25 before). Each cost-3 call waits one interval of its share idle (a
      // burst share of 1 carries 2 at once): about 7 units sent in 8 intervals of pace, so not
      // far over 80%; asked here with room for a loaded machine.
      expect(units, 'rate units at the partner in that second').toBeGreaterThanOrEqual(0.7 * 50);
    } finally {
      busy = false;
      await Promise.all(loops);
    }
    expectPromiseKept(o, rate, (name) => costs.get(name) ?? 1);
  }, 20_000);
});

describeRedis('a leased rate with costs: no credit for time before a share', () => {
  const fleet = useFleet('node-redis', redis);

  it('campaign seed 72021, the fresh-share credit race: 6 fresh processes at rate 10/500 ms burst 2 each asking a call of cost 3 at once send no more than limit + burst in any window (each sent its call at once as credit for time it held no share: 13-14 units at a promise of 12)', async () => {
    const o = await oracle(cleanups);
    const rate = { limit: 10, per: 500, burst: 2 };
    const { send, costOf } = await costFleet(fleet, o, 6, 'fresh-credit', rate);
    // Each process: three calls of cost 3, then one of 1, in turn; all asked at once.
    await Promise.all(
      Array.from({ length: 6 }, async (_, p) => {
        for (const cost of [3, 3, 3, 1]) await send(p, cost, 10_000);
      }),
    );
    expect(o.arrivals.size).toBe(24);
    expectPromiseKept(o, rate, costOf);
  }, 30_000);
});

describeRedis('a leased rate with costs: a cut after the idle credit', () => {
  const fleet = useFleet('node-redis', redis);

  it('campaign seed 74047, the cut-after-idle-credit race: 8 processes at rate 4/500 ms burst 1, half sending calls of cost 2 (a share of 2 sends one on idle credit, then is cut to 0 as its floor goes) and half of cost 1, send no more than limit + burst in any window (the cut share was counted at 1 for the window after, and the unit it had sent went to another: 6 at a promise of 5)', async () => {
    const o = await oracle(cleanups);
    const rate = { limit: 4, per: 500, burst: 1 };
    const { send, costOf } = await costFleet(fleet, o, 8, 'cut-lead', rate);
    let busy = true;
    const loops = Array.from({ length: 16 }, async (_, k) => {
      const p = k % 8;
      const cost = p % 2 === 0 ? 2 : 1;
      while (busy) {
        await send(p, cost, 2000).catch(() => undefined);
        if (cost === 2) await new Promise((resolve) => setTimeout(resolve, 100));
      }
    });
    await new Promise((resolve) => setTimeout(resolve, 3000));
    busy = false;
    await Promise.all(loops);
    expect(o.arrivals.size).toBeGreaterThan(5);
    expectPromiseKept(o, rate, costOf);
  }, 30_000);
});

describeRedis('a leased rate with fewer calls per window than processes', () => {
  const fleet = useFleet('node-redis', redis);

  it('the lowest-ids race: 8 processes of calls of cost 1 at 4 per 500 ms each send between 1 and 7 s after the start (the calls left over at a level of 0 went to the lowest ids for good: four processes sent nothing after their first calls)', async () => {
    const o = await oracle(cleanups);
    const rate = { limit: 4, per: 500, burst: 1 };
    const { send, costOf } = await costFleet(fleet, o, 8, 'lowest-ids', rate);
    const start = performance.now();
    const sent = new Array<number>(8).fill(0);
    let busy = true;
    const loops = Array.from({ length: 16 }, async (_, k) => {
      const p = k % 8;
      while (busy) {
        await send(p, 1, 8000).catch(() => undefined);
        const at = performance.now() - start;
        if (at >= 1000 && at < 7000) sent[p]!++;
      }
    });
    await new Promise((resolve) => setTimeout(resolve, 7000));
    busy = false;
    await Promise.all(loops);
    console.log(`4 per 500 ms over 8: calls per process from 1 to 7 s: ${sent.join(' ')}`);
    // 48 calls in those 6 s at most, 6 per process if even (before: 0 for four, for good). The
    // fleet sends about 60% of its rate here (docs/rates.md: fewer calls per window than
    // processes, 60-75%): 13-15 calls in 1-4 s, 1-3 a process, and under load one process had none in
    // those 3 s (a CI run, 1 run in 4 beside four CPU hogs), so the window is 6 s.
    expect(Math.min(...sent), `calls per process: ${sent.join(' ')}`).toBeGreaterThanOrEqual(1);
    expectPromiseKept(o, rate, costOf);
  }, 30_000);
});
