/**
 * A leased gate's shapes that work but move units through Redis, each named once per gate and
 * process by a process warning (docs/shared-gates.md, docs/rates.md): fewer units than
 * processes or a call heavier than an equal block (`HOSTGATE_LEASED_SMALL_CAP`), and a call that
 * costs more than an equal share of the rate sends at once (`HOSTGATE_LEASED_SMALL_BURST`). The
 * fault campaign's known-open limits are these shapes (test/chaos/known-open.json); a gate that
 * fits is not warned about.
 */
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { LeasedSemaphore } from '../../src/redis/index.js';
import { describeRedis } from '../helpers/redis-server.js';
import { privateRedis, useFleet } from './clients.js';

const redis = privateRedis();
let warned: { code: string; message: string }[] = [];
const onWarning = (warning: Error & { code?: string }) => {
  if (warning.code?.startsWith('HOSTGATE_LEASED_'))
    warned.push({ code: warning.code, message: warning.message });
};
beforeEach(() => {
  warned = [];
  process.on('warning', onWarning);
});
afterEach(() => {
  process.off('warning', onWarning);
});

describeRedis('the leased gate warns of shapes that move its units through Redis', () => {
  const fleet = useFleet('node-redis', redis);
  const base = { limit: 4, mode: 'leased', leaseMs: 1000, refreshMs: 200 } as const;

  async function twoGates(name: string, extra: object = {}): Promise<LeasedSemaphore[]> {
    const options = { ...base, name, ...extra };
    return [(await fleet.store()).semaphore(options), (await fleet.store()).semaphore(options)];
  }

  /**
   * Process b holds `hold` units; process a asks `weight` and `cost`, a head that waits for a
   * refresh to report it when its block (or its share) cannot serve it at once; b lets one unit
   * go and a is granted (a block grows only by a refresh's answer).
   */
  async function head(gates: LeasedSemaphore[], hold: number, weight: number, cost = 1) {
    const [a, b] = gates as [LeasedSemaphore, LeasedSemaphore];
    const held = [];
    for (let i = 0; i < hold; i++) held.push(await b.acquire());
    const asked = a.acquire({ weight, timeout: 5000, ...(cost === 1 ? {} : { cost }) });
    held.pop()?.release();
    (await asked).release();
    for (const permit of held) permit.release();
    await new Promise((resolve) => setImmediate(resolve)); // a warning is emitted a tick later
  }

  /** Heads until the first warning (at most 8), then two more. */
  async function headsPastWarning(
    gates: LeasedSemaphore[],
    hold: number,
    weight: number,
    cost = 1,
  ) {
    // Both processes in Redis's count as a's last answer gave it (an idle process refreshes
    // every half lease): the rate's check reads that count.
    (await gates[1]!.acquire()).release();
    const deadline = performance.now() + 5000;
    while (gates[0]!.stats().shared.processes < 2 && performance.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 5));
    for (let i = 0; i < 8 && warned.length === 0; i++) await head(gates, hold, weight, cost);
    await head(gates, hold, weight, cost);
    await head(gates, hold, weight, cost);
  }

  it('a call of weight 3 at cap 4 over 2 processes (equal blocks of 2): HOSTGATE_LEASED_SMALL_CAP, once, naming the weight', async () => {
    const gates = await twoGates('heavy');
    await headsPastWarning(gates, 2, 3);
    expect(warned.map((w) => w.code)).toEqual(['HOSTGATE_LEASED_SMALL_CAP']);
    expect(warned[0]!.message).toMatch(
      /"heavy" \(mode 'leased'\) has 2 processes and a cap of 4: a call of weight 3 is more than an equal block \(at most 2\).*the FIFO mode/,
    );
  });

  it('a call of weight 2 at cap 4 over 2 processes fits an equal block: no warning', async () => {
    const gates = await twoGates('fits');
    await head(gates, 3, 2);
    expect(gates[0]!.stats().shared.demand, 'the head was reported').toBeGreaterThanOrEqual(2);
    expect(warned).toEqual([]);
  });

  it('a call of cost 3 on rate 10/s burst 2 over 2 processes (an equal share sends 2 at once): HOSTGATE_LEASED_SMALL_BURST, once, with the burst that serves it', async () => {
    const gates = await twoGates('costly', { rate: { limit: 10, per: 1000, burst: 2 } });
    await headsPastWarning(gates, 1, 1, 3);
    expect(warned.map((w) => w.code)).toEqual(['HOSTGATE_LEASED_SMALL_BURST']);
    expect(warned[0]!.message).toMatch(
      /"costly" \(mode 'leased', rate 10 per 1000 ms, burst 2\) has 2 processes and a call of cost 3: an equal share of the rate sends at most 2 at once, .* a burst of at least 4 serves such calls at once/,
    );
  });

  it('calls of cost 2 on the same rate fit an equal share: no warning', async () => {
    const gates = await twoGates('cheap', { rate: { limit: 10, per: 1000, burst: 2 } });
    const [a, b] = gates as [LeasedSemaphore, LeasedSemaphore];
    const other = await b.acquire(); // a second process, for Redis's count
    // Cost 2 at a share of 5/s: each call after the first waits two intervals (400 ms) for its
    // slot, a head through a refresh or two (every 200 ms while busy).
    for (let i = 0; i < 4; i++) (await a.acquire({ cost: 2, timeout: 5000 })).release();
    other.release();
    await new Promise((resolve) => setImmediate(resolve));
    expect(a.stats().shared.rate?.demand, 'a demand of cost 2 was reported').toBeGreaterThanOrEqual(
      2,
    );
    expect(warned).toEqual([]);
  });
});
