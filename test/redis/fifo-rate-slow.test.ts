/**
 * A FIFO rate's grant that comes the long way (the fault campaign's `replica-slow`: a replica's
 * link to Redis slowed): a grant a release makes reaches its owner by a wake-up, then the
 * owner's CLAIM confirms it. Each half was held to `lateMs` (250 ms) alone, Redis's (grant to
 * claim) and the owner's (the claim's round trip), so a grant could go out nearly twice that
 * after Redis made it, on top of the calls granted since: campaign seed 116065 (every link
 * slowed 90 ms each way, rate 5 per 500 ms burst 1) sent 7 calls in 250 ms at a promise of 6
 * when the links healed, 2 runs in 3. The claim now says how long before it ran the grant was
 * made, and the owner adds its round trip: a later grant is taken again for a slot of now.
 * Judged by Redis's own state: the grant a call went out on is the one that set the rate's
 * timestamp (burst 0: made at TAT − per / limit), on the host's one clock (Redis `TIME` and
 * `Date.now()` read the same).
 */
import { Redis } from 'ioredis';
import { afterEach, expect, it } from 'vitest';
import { type RedisStore, redisStore } from '../../src/redis/index.js';
import { LATE_FLOOR_MS } from '../../src/redis/shared-rate.js';
import { Link } from '../chaos/link.js';
import { describeRedis } from '../helpers/redis-server.js';
import { Fleet, privateRedis, untilAsync } from './clients.js';

const redis = privateRedis();
const direct = new Fleet('node-redis', redis);
/** One call per 100 ms, no burst: lateMs is the floor, 250 ms. */
const RATE = { limit: 10, per: 1000, burst: 0 };

let slowed: { link: Link; store: RedisStore; client: Redis } | undefined;
afterEach(async () => {
  if (slowed) {
    slowed.link.slow(0);
    await slowed.store.close();
    slowed.client.disconnect();
    await slowed.link.close();
    slowed = undefined;
  }
  await direct.closeAll();
  await redis().command('FLUSHALL');
});

describeRedis('a FIFO rate grant that comes the long way', () => {
  it("goes out within lateMs of the grant Redis made for it, its wake-up's way counted (campaign seed 116065)", async () => {
    const link = new Link(redis().port);
    await link.listen();
    const client = new Redis(link.port, '127.0.0.1', { lazyConnect: true });
    client.on('error', () => {});
    await client.connect();
    const store = redisStore({ client, prefix: 'test:', commandTimeoutMs: 1000 });
    slowed = { link, store, client };
    const gate = { name: 'late', limit: 1, rate: RATE, queueTimeout: 10_000 };
    // The same options as B: a grant's age is read from its claim window, each process's own.
    const a = (await direct.store({ commandTimeoutMs: 1000 })).semaphore(gate);
    const b = store.semaphore(gate);
    const held = await a.acquire();
    // B's answers and wake-ups come 200 ms late; its commands go at once. Its grant: made by
    // A's release (g), the wake-up at g + 200, the claim run at g + 200 (Redis: 200 after the
    // grant, under 250), its answer at g + 400 (a round trip of 200, under 250).
    link.slow(200, 'down');
    let sentAt = Number.NaN;
    const call = b.run(async () => {
      sentAt = Date.now();
    });
    await untilAsync(async () => b.stats().shared?.queued === 1, "B's ticket queued, answered");
    const releasedAt = Date.now();
    held.release();
    await call;
    const tat = Number(await redis().command('HGET', 'test:{late}:m', 't'));
    const madeAt = tat - RATE.per / RATE.limit;
    console.log(
      `a grant that came the long way went out ${Math.round(sentAt - madeAt)} ms after Redis made it (lateMs ${LATE_FLOOR_MS}); made ${Math.round(madeAt - releasedAt)} after the release, sent ${Math.round(sentAt - releasedAt)} after it`,
    );
    // Before: about 400 ms (each half under 250). Now taken again at g + 400 and sent at about
    // g + 600: 200 ms after the grant it went on. (80 ms for a busy machine's event loop.)
    expect(sentAt - madeAt).toBeLessThanOrEqual(LATE_FLOOR_MS + 80);
  }, 20_000);
});
