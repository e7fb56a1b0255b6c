/**
 * A leased gate with fewer units than processes (fault campaign seed 99009): the units are
 * floors met oldest head first, and a process whose met head was served says so at once, so the
 * unit moves on in age order. The oracles: a partner counting its own concurrent requests, and
 * each caller's wait.
 */
import { Agent, fetch, request } from 'undici';
import { afterEach, expect, it } from 'vitest';
import { QueueTimeoutError } from '../../src/common/errors.js';
import type { LeasedSemaphore } from '../../src/redis/index.js';
import { type Partner, startPartner } from '../helpers/partner.js';
import { prng } from '../helpers/prng.js';
import { expectPromiseKept, oracle } from '../helpers/rate-oracle.js';
import { describeRedis } from '../helpers/redis-server.js';
import { privateRedis, useFleet } from './clients.js';
import { countingPartner } from './fifo-fleet.js';

const redis = privateRedis();
let partner: Partner | undefined;
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  await partner?.close();
  partner = undefined;
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * Callers that loop until `forMs` has passed: each takes a permit of its process's gate and calls
 * the partner for 5-30 ms (seeded). Returns each process's timeouts and first grant.
 */
async function busyCallers(
  gates: readonly LeasedSemaphore[],
  callers: readonly number[],
  partner: { origin: string; agent: Agent },
  seed: number,
  forMs: number,
): Promise<{ timeouts: number[]; firsts: number[] }> {
  const random = prng(seed);
  const until = performance.now() + forMs;
  const timeouts = callers.map(() => 0);
  const firsts = callers.map(() => Number.POSITIVE_INFINITY);
  await Promise.all(
    callers.flatMap((n, p) =>
      Array.from({ length: n }, async () => {
        while (performance.now() < until) {
          const delay = Math.round(5 + random() * 25);
          try {
            await gates[p]!.run(async () => {
              firsts[p] = Math.min(firsts[p]!, performance.now());
              const response = await request(`${partner.origin}/ok?delay=${delay}`, {
                dispatcher: partner.agent,
              });
              await response.body.text();
            });
          } catch (error) {
            if (!(error instanceof QueueTimeoutError)) throw error;
            timeouts[p]!++;
          }
        }
      }),
    ),
  );
  return { timeouts, firsts };
}

