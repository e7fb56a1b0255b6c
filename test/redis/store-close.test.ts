import { afterEach, expect, it } from 'vitest';
import { describeRedis } from '../helpers/redis-server.js';
import { storeOutage } from '../helpers/store-outage.js';
import { CLIENT_KINDS, deferred, privateRedis, useFleet, zcard } from './clients.js';
import { untilRedis } from './replicas.js';

/**
 * close() against the store's own view of Redis: what it gives back must not depend on whether
 * the last call happened to time out, or on an answer that was still on its way.
 */
const redis = privateRedis();

/**
 * No heartbeat runs during a test (the first one is 30 s away): a store that a timeout made
 * degraded stays degraded until close(), as it does when close() comes within a heartbeat of
 * the timeout. A 60 s lease outlives the test, so whatever close() leaves behind is still there.
 */
const NO_BEAT = { leaseMs: 60_000, heartbeatMs: 30_000, commandTimeoutMs: 1000 } as const;

/** Resolves with the next `hostgate:store-error` message of `store`. */

for (const kind of CLIENT_KINDS) {
  describeRedis(`close() of a shared-gate store, on ${kind}`, () => {
    const fleet = useFleet(kind, redis);
    afterEach(() => {
      redis().resume(); // a failed test must not leave Redis paused for the next one
    });

    it('close() within a heartbeat of a timed-out call (the store still degraded, Redis back) gives back every lease and ticket', async () => {
      // drainMs 0: the local permit is held through close() on purpose (no wait for it).
      const store = await fleet.store({ ...NO_BEAT, drainMs: 0 });
      const gate = store.semaphore({ name: 'close-degraded', limit: 1, queueTimeout: 30_000 });
      const held = await gate.acquire();
      const waiting = gate.acquire(); // a ticket in Redis
      await store.settled();
      expect(await zcard(redis(), 'close-degraded', 'q')).toBe(1);

      const down = storeOutage(store);
      redis().pause();
      // Its RELEASE times out: the store is degraded and keeps the id for the heartbeat. The
      // client still has the command and sends it on once Redis runs again, and Redis then
      // hands the freed permit to the ticket, which the store has given up (the waiter moved
      // to the local share, where it is served).
      held.release();
      await down;
      redis().resume();
      const local = await waiting;
      expect(store.degraded).toBe(true); // nothing has told the store that Redis is back

      await store.close();
      expect(await zcard(redis(), 'close-degraded', 'h')).toBe(0);
      expect(await zcard(redis(), 'close-degraded', 'q')).toBe(0);
      local.release(); // after close: no Redis call, no error
    });

    it('an acquire answered only after close() returned (the store degraded, Redis paused through the close) is withdrawn when its answer comes', async () => {
      const [a, b] = [
        await fleet.store({ ...NO_BEAT, commandTimeoutMs: 200, drainMs: 0 }),
        await fleet.store(NO_BEAT),
      ];
      const ga = a.semaphore({ name: 'close-late', limit: 1 });
      const gb = b.semaphore({ name: 'close-late', limit: 1 });
      (await ga.acquire()).release(); // a is subscribed and has its scripts
      await a.settled();
      const held = await gb.acquire(); // the one permit: a's next acquire becomes a ticket
      const down = storeOutage(a);
      redis().pause();
      // Its ACQUIRE times out (a is degraded; the caller is served from the local share), and
      // the id is given back only after that acquire's answer, which Redis sends once resumed.
      const local = await ga.acquire();
      await down;
      await a.close(); // bounded: it waits for the unanswered acquire one command timeout at most
      redis().resume();
      // The ticket is queued (the gate's arrival counter `s` appears) and then withdrawn, though
      // the store is closed and still believes Redis is down.
      await untilRedis(
        redis(),
        async () =>
          Number(await redis().command('EXISTS', 'test:{close-late}:s')) === 1 &&
          (await zcard(redis(), 'close-late', 'q')) === 0,
      );
      expect(await zcard(redis(), 'close-late', 'h')).toBe(1); // b's
      held.release();
      local.release();
    });

    it('campaign seed 75026, the unfinished close: a close that cannot leave its gate (Redis paused through it) names the gate in HOSTGATE_STORE_CLOSE_UNFINISHED, where it said nothing and the gate kept a queue and lease set with no TTL; a close with Redis up says nothing', async () => {
      const warned: Error[] = [];
      const heard = deferred<void>();
      // A warning is emitted on process.nextTick, within close(): heard before close() resolves.
      const onWarning = (warning: Error) => {
        if ((warning as { code?: string }).code !== 'HOSTGATE_STORE_CLOSE_UNFINISHED') return;
        warned.push(warning);
        heard.resolve();
      };
      process.on('warning', onWarning);
      try {
        const [a, b] = [
          await fleet.store({ commandTimeoutMs: 200 }),
          await fleet.store({ commandTimeoutMs: 200 }),
        ];
        for (const store of [a, b]) {
          const gate = store.semaphore({ name: 'close-unfinished', limit: 1 });
          (await gate.acquire()).release(); // known to Redis: a close leaves it
          await store.settled();
        }
        await a.close(); // Redis up: left
        expect(warned).toEqual([]);
        redis().pause();
        await b.close();
        redis().resume();
        await heard.promise;
        expect(warned).toHaveLength(1);
        expect(warned[0]!.message).toContain('"close-unfinished"');
      } finally {
        process.off('warning', onWarning);
      }
    });

    it('close() returns while Redis is paused before the store has subscribed to its wake-ups', async () => {
      const store = await fleet.store({ commandTimeoutMs: 200 });
      store.semaphore({ name: 'close-unsubscribed', limit: 1 }); // starts subscribing
      redis().pause();
      const hang = deferred<string>();
      const bound = setTimeout(() => hang.resolve('still closing after 10 s'), 10_000);
      const closed = await Promise.race([store.close().then(() => 'closed'), hang.promise]);
      clearTimeout(bound);
      expect(closed).toBe('closed');
    });
  });
}
