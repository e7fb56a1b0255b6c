/**
 * Weighted shared permits (issue 25 item 2): `acquire({ weight })` holds `weight` units of the
 * shared cap, FIFO across processes, with the local gate's semantics (a heavy head waits for
 * room and nobody behind it overtakes). The oracle is Redis's own count of units held (`ZCARD`
 * of the lease set: one member per unit) after every step.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import fc from 'fast-check';
import { expect, it, onTestFinished } from 'vitest';
import type { Permit } from '../../src/gate/semaphore.js';
import type { RedisStore, SharedSemaphore } from '../../src/redis/index.js';
import { describeRedis, type RedisServer } from '../helpers/redis-server.js';
import { CLIENT_KINDS, deferred, privateRedis, untilAsync, useFleet, zcard } from './clients.js';

const redis = privateRedis();
const SEED = 2025;

/** Units Redis counts as held: what every process holds, once their grants are claimed. */
async function settledUnits(
  server: RedisServer,
  name: string,
  stores: readonly RedisStore[],
  gates: readonly SharedSemaphore[],
): Promise<number> {
  await Promise.all(stores.map((s) => s.settled()));
  const local = () => gates.reduce((sum, g) => sum + g.held, 0);
  let units = 0;
  await untilAsync(async () => {
    units = await zcard(server, name, 'h');
    return units === local();
  }, 'every unit Redis granted held by its process');
  return units;
}

type Command =
  | { kind: 'acquire'; store: 0 | 1; weight: number }
  | { kind: 'release'; pick: number }
  | { kind: 'abort'; pick: number };

const commandArb: fc.Arbitrary<Command> = fc.oneof(
  fc.record({
    kind: fc.constant('acquire' as const),
    store: fc.constantFrom(0 as const, 1 as const),
    weight: fc.integer({ min: 1, max: 3 }),
  }),
  fc.record({ kind: fc.constant('release' as const), pick: fc.nat() }),
  fc.record({ kind: fc.constant('abort' as const), pick: fc.nat() }),
);

for (const kind of CLIENT_KINDS) {
  describeRedis(`weighted shared permits, on ${kind}`, () => {
    const fleet = useFleet(kind, redis);
    const options = { leaseMs: 5000, heartbeatMs: 1000, commandTimeoutMs: 2000 };

    it('a weight-3 head is not overtaken by weight-1 tickets of another process, and a heartbeat after a FLUSHDB registers a weighted lease again in units', async () => {
      const fast = { ...options, heartbeatMs: 300 }; // the FLUSHDB waits for a heartbeat
      const [a, b, c] = [await fleet.store(fast), await fleet.store(fast), await fleet.store(fast)];
      const [ga, gb, gc] = [a, b, c].map((s) => s.semaphore({ name: 'heavy', limit: 4 })) as [
        SharedSemaphore,
        SharedSemaphore,
        SharedSemaphore,
      ];
      const held = [await ga.acquire(), await ga.acquire()];
      const heavy = gb.acquire({ weight: 3 });
      await b.settled();
      const light = gc.acquire({ weight: 1 }); // one unit is free, but the heavy ticket is first
      await c.settled();
      expect(await zcard(redis(), 'heavy', 'h')).toBe(2);
      expect(await zcard(redis(), 'heavy', 'q')).toBe(2);
      expect(gc.held).toBe(0);
      held[0]!.release(); // 1 held: the head's 3 fit, the light ticket still waits behind it
      const h = await heavy;
      expect(h.weight).toBe(3);
      expect(await settledUnits(redis(), 'heavy', [a, b, c], [ga, gb, gc])).toBe(4);
      expect(gc.held).toBe(0);
      expect(gb.stats()).toMatchObject({ held: 3, shared: { held: 4 } });
      held[1]!.release();
      const l = await light;
      expect(await settledUnits(redis(), 'heavy', [a, b, c], [ga, gb, gc])).toBe(4);
      // Redis loses everything; each holder's next heartbeat counts its units again.
      const lost = deferred<void>();
      let lostCount = 0;
      const onLost = () => {
        if (++lostCount === 2) lost.resolve();
      };
      subscribe('hostgate:lease-lost', onLost);
      onTestFinished(() => {
        unsubscribe('hostgate:lease-lost', onLost);
      });
      await redis().command('FLUSHDB');
      await lost.promise;
      expect(await settledUnits(redis(), 'heavy', [a, b, c], [ga, gb, gc])).toBe(4);
      h.release();
      l.release();
      expect(await settledUnits(redis(), 'heavy', [a, b, c], [ga, gb, gc])).toBe(0);
    });
  });
}

