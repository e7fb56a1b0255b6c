/**
 * Request rates on leased shared gates (issue 26, Doorman's leased capacity): each process sends
 * at its *share* of the rate, whole calls per `per`, paced (GCRA), granted by the refresh script
 * by demand; Redis counts what a share that went down may still send beyond its new pace (one
 * call and the burst it lost, for a window; the old share itself while Redis's cut is on its
 * way), and a lapsed process's last share for a window after its lease (issue 32, item 6). The oracles: a real partner's own log of arrival times, and Redis's
 * own entries (Σ counted shares ≤ the rate's limit after every refresh). One store stands for
 * one process (a client of its own).
 */
import { afterEach, expect, it } from 'vitest';
import { QueueTimeoutError } from '../../src/common/errors.js';
import { HostLimiter, limitFetch } from '../../src/index.js';
import {
  LEASED_RATE_LAYOUT,
  type LeasedSemaphore,
  SharedLayoutError,
} from '../../src/redis/index.js';
import { expectPromiseKept, oracle } from '../helpers/rate-oracle.js';
import type { RedisServer } from '../helpers/redis-server.js';
import { describeRedis } from '../helpers/redis-server.js';
import { until } from '../helpers/until.js';
import { privateRedis, untilAsync, useFleet } from './clients.js';

const redis = privateRedis();
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});
/** Short leases and intervals: every step waits on a refresh, never on a sleep. */
const LEASE = { leaseMs: 1000, refreshMs: 100 } as const;

interface RateEntry {
  id: string;
  expiry: number;
  share: number;
  counted: number;
  until: number;
}

/** A leased gate's rate as Redis holds it: every entry's rate part, `_r`, and Redis's clock. */
async function rateState(server: RedisServer, gate: string) {
  const flat = (await server.command('HGETALL', `test:{${gate}}:l`)) as string[];
  const [sec, usec] = ((await server.command('TIME')) as string[]).map(Number) as [number, number];
  const entries: RateEntry[] = [];
  let sum = 0;
  for (let i = 0; i < flat.length; i += 2) {
    const id = flat[i]!;
    if (id === '_r') sum = Number(flat[i + 1]);
    if (id.startsWith('_')) continue;
    const [expiry, , , , share, counted, until] = flat[i + 1]!.split(' ').map(Number) as number[];
    entries.push({ id, expiry: expiry!, share: share!, counted: counted!, until: until! });
  }
  return { entries, sum, now: sec * 1000 + Math.floor(usec / 1000) };
}

/**
 * Σ over entries of what Redis counts for each at `now` (the script's `countedOf`, restated):
 * the higher share held before a cut in full until a window before its hold ends (the cut on
 * its way), then the share, one call more and the burst the cut took, until the hold ends.
 */
const counted = (
  { entries, now }: { entries: RateEntry[]; now: number },
  rate: { limit: number; per: number; burst?: number },
) => {
  const burstOf = (units: number) => Math.floor(((rate.burst ?? 0) * units) / rate.limit);
  return entries.reduce((sum, e) => {
    if (e.until <= now) return sum + e.share;
    if (e.until - rate.per > now) return sum + Math.max(e.share, e.counted);
    if (e.counted <= e.share) return sum + e.share;
    return sum + e.share + 1 + Math.max(0, burstOf(e.counted) - burstOf(e.share));
  }, 0);
};