describeRedis('a leased gate with fewer units than processes', () => {
  const fleet = useFleet('node-redis', redis);

  it('campaign seed 99009, cap 1 over 4 busy processes: the unit moves on after each served head, and no caller waits out its deadline (it stayed with one process for half a lease: 58-75 calls in a row)', async () => {
    partner = await startPartner();
    const options = {
      name: 'one',
      limit: 1,
      maxQueue: 64,
      queueTimeout: 3500,
      mode: 'leased',
      leaseMs: 1500,
      refreshMs: 375,
    } as const;
    const callers = [4, 11, 5, 6];
    const gates: LeasedSemaphore[] = [];
    for (let i = 0; i < callers.length; i++) gates.push((await fleet.store()).semaphore(options));
    let seed = 99009;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    const warned: string[] = [];
    const onWarning = (warning: Error & { code?: string }) => {
      if (warning.code === 'HOSTGATE_LEASED_SMALL_CAP') warned.push(warning.message);
    };
    process.on('warning', onWarning);
    const waits: number[][] = callers.map(() => []);
    const timeouts: number[] = callers.map(() => 0);
    const order: number[] = [];
    const until = performance.now() + 3500;
    const loops = callers.flatMap((n, p) =>
      Array.from({ length: n }, async () => {
        while (performance.now() < until) {
          const asked = performance.now();
          const delay = Math.round(5 + random() * 25);
          try {
            await gates[p]!.run(async () => {
              waits[p]!.push(performance.now() - asked);
              order.push(p);
              const response = await fetch(`${partner!.url}/ok?delay=${delay}`);
              await response.text();
            });
          } catch (error) {
            if (!(error instanceof QueueTimeoutError)) throw error;
            timeouts[p]!++;
          }
        }
      }),
    );
    await Promise.all(loops);
    process.off('warning', onWarning);
    let run = 0;
    let longest = 0;
    for (let i = 0; i < order.length; i++) {
      run = i > 0 && order[i] === order[i - 1] ? run + 1 : 1;
      longest = Math.max(longest, run);
    }
    console.log(
      `cap 1 over 4: ${order.length} calls, longest run ${longest}, longest waits ${waits.map((w) => Math.round(Math.max(...w)))} ms`,
    );
    expect(partner.peak, 'the partner never saw 2 at once').toBe(1);
    // Loud, once per gate: the FIFO mode serves such a gate better.
    expect(warned.length).toBe(callers.length);
    expect(warned[0]).toMatch(
      /"one" \(mode 'leased'\) has [2-4] processes and a cap of 1: .*the FIFO mode/,
    );
    // What tells the fault: the unit stayed with one process for 58-75 calls in a row before
    // (red 2 of 2 with the served-head refresh taken out), 11-16 after, quiet or beside four CPU
    // hogs. The callers' deadline is the liveness bound: 2.5 s in the campaign's schedule (5-11
    // timeouts before), 3.5 s here, as the longest waits after are 1.4-1.9 s on a quiet machine
    // and a full parallel run of the suite took 4 callers past 2.5 s (11 callers in one process
    // wait 11 turns of the unit round 4 processes).
    expect(longest, 'the most calls in a row through one process').toBeLessThanOrEqual(30);
    expect(timeouts, 'callers that waited out their 3.5 s deadline, per process').toEqual([
      0, 0, 0, 0,
    ]);
    for (const [p, w] of waits.entries()) {
      expect(w.length, `process ${p} was served`).toBeGreaterThan(0);
    }
  }, 20_000);

  it("the handoff race: cap 3 over 6 busy processes, a unit let go while a floor met at the walk is owed to another process is taken at once (owed signal), not at that process's next ask: >= 70% of the cap in use, handoffs under 60 ms", async () => {
    // Before: each unit handed on sat idle 50-170 ms (95 ms mean) until the owed process's
    // head asked again (once per walk) and the releasing process said it let go (a timer step):
    // 80-83% of the cap in use.
    const counting = await countingPartner();
    const agent = new Agent({ connections: 64 });
    const cap = 3;
    const options = {
      name: 'handoff',
      limit: cap,
      maxQueue: 64,
      queueTimeout: 5000,
      mode: 'leased',
      leaseMs: 2000,
      refreshMs: 500,
    } as const;
    const gates: LeasedSemaphore[] = [];
    for (let i = 0; i < 6; i++) gates.push((await fleet.store()).semaphore(options));
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return seed / 2147483648;
    };
    /** (time, +1 / -1, process): each call's start and end, as the gates saw them. */
    const events: [number, number, number][] = [];
    const until = performance.now() + 3500;
    try {
      await Promise.all(
        gates.flatMap((gate, p) =>
          Array.from({ length: 6 }, async () => {
            while (performance.now() < until) {
              const delay = Math.round(20 + random() * 80);
              await gate.run(async () => {
                events.push([performance.now(), 1, p]);
                try {
                  const response = await request(`${counting.origin}/ok?delay=${delay}`, {
                    dispatcher: agent,
                  });
                  await response.body.text();
                } finally {
                  events.push([performance.now(), -1, p]);
                }
              });
            }
          }),
        ),
      );
      expect(counting.peak(), 'the partner never saw more than the cap').toBeLessThanOrEqual(cap);
      const first = counting.arrivals[0]!;
      const [from, to] = [first + 1000, first + 3000];
      // A handoff: in flight falls from the cap, and another process's call fills it.
      const gaps: number[] = [];
      let level = 0;
      let fell: [number, number] | undefined;
      for (const [t, d, p] of events) {
        if (t >= from && t <= to) {
          if (d < 0 && level === cap) fell = [t, p];
          else if (d > 0 && level === cap - 1 && fell !== undefined) {
            if (p !== fell[1]) gaps.push(t - fell[0]);
            fell = undefined;
          }
        }
        level += d;
      }
      const used = counting.meanActive(from, to) / cap;
      const mean = gaps.reduce((a, b) => a + b, 0) / Math.max(1, gaps.length);
      console.log(
        `cap 3 over 6: ${(used * 100).toFixed(1)}% in use, ${gaps.length} handoffs, ${mean.toFixed(1)} ms mean`,
      );
      expect(gaps.length, 'units moved between processes').toBeGreaterThan(0);
      expect(mean, 'mean handoff (ms)').toBeLessThan(60);
      // The handoff's length is what tells the race (95 ms mean before); the use it leaves is
      // 86-92% on a quiet machine or beside CPU hogs, 79.5-89% in a full parallel run (80-83%
      // before the fix, so no bound on it tells the race): a floor, well under both.
      expect(used).toBeGreaterThanOrEqual(0.7);
    } finally {
      await counting.close();
      await agent.close();
    }
  }, 20_000);

  it('the rate that sat with processes holding no unit: cap 1 over 3 busy processes beside a rate of 80/s the cap alone never reaches, the partner sees the calls the cap allows and no caller waits out its deadline (the rate stayed in the shares of processes with none: 5 calls a second; each ask for a share put off the end of the turn)', async () => {
    // Before: each process asked for its queue's and its last turn's calls, so the rate sat in
    // the shares of the processes waiting for the unit while its holder sent at its own share
    // of 3-9 calls a second (9-10 calls in these 2 s, 85-88 after); and the unit's new holder
    // grew its share a doubling per refresh from the equal split of 3 processes.
    const counting = await countingPartner();
    const agent = new Agent({ connections: 16 });
    const rate = { limit: 80, per: 1000, burst: 3 };
    const options = {
      name: 'capless-rate',
      limit: 1,
      maxQueue: 64,
      queueTimeout: 2900,
      mode: 'leased',
      leaseMs: 2000,
      rate,
    } as const;
    const gates: LeasedSemaphore[] = [];
    for (let i = 0; i < 3; i++) gates.push((await fleet.store()).semaphore(options));
    try {
      const { timeouts } = await busyCallers(
        gates,
        [3, 9, 1],
        { origin: counting.origin, agent },
        92045,
        4000,
      );
      expect(counting.peak(), 'the partner never saw 2 at once').toBe(1);
      const arrivals = counting.arrivals;
      for (let i = 0; i + rate.limit + rate.burst < arrivals.length; i++) {
        const span = arrivals[i + rate.limit + rate.burst]! - arrivals[i]!;
        expect(span, 'no window of 1 s holds more than limit + burst').toBeGreaterThanOrEqual(1000);
      }
      // From one refresh after the first call (a first use waits a window): 2 s.
      const from = arrivals[0]! + 1000;
      const sent = arrivals.filter((t) => t >= from && t < from + 2000).length;
      console.log(`cap 1 over 3 beside 80/s: ${sent} calls in 2 s`);
      expect(sent).toBeGreaterThanOrEqual(40);
      // A met head's turn is counted from the answer that gave it the unit: counted from the
      // last refresh, each ask for its rate share put the turn's end off (0.9 s turns), and the
      // third process's first turn came after 2.9 s (campaign seed 92045).
      expect(timeouts, 'callers that waited out their 2.9 s deadline, per process').toEqual([
        0, 0, 0,
      ]);
    } finally {
      await counting.close();
      await agent.close();
    }
  }, 20_000);

  it('the shares handed along with the unit: cap 1 over 2 busy processes at a binding rate of 3 per 500 ms, each new holder sends no sooner than the slot of the share given back (each took its share from none with a full bucket and sent at once: 4 calls in 405-470 ms at a promise of 3)', async () => {
    const o = await oracle(cleanups);
    const rate = { limit: 3, per: 500, burst: 0 };
    const options = {
      name: 'handed',
      limit: 1,
      maxQueue: 64,
      queueTimeout: 2000,
      mode: 'leased',
      leaseMs: 1500,
      refreshMs: 375,
      rate,
    } as const;
    const gates = [
      (await fleet.store()).semaphore(options),
      (await fleet.store()).semaphore(options),
    ];
    const random = prng(87);
    const until = performance.now() + 3000;
    let id = 0;
    await Promise.all(
      gates.flatMap((gate) =>
        Array.from({ length: 4 }, async () => {
          while (performance.now() < until) {
            try {
              await gate.run(async () => {
                await (await o.fetch(`${o.origin}/?id=${id++}`)).text();
                // The unit held a while longer, as a call of up to 18 ms would.
                await new Promise((resolve) => setTimeout(resolve, Math.round(random() * 18)));
              });
            } catch (error) {
              if (!(error instanceof QueueTimeoutError)) throw error;
            }
          }
        }),
      ),
    );
    expect(o.arrivals.size, 'calls sent').toBeGreaterThan(8);
    expectPromiseKept(o, rate);
  }, 20_000);

  it('the turn as long as with a unit per process: cap 2 over 7 busy processes, every process has its first turn within 3 s of the first call (0.8-1.2 s; 3.6-3.7 s before, turns of half an interval: callers asked at the start timed out at 2.5 s, campaign seeds 92061, 92077)', async () => {
    const counting = await countingPartner();
    const agent = new Agent({ connections: 32 });
    const options = {
      name: 'turns',
      limit: 2,
      maxQueue: 64,
      queueTimeout: 2520,
      mode: 'leased',
      leaseMs: 2000,
    } as const;
    const callers = [6, 11, 10, 5, 10, 3, 1];
    const gates: LeasedSemaphore[] = [];
    for (const _ of callers) gates.push((await fleet.store()).semaphore(options));
    try {
      const { firsts } = await busyCallers(
        gates,
        callers,
        { origin: counting.origin, agent },
        92077,
        3500,
      );
      expect(counting.peak(), 'the partner never saw more than the cap').toBeLessThanOrEqual(2);
      const start = Math.min(...firsts);
      const late = firsts.map((t) => Math.round(t - start));
      console.log(`cap 2 over 7: first turns ${late.join(', ')} ms after the first call`);
      // 0.8-1.2 s quiet or beside CPU hogs; one full parallel run of the suite 2.6 s.
      expect(Math.max(...late), 'the last process to have its first turn (ms)').toBeLessThan(3000);
    } finally {
      await counting.close();
      await agent.close();
    }
  }, 20_000);
});