// The schedules exercise the scripts, which are the same whatever the client: one client here.
describeRedis('weighted shared permits under random schedules', () => {
  const fleet = useFleet('node-redis', redis);
  const options = { leaseMs: 5000, heartbeatMs: 1000, commandTimeoutMs: 2000 };

  it('random schedules of weighted acquires, releases and aborts across two processes: Redis never holds more units than the cap, grants go in arrival order, every unit comes back once', async () => {
    const stores = [await fleet.store(options), await fleet.store(options)] as const;
    const CAP = 3;
    let run = 0;
    const schedule = async (commands: Command[]) => {
      const name = `w${++run}`;
      const gates = stores.map((s) =>
        s.semaphore({ name, limit: CAP, maxQueue: 50, queueTimeout: 30_000 }),
      ) as [SharedSemaphore, SharedSemaphore];
      interface Call {
        n: number;
        granted: Permit | undefined;
        settled: boolean;
        aborted: boolean;
        controller: AbortController;
      }
      const calls: Call[] = [];
      const held: Permit[] = [];
      const check = async () => {
        const units = await settledUnits(redis(), name, stores, gates);
        expect(units).toBeLessThanOrEqual(CAP);
        // No barging: the calls granted (ever) are a prefix of those that did not leave.
        const stayed = calls.filter((c) => !c.aborted);
        const firstWaiting = stayed.findIndex((c) => c.granted === undefined);
        if (firstWaiting >= 0) {
          expect(stayed.slice(firstWaiting).every((c) => c.granted === undefined)).toBe(true);
        }
      };
      for (const command of commands) {
        if (command.kind === 'acquire') {
          const call: Call = {
            n: calls.length,
            granted: undefined,
            settled: false,
            aborted: false,
            controller: new AbortController(),
          };
          calls.push(call);
          gates[command.store]
            .acquire({ weight: command.weight, signal: call.controller.signal })
            .then(
              (permit) => {
                call.granted = permit;
                held.push(permit);
              },
              () => {
                call.aborted = true;
              },
            )
            .finally(() => {
              call.settled = true;
            });
        } else if (command.kind === 'release') {
          if (held.length > 0) held.splice(command.pick % held.length, 1)[0]!.release();
        } else {
          const waiting = calls.filter((c) => !c.settled);
          if (waiting.length > 0) waiting[command.pick % waiting.length]!.controller.abort();
        }
        await Promise.all(stores.map((s) => s.settled()));
        await new Promise((resolve) => setImmediate(resolve)); // let settled calls record
        await check();
      }
      // Drain: release everything, including what the waiters are granted in turn.
      while (calls.some((c) => !c.settled) || held.length > 0) {
        for (const permit of held.splice(0)) permit.release();
        await Promise.all(stores.map((s) => s.settled()));
        await new Promise((resolve) => setTimeout(resolve, 5));
        await check();
      }
      expect(await settledUnits(redis(), name, stores, gates)).toBe(0);
      expect(await zcard(redis(), name, 'q')).toBe(0);
      for (const gate of gates) {
        const s = gate.stats();
        expect(s.released).toBe(s.acquired);
        expect(s.doubleReleases).toBe(0);
        expect(s.held).toBe(0);
      }
    };
    await fc.assert(
      fc.asyncProperty(fc.array(commandArb, { minLength: 4, maxLength: 12 }), schedule),
      { numRuns: 25, seed: SEED },
    );
  }, 60_000);
});

describeRedis('weighted shared permits while Redis is unreachable', () => {
  const fleet = useFleet('node-redis', redis);

  it("the local share counts units and keeps arrival order: a weight-2 waiter that does not fit holds back a weight-1 one behind it (onStoreError 'local')", async () => {
    onTestFinished(() => redis().resume());
    const store = await fleet.store({
      leaseMs: 5000,
      heartbeatMs: 1000,
      commandTimeoutMs: 300,
      localLimit: 3,
      firstUseWaitMs: 0,
    });
    const gate = store.semaphore({ name: 'fallback', limit: 4, queueTimeout: 20_000 });
    (await gate.acquire()).release(); // known to Redis
    await store.settled();
    redis().pause();
    const first = await gate.acquire({ weight: 2 }); // times out in Redis, granted locally (2 ≤ 3)
    expect(gate.stats().shared.mode).toBe('local');
    let order: string[] = [];
    const heavy = gate.acquire({ weight: 2 }).then((p) => {
      order.push('heavy');
      return p;
    });
    const light = gate.acquire({ weight: 1 }).then((p) => {
      order.push('light');
      return p;
    });
    await new Promise((resolve) => setImmediate(resolve));
    expect(gate.held).toBe(2); // the light one fits (2 + 1 ≤ 3) but waits behind the heavy one
    expect(order).toEqual([]);
    first.release();
    const [h, l] = [await heavy, await light];
    expect(order).toEqual(['heavy', 'light']);
    expect(gate.held).toBe(3);
    order = [];
    h.release();
    l.release();
    expect(gate.held).toBe(0);
    redis().resume();
  });
});
