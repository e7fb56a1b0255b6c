/**
 * Issue 32, item 1 (FIFO half): Redis away longer than a lease (SIGSTOP, out-of-memory errors)
 * must not let the fleet over-admit when Redis answers again. The script that finds the gap
 * (no script ran for longer than a heartbeat and a command timeout, scripts.ts `lr`) takes time
 * as frozen during it, so the leases that lapsed unobserved are not reaped. Before it: 14 at a
 * cap of 8, both faults (see fifo-outage-fleet.ts for the scenario).
 */
import { it } from 'vitest';
import { describeRedis } from '../helpers/redis-server.js';
import { faultFor } from './fifo-fleet.js';
import { FAULT_MS, LEASE_MS, useOutageFleet } from './fifo-outage-fleet.js';

describeRedis('FIFO gates after Redis was away longer than a lease', () => {
  const fleet = useOutageFleet();

  it('Redis SIGSTOPped longer than a lease: no excess when it comes back', async () => {
    await fleet.busy();
    fleet.faultStarts();
    fleet.redis.pause();
    await faultFor(FAULT_MS);
    fleet.redis.resume();
    await fleet.judge('SIGSTOP', 2 * LEASE_MS);
  }, 20_000);

  it('Redis out of memory (noeviction) longer than a lease: no excess when it has room again', async () => {
    const { redis } = fleet;
    await fleet.busy();
    await redis.command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
    fleet.faultStarts();
    await redis.command('CONFIG', 'SET', 'maxmemory', 1);
    await faultFor(FAULT_MS);
    await redis.command('CONFIG', 'SET', 'maxmemory', 0);
    await fleet.judge('OOM', 2 * LEASE_MS);
  }, 20_000);
});