describeRedis('request rates on leased shared gates', () => {
  const fleet = useFleet('node-redis', redis);

  it('two processes lease one rate: the partner never sees more than limit + burst in any window, and Redis never counts more than the limit', async () => {
    const o = await oracle(cleanups);
    const rate = { limit: 20, per: 200, burst: 4 }; // 100 a second across both
    const stores = [await fleet.store(), await fleet.store()];
    const limiters = stores.map(
      (store) =>
        new HostLimiter({
          store,
          partners: [
            {
              name: 'p',
              hosts: [o.origin],
              limit: 8,
              queueTimeout: 15_000,
              shared: { mode: 'leased', ...LEASE },
              rate,
            },
          ],
        }),
    );
    const fetches = limiters.map((limiter) => limitFetch(o.fetch, limiter));
    const calls = 120;
    let done = false;
    let reads = 0;
    // Redis's own state while the calls run: Σ counted ≤ limit at every read.
    const watcher = (async () => {
      while (!done) {
        const state = await rateState(redis(), 'p');
        expect(counted(state, rate)).toBeLessThanOrEqual(rate.limit);
        expect(state.sum).toBeLessThanOrEqual(rate.limit);
        reads++;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    })();
    const statuses = await Promise.all(
      Array.from({ length: calls }, (_, i) =>
        fetches[i % 2]!(`${o.origin}/?id=${i}`).then(async (r) => {
          await r.text();
          return r.status;
        }),
      ),
    );
    done = true;
    await watcher;
    expect(reads).toBeGreaterThan(5);
    expect(statuses.every((s) => s === 200)).toBe(true);
    expect(o.arrivals.size).toBe(calls);
    const { times, spreadMs } = expectPromiseKept(o, rate);
    // The pace across both: never above the rate (give or take the slack); on a busy machine
    // only slower.
    const span = times[calls - 1]! - times[0]!;
    expect(((calls - rate.limit - rate.burst) / (span + spreadMs)) * 1000).toBeLessThanOrEqual(100);
    for (const limiter of limiters) {
      const gate = limiter.gate('p') as LeasedSemaphore;
      expect(gate.held).toBe(0);
      expect(gate.stats().rate).toMatchObject({ limit: 20, per: 200, burst: 4 });
      expect(gate.stats().shared.rate).toBeDefined();
    }
  });

  it('moves the rate to the busy process, shares it fairly when both are busy, and counts one call more for a window after a share went down', async () => {
    const [a, b] = [await fleet.store(), await fleet.store()];
    const rate = { limit: 10, per: 500 };
    const options = { name: 'shift', limit: 50, mode: 'leased', rate, ...LEASE } as const;
    const [ga, gb] = [a.semaphore(options), b.semaphore(options)];
    const load = (gate: LeasedSemaphore, stop: () => boolean) => {
      const loop = async () => {
        while (!stop()) (await gate.acquire({ timeout: 10_000 })).release();
      };
      return Promise.all([loop(), loop(), loop()]);
    };
    let stopA = false;
    let stopB = false;
    const runA = load(ga, () => stopA);
    await until(() => ga.stats().shared.rate!.share === 10, 'a alone leasing the whole rate');
    expect(gb.stats().shared.rate!.share).toBe(0);
    const runB = load(gb, () => stopB);
    await until(
      () => ga.stats().shared.rate!.share === 5 && gb.stats().shared.rate!.share === 5,
      'both busy: five calls per 500 ms each',
    );
    let state = await rateState(redis(), 'shift');
    expect(counted(state, rate)).toBeLessThanOrEqual(10);
    stopA = true;
    await runA;
    await until(
      () => gb.stats().shared.rate!.share === 10,
      'b leasing the whole rate once a is idle',
    );
    state = await rateState(redis(), 'shift');
    expect(counted(state, rate)).toBeLessThanOrEqual(10);
    stopB = true;
    await runB;
    // b's share goes down as it idles (b cuts it itself, before asking): Redis counts the new
    // share and one call more (its TAT was set at the faster pace) for one window, not the old
    // share: the rest is the others' at once.
    await untilAsync(async () => {
      const s = await rateState(redis(), 'shift');
      const mine = s.entries.find((e) => e.share < e.counted);
      return (
        mine !== undefined &&
        mine.until > s.now &&
        mine.until - rate.per <= s.now &&
        counted(s, rate) === mine.share + 1
      );
    }, 'a share that went down counted one call over it, for one window');
  });

  it("a closed process's share goes to the other at once, but for what it may have sent ahead of its pace (burst + 1 calls), counted for a window", async () => {
    const [a, b] = [await fleet.store(), await fleet.store()];
    const rate = { limit: 6, per: 400 };
    const options = { name: 'close', limit: 20, mode: 'leased', rate, ...LEASE } as const;
    const ga = a.semaphore(options);
    const gb = b.semaphore(options);
    const stop = { a: false, b: false };
    const busy = async (gate: LeasedSemaphore, which: 'a' | 'b') => {
      while (!stop[which]) (await gate.acquire({ timeout: 10_000 })).release();
    };
    const runA = busy(ga, 'a');
    await until(() => ga.stats().shared.rate!.share === 6, 'a leasing the whole rate');
    const runB = busy(gb, 'b').catch(() => {}); // a failed test closes the store under it
    stop.a = true;
    await runA;
    const closedAt = performance.now();
    const before = (await rateState(redis(), 'close')).now;
    await a.close();
    const state = await rateState(redis(), 'close');
    // Its entry is gone; what it may have sent ahead of its pace stays counted for a window:
    // its TAT runs at most burst + 1 intervals ahead (burst 0: one call), in '<id>~0'.
    expect(state.entries.find((e) => e.id === a.processId)).toBeUndefined();
    const tail = state.entries.filter((e) => e.id.startsWith(`${a.processId}~`));
    expect(tail.every((e) => e.share === 0)).toBe(true);
    expect(tail.reduce((sum, e) => sum + e.counted, 0)).toBe(1);
    expect(Math.max(...tail.map((e) => e.until))).toBeGreaterThanOrEqual(before + rate.per);
    // The rest goes to b within its next refreshes, not as a's last sends leave the window (a
    // b whose next refresh came after the tail's window, on a loaded machine, goes to 6 at once:
    // waiting for exactly 5 then timed out in one full run).
    await until(() => gb.stats().shared.rate!.share >= 5, 'b leasing all but the tail');
    await until(() => gb.stats().shared.rate!.share === 6, 'b leasing the whole rate');
    // The last call not before a window after the close.
    expect(performance.now() - closedAt).toBeGreaterThanOrEqual(rate.per - 50);
    stop.b = true;
    await runB;
  });

  it("the replacement's first call: a share taken from a closed process's parked place goes on from that process's pace, not from a fresh one (campaign seed 92287: a rolling deploy sent 6 in a window at a promise of 5)", async () => {
    const o = await oracle(cleanups);
    // Two busy processes at 2 calls a window each; one closes just after a call and a
    // replacement starts at once. Before: the replacement took the parked share with a fresh
    // pace and sent at once, so a window held the closed process's last two calls, its first
    // and the other's two: 5 at a promise of 4.
    const rate = { limit: 4, per: 1000, burst: 0 };
    const limiterOf = (store: Awaited<ReturnType<typeof fleet.store>>) =>
      new HostLimiter({
        store,
        partners: [
          {
            name: 'roll',
            hosts: [o.origin],
            limit: 8,
            queueTimeout: 15_000,
            shared: { mode: 'leased', leaseMs: 2000, refreshMs: 200 },
            rate,
          },
        ],
      });
    const [a, c] = [limiterOf(await fleet.store()), limiterOf(await fleet.store())];
    let id = 0;
    const stop = { a: false, b: false, c: false };
    const busy = async (limiter: HostLimiter, which: 'a' | 'b' | 'c') => {
      const f = limitFetch(o.fetch, limiter);
      while (!stop[which]) await (await f(`${o.origin}/?id=${which}${id++}`)).text();
    };
    const runs = [busy(a, 'a'), busy(c, 'c')];
    const shareOf = (limiter: HostLimiter) =>
      (limiter.gate('roll') as LeasedSemaphore).stats().shared.rate?.share ?? 0;
    await until(() => shareOf(a) === 2 && shareOf(c) === 2, 'two shares of 2');
    // a's next call after this one is its last: it stops just after sending.
    const sent = o.arrivals.size;
    await until(() => o.arrivals.size > sent + 2, 'a few more calls');
    stop.a = true;
    await runs[0];
    await (a.gate('roll') as LeasedSemaphore).close();
    const b = limiterOf(await fleet.store());
    const runB = busy(b, 'b');
    await until(() => [...o.arrivals.keys()].some((k) => k.startsWith('b')), "b's first call");
    const firstB = Math.min(
      ...[...o.arrivals].filter(([k]) => k.startsWith('b')).map(([, t]) => t),
    );
    const lastA = Math.max(...[...o.arrivals].filter(([k]) => k.startsWith('a')).map(([, t]) => t));
    // Its pace was 500 ms a call: the replacement's first call no sooner.
    expect(firstB - lastA, "b's first call after a's last (ms)").toBeGreaterThanOrEqual(450);
    await until(() => o.arrivals.size > sent + 8, 'calls after the roll');
    stop.b = stop.c = true;
    await Promise.all([runB, runs[1]]);
    expectPromiseKept(o, rate);
  });

  it('Redis paused: a busy process stops sending once its refresh fails (Redis may have shrunk its share) and sends again when Redis answers', async () => {
    const store = await fleet.store({ commandTimeoutMs: 200, onStoreError: 'local' });
    const gate = store.semaphore({
      name: 'paused',
      limit: 50,
      mode: 'leased',
      rate: { limit: 20, per: 200 },
      leaseMs: 3000, // the steps below, well within one lease
      refreshMs: 100,
    });
    const grants: number[] = [];
    let stop = false;
    const loop = async () => {
      while (!stop) {
        const permit = await gate.acquire({ timeout: 10_000 }).catch(() => undefined);
        if (permit === undefined) continue;
        grants.push(performance.now());
        permit.release();
      }
    };
    const run = Promise.all([loop(), loop()]);
    await until(() => gate.stats().shared.rate!.share === 20, 'the whole rate leased');
    let failedAt = 0;
    redis().pause();
    try {
      await until(() => gate.stats().shared.mode !== 'redis', 'a refresh failing');
      failedAt = performance.now();
      expect(gate.stats().shared.rate!.share).toBe(0);
      // Within its lease it sends on no share: Redis may have run the refresh and shrunk it. A
      // caller with a 300 ms deadline waits it out (no RateLimitedError at join: no share to
      // tell its slot by).
      await expect(gate.acquire({ timeout: 300 })).rejects.toBeInstanceOf(QueueTimeoutError);
      expect(grants.filter((t) => t > failedAt).length).toBe(0);
    } finally {
      redis().resume();
    }
    await until(() => grants.some((t) => t > failedAt), 'sends again once Redis answers');
    stop = true;
    await run;
  });

  it('more processes than calls per window: a busy one still gets a share (the equal split is 0)', async () => {
    const stores = [await fleet.store(), await fleet.store(), await fleet.store()];
    const options = {
      name: 'few',
      limit: 5,
      mode: 'leased',
      rate: { limit: 2, per: 200 },
    } as const;
    const gates = stores.map((s) => s.semaphore({ ...options, ...LEASE }));
    await Promise.all(gates.map((g) => g.ready()));
    const busy = gates[0]!;
    let stop = false;
    const run = (async () => {
      while (!stop) (await busy.acquire({ timeout: 10_000 })).release();
    })();
    await until(() => busy.stats().shared.rate!.share === 2, 'the busy process leasing the rate');
    expect(busy.stats().shared.processes).toBe(3);
    stop = true;
    await run;
  });

  it('layouts: a rated process adopts a gate kept without a rate; one without a rate is refused on it', async () => {
    const [a, b, c] = [await fleet.store(), await fleet.store(), await fleet.store()];
    const plain = a.semaphore({ name: 'layout', limit: 4, mode: 'leased', ...LEASE });
    await plain.ready();
    expect(await redis().command('HGET', 'test:{layout}:m', 'v')).toBe('leased/1');
    const rated = b.semaphore({
      name: 'layout',
      limit: 4,
      mode: 'leased',
      rate: { limit: 10 },
      ...LEASE,
    });
    await rated.ready();
    expect(await redis().command('HGET', 'test:{layout}:m', 'v')).toBe(LEASED_RATE_LAYOUT);
    expect(await redis().command('HGET', 'test:{layout}:m', 'rt')).toBe('10:1000:0');
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on('warning', onWarning);
    cleanups.push(() => process.off('warning', onWarning));
    const late = c.semaphore({ name: 'layout', limit: 4, mode: 'leased', ...LEASE });
    await late.ready();
    await expect(late.acquire()).rejects.toBeInstanceOf(SharedLayoutError);
    await until(() => warnings.includes('Warning'), 'a layout warning');
  });

  it("the rate lives in Redis: a second process's rate is overruled with a warning, and setSharedRate changes it for both", async () => {
    const [a, b] = [await fleet.store(), await fleet.store()];
    const ga = a.semaphore({
      name: 'rt',
      limit: 4,
      mode: 'leased',
      rate: { limit: 10, per: 1000, burst: 2 },
      ...LEASE,
    });
    await ga.ready();
    const codes: string[] = [];
    const onWarning = (w: Error & { code?: string }) => codes.push(w.code ?? '');
    process.on('warning', onWarning);
    cleanups.push(() => process.off('warning', onWarning));
    const gb = b.semaphore({
      name: 'rt',
      limit: 4,
      mode: 'leased',
      rate: { limit: 30, per: 1000 },
      ...LEASE,
    });
    await gb.ready();
    expect(gb.rate).toMatchObject({ limit: 10, per: 1000, burst: 2 });
    await until(() => codes.includes('HOSTGATE_SHARED_RATE_MISMATCH'), 'the mismatch warning');
    await gb.setSharedRate({ limit: 40, per: 2000, burst: 4 });
    expect(await redis().command('HGET', 'test:{rt}:m', 'rt')).toBe('40:2000:4');
    await until(() => ga.rate?.limit === 40, 'a adopting the rate b set');
    expect(ga.rate).toMatchObject({ limit: 40, per: 2000, burst: 4 });
    await expect(
      a
        .semaphore({ name: 'plain', limit: 2, mode: 'leased', ...LEASE })
        .setSharedRate({ limit: 1 }),
    ).rejects.toThrow(/has no rate/);
  });

  it('refuses a rate whose limit is not a whole number of calls (shares are whole calls), naming a fix', async () => {
    const store = await fleet.store();
    expect(() =>
      store.semaphore({ name: 'frac', limit: 2, mode: 'leased', rate: { limit: 2.5 } }),
    ).toThrow(
      /rate\.limit of a leased shared gate must be a whole number of calls per 1000 ms .* got 2\.5: scale per instead, e\.g\. \{ limit: 25, per: 10000 \}/,
    );
    expect(
      () =>
        new HostLimiter({
          store,
          partners: [
            {
              name: 'f',
              hosts: ['f.example'],
              limit: 2,
              shared: { mode: 'leased' },
              rate: { limit: 0.5 },
            },
          ],
        }),
    ).toThrow(/partner "f": rate\.limit of a leased shared gate must be a whole number/);
  });
});
