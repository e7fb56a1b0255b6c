/**
 * Issue 32, item 4: one SIGKILLed FIFO replica must not stop the survivors. Cap 5, 3 replicas
 * × 10 callers, the store's defaults (lease 10 s, heartbeat 2 s, queueTimeout 5 s), one
 * replica SIGKILLed while everyone is busy: the partner must never see 0 requests in flight for
 * more than 500 ms while the survivors have demand.
 */
import { expect, it } from 'vitest';
import { describeRedis } from '../helpers/redis-server.js';
import { countingPartner, faultFor, openFleet, stopFleet, useFleet } from './fifo-fleet.js';
import { untilRedis } from './replicas.js';

const CAP = 5;

describeRedis('a SIGKILLed FIFO replica', () => {
  const file = useFleet(3);

  it('never leaves the survivors at 0 for more than 500 ms while they have demand', async () => {
    const partner = await countingPartner();
    try {
      const [victim] = await openFleet(file.replicas, {
        redisPort: file.redis.port,
        origin: partner.origin,
        path: '/ok?delay=50',
        prefix: 'sigkill:',
        name: 'billing',
        limit: CAP,
        callers: 10,
      });
      await partner.arrived(200);
      // Killed while it holds at most 3 of the 5 permits: what it holds is lost until its
      // leases end (10 s), as documented; what it waits for must not stop the others.
      const h = 'sigkill:{billing}:h';
      await untilRedis(file.redis, async () => {
        const ids = (await file.redis.command('ZRANGE', h, 0, -1)) as string[];
        return ids.filter((id) => id.startsWith(`${victim}:`)).length <= 3;
      });
      const killed = performance.now();
      file.replicas[0]!.kill('SIGKILL');
      await file.replicas[0]!.exited;
      await faultFor(1000);
      {
        const pre = 'sigkill:{billing}:';
        const [sec, us] = (await file.redis.command('TIME')) as string[];
        const now = Number(sec) * 1000 + Number(us) / 1000;
        const h = (await file.redis.command('ZRANGE', `${pre}h`, 0, -1, 'WITHSCORES')) as string[];
        const q = (await file.redis.command('ZRANGE', `${pre}q`, 0, -1)) as string[];
        const rows = [];
        for (let i = 0; i < h.length; i += 2)
          rows.push(`${h[i]} +${(Number(h[i + 1]) - now).toFixed(0)}`);
        console.log('H', rows.join(', '), '| Q', q.map((id) => id.slice(0, 4)).join(' '));
      }
      await faultFor(5000);
      const idle = partner.longestIdle(killed, performance.now());
      const used = partner.meanActive(killed, performance.now());
      await stopFleet(file.replicas.slice(1));
      console.log(
        `SIGKILL: longest at 0 ${idle.toFixed(0)} ms, mean in use ${used.toFixed(2)} of ${CAP}`,
      );
      expect(idle).toBeLessThanOrEqual(500);
    } finally {
      await partner.close();
    }
  }, 20_000);
});
