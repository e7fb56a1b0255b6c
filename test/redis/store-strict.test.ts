import { expect, it } from 'vitest';
import { StoreUnavailableError } from '../../src/common/errors.js';
import type { Permit } from '../../src/gate/semaphore.js';
import { describeRedis, type RedisServer } from '../helpers/redis-server.js';
import { CLIENT_KINDS, privateRedis, useFleet, zcard } from './clients.js';

const redis = privateRedis();

for (const kind of CLIENT_KINDS) {
  describeRedis(`strict mode (replicas: 1, WAIT) on ${kind}`, () => {
    const fleet = useFleet(kind, redis);

    it('grants only what a replica acknowledged, and sheds when no replica answers', async () => {
      let replica: RedisServer | undefined = await redis().startReplica();
      try {
        // WAIT gets half the command timeout: 5 s, room for a replica's ack on a loaded machine
        // (1 s ran out once beside a CPU hog). The shedding store below waits 300 ms only.
        const strict = { replicas: 1, onStoreError: 'reject', commandTimeoutMs: 10_000 } as const;
        const [a, b] = [await fleet.store(strict), await fleet.store(strict)];
        const ga = a.semaphore({ name: 'strict', limit: 1, queueTimeout: 10_000 });
        const gb = b.semaphore({ name: 'strict', limit: 1, queueTimeout: 10_000 });
        const first = await ga.acquire();
        const handedOn: Promise<Permit> = gb.acquire(); // granted by a's release: confirmed first
        await b.settled();
        first.release();
        const second = await handedOn;
        expect(Number(await replica.command('ZCARD', 'test:{strict}:h'))).toBe(1);
        second.release();
        await b.settled();
        const c = await fleet.store({ ...strict, commandTimeoutMs: 600 });
        const gc = c.semaphore({ name: 'strict', limit: 1, queueTimeout: 10_000 });
        replica.pause();
        await expect(gc.acquire()).rejects.toBeInstanceOf(StoreUnavailableError);
        await c.settled();
        expect(await zcard(redis(), 'strict', 'h')).toBe(0); // the unconfirmed grant went back
      } finally {
        replica?.resume();
        await replica?.close();
        replica = undefined;
      }
    });
  });
}
