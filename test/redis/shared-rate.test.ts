/**
 * Request rates on FIFO shared gates (issue 26): GCRA's timestamp in the gate's meta hash, taken
 * by the script that grants the permit, at the head of the one queue across processes. In these
 * tests one store stands for one process (a client of its own); the multiprocess precision run
 * is `npm run bench:rate`. The oracle is a real partner's own log of arrival times.
 */
import { createClient } from 'redis';
import { afterEach, expect, it } from 'vitest';
import { RateLimitedError, SharedLayoutError } from '../../src/common/errors.js';
import { HostLimiter, limitFetch } from '../../src/index.js';
import type { SharedSemaphore } from '../../src/redis/index.js';
import { expectPromiseKept, oracle } from '../helpers/rate-oracle.js';
import { describeRedis } from '../helpers/redis-server.js';
import { maxInWindow } from '../helpers/windows.js';
import { privateRedis, useFleet } from './clients.js';

const redis = privateRedis();
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/**
 * The longest Redis round trip seen while `run` goes (a PING every 5 ms on a client of its
 * own): a grant in Redis reaches its caller up to two round trips later (a wake-up, then its
 * claim), so windows over the partner's log are shortened by that too on a loaded machine.
 */
async function withRoundTrips<T>(url: string, run: () => Promise<T>): Promise<[T, number]> {
  const client = createClient({ url });
  client.on('error', () => {});
  await client.connect();
  let worst = 0;
  let stop = false;
  const pinger = (async () => {
    while (!stop) {
      const sent = performance.now();
      await client.ping();
      worst = Math.max(worst, performance.now() - sent);
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  })();
  try {
    return [await run(), worst];
  } finally {
    stop = true;
    await pinger;
    client.destroy();
  }
}

describeRedis('request rates on FIFO shared gates', () => {
  const fleet = useFleet('node-redis', redis);
  const options = { leaseMs: 5000, heartbeatMs: 1000, commandTimeoutMs: 2000 };

  it('two processes share one rate: the partner never sees more than limit + burst in any window of per ms, and the pace holds', async () => {
    const o = await oracle(cleanups);
    const rate = { limit: 20, per: 200, burst: 3 }; // 100 a second across both
    const stores = [await fleet.store(options), await fleet.store(options)];
    const limiters = stores.map(
      (store) =>
        new HostLimiter({
          store,
          partners: [
            { name: 'p', hosts: [o.origin], limit: 8, queueTimeout: 10_000, shared: true, rate },
          ],
        }),
    );
    const fetches = limiters.map((limiter) => limitFetch(o.fetch, limiter));
    const calls = 90;
    const [statuses, roundTrip] = await withRoundTrips(redis().url, () =>
      Promise.all(
        Array.from({ length: calls }, (_, i) =>
          fetches[i % 2]!(`${o.origin}/?id=${i}`).then(async (r) => {
            await r.text();
            return r.status;
          }),
        ),
      ),
    );
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(o.arrivals.size).toBe(calls);
    const { times, spreadMs } = expectPromiseKept(o, rate, undefined, 2 * roundTrip);
    // Goodput after the burst: never above the rate (give or take the slack), and near it
    // on a quiet machine; a busy one only slows us down.
    const paced = calls - rate.limit - rate.burst;
    const span = times[calls - 1]! - times[0]!;
    expect((paced / (span + spreadMs)) * 1000).toBeLessThanOrEqual(100);
    expect((paced / span) * 1000).toBeGreaterThan(100 * 0.3);
    for (const limiter of limiters) {
      const gate = limiter.gate('p') as SharedSemaphore;
      expect(gate.held).toBe(0);
      expect(gate.stats().rate).toMatchObject({
        limit: 20,
        per: 200,
        burst: 3,
        shedRateLimited: 0,
      });
    }
  });

  it('a head whose permit is free waits for its slot and claims it on its own timer: no release comes', async () => {
    const store = await fleet.store(options);
    const gate = store.semaphore({ name: 'timer', limit: 5, rate: { limit: 10, per: 1000 } });
    const first = await gate.acquire();
    const start = performance.now();
    const second = await gate.acquire(); // nothing is released: only its slot, 100 ms on
    const waited = performance.now() - start;
    expect(waited).toBeGreaterThanOrEqual(80); // the slot is Redis's clock; ours may lag a bit
    expect(waited).toBeLessThan(900);
    expect(gate.held).toBe(2);
    first.release();
    second.release();
  });

  it('sheds at join with RateLimitedError and the exact retryAfterMs when the slot comes after the deadline', async () => {
    const store = await fleet.store(options);
    const gate = store.semaphore({ name: 'shed', limit: 5, rate: { limit: 1, per: 1000 } });
    const first = await gate.acquire();
    const error = await gate.acquire({ timeout: 50 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(RateLimitedError);
    expect(error).toMatchObject({ code: 'HOSTGATE_RATE_LIMITED', partner: 'shed' });
    const retryAfterMs = (error as RateLimitedError).retryAfterMs;
    expect(retryAfterMs).toBeGreaterThan(50);
    expect(retryAfterMs).toBeLessThanOrEqual(1000);
    expect(gate.stats().rate).toMatchObject({ shedRateLimited: 1, backlog: 0 });
    expect(gate.queued).toBe(0);
    first.release();
  });

  it('costs: a call of cost 3 takes three slots, and settleCost moves the shared timestamp (a refund lets the next go sooner, a debt later)', async () => {
    const [a, b] = [await fleet.store(options), await fleet.store(options)];
    // A slot every 500 ms: the steps below hold through a stall of a few hundred ms.
    const rate = { limit: 2, per: 1000, burst: 3 };
    const ga = a.semaphore({ name: 'cost', limit: 5, rate });
    const gb = b.semaphore({ name: 'cost', limit: 5, rate });
    const heavy = await ga.acquire({ cost: 3 });
    expect(heavy.cost).toBe(3);
    heavy.release();
    // One slot left of the burst: B's next call of cost 1 goes, the one after waits ~500 ms.
    (await gb.acquire()).release();
    const refused = await gb.acquire({ timeout: 40 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(RateLimitedError);
    // A's call used 0 of its 3: the refund (from the other process) gives B three slots now.
    heavy.settleCost(0);
    await a.settled(); // the settle's script answered
    const again = await gb.acquire({ timeout: 40 });
    again.release();
    expect(gb.stats().rate!.nextSlotMs).toBeLessThanOrEqual(500);
    // A debt: B's call really cost 4 more: the next call waits for ~4 slots.
    again.settleCost(5);
    await b.settled();
    const late = await gb.acquire({ timeout: 100 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(late).toBeInstanceOf(RateLimitedError);
    expect((late as RateLimitedError).retryAfterMs).toBeGreaterThan(200);
    expect(() => again.settleCost(-1)).toThrow(TypeError);
  });

  it('the rate lives in Redis: a process asking for another one gates by the stored rate and warns; setSharedRate changes it for all', async () => {
    const [a, b] = [await fleet.store(options), await fleet.store(options)];
    const ga = a.semaphore({ name: 'stored', limit: 5, rate: { limit: 10, per: 1000 } });
    (await ga.acquire()).release();
    const warnings: string[] = [];
    const onWarning = (w: Error & { code?: string }) => {
      if (w.code === 'HOSTGATE_SHARED_RATE_MISMATCH') warnings.push(w.message);
    };
    process.on('warning', onWarning);
    cleanups.push(() => process.off('warning', onWarning));
    const gb = b.semaphore({ name: 'stored', limit: 5, rate: { limit: 1000, per: 1000 } });
    (await gb.acquire()).release();
    expect(gb.rate).toMatchObject({ limit: 10, per: 1000, burst: 0 });
    await new Promise((resolve) => setImmediate(resolve));
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(/Redis holds rate 10 per 1000 ms \(burst 0\)/);
    await ga.setSharedRate({ limit: 50, per: 1000, burst: 5 });
    (await gb.acquire()).release();
    expect(gb.rate).toMatchObject({ limit: 50, burst: 5 });
    await expect(
      a.semaphore({ name: 'plain', limit: 1 }).setSharedRate({ limit: 1 }),
    ).rejects.toThrow(/has no rate/);
  });

  it('layout: a process without a rate is refused on a gate with one, loudly; a rated process takes over a gate kept without', async () => {
    const [a, b, c] = [
      await fleet.store(options),
      await fleet.store(options),
      await fleet.store(options),
    ];
    const plain = a.semaphore({ name: 'layout', limit: 3 });
    (await plain.acquire()).release();
    await a.settled();
    const rated = b.semaphore({ name: 'layout', limit: 3, rate: { limit: 5 } });
    (await rated.acquire()).release();
    expect(await redis().command('HGET', 'test:{layout}:m', 'v')).toBe('fifo/1+rate');
    const refused = await plain.acquire().catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(SharedLayoutError);
    expect(refused).toMatchObject({ found: 'fifo/1+rate', expected: 'fifo/1' });
    const late = c.semaphore({ name: 'layout', limit: 3 });
    await expect(late.acquire()).rejects.toBeInstanceOf(SharedLayoutError);
  });

  it('after a FLUSHDB the rate restarts full: the most in a window that spans the loss is measured, within limit + 2 × burst + 1', async () => {
    const rate = { limit: 10, per: 500, burst: 2 }; // 20 a second
    const known = await fleet.store({ ...options, leaseMs: 300, heartbeatMs: 100 });
    const gk = known.semaphore({ name: 'flush', limit: 20, queueTimeout: 5000, rate });
    const grants: number[] = [];
    const take = async (gate: SharedSemaphore, n: number) => {
      await Promise.all(
        Array.from({ length: n }, () =>
          gate.acquire().then((p) => {
            grants.push(performance.now());
            p.release();
          }),
        ),
      );
    };
    await take(gk, 12); // the burst, then the pace
    await redis().command('FLUSHDB');
    // A process that never used the gate cannot tell the loss from a first use: it waits
    // firstUseWaitMs (100 ms), then the timestamp starts full.
    const newcomer = await fleet.store(options);
    const gn = newcomer.semaphore({ name: 'flush', limit: 20, queueTimeout: 5000, rate });
    await take(gn, 6);
    grants.sort((x, y) => x - y);
    const most = maxInWindow(grants, rate.per);
    // Measured: the pre-flush window's pace plus a full burst after the 100 ms window.
    expect(most).toBeLessThanOrEqual(rate.limit + 2 * rate.burst + 1);
    console.log(
      `[shared-rate] most in a window of ${rate.per} ms across a FLUSHDB: ${most} (promise ${rate.limit + rate.burst})`,
    );
  });
});
