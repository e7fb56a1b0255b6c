/**
 * Issue 32, item 1 (leased mode): Redis away longer than a lease (SIGSTOP, OOM errors, a
 * restart with its data) must not push the fleet past its cap when Redis answers again. Cap 8,
 * 4 processes × 6 callers, lease 3 s, fault 4.5 s. The oracle is a partner that counts its own
 * concurrent requests; each test also reports how long after the fault the fleet held its
 * whole cap again (docs/shared-gates.md).
 */
import { afterEach, it } from 'vitest';
import { describeRedis } from '../helpers/redis-server.js';
import { privateRedis } from './clients.js';
import { afterFault, busyFleet, type LeasedFleet } from './leased-fleet.js';

const redis = privateRedis();
const CAP = 8;
const FAULT_MS = 4500;

let fleet: LeasedFleet | undefined;
afterEach(async () => {
  redis().resume();
  await redis().command('CONFIG', 'SET', 'maxmemory', '0');
  await fleet?.stop();
  fleet = undefined;
  await redis().command('FLUSHALL');
});

/** Sleeps on a timer: the fault's length, not a wait for an event. */
const hold = (ms: number) => new Promise((r) => setTimeout(r, ms));

describeRedis(
  'a leased gate when Redis comes back after a fault longer than a lease (issue 32)',
  () => {
    it('Redis SIGSTOPped 4.5 s with a 3 s lease: no excess at the partner when it resumes', async () => {
      const f = await busyFleet('stopped', redis);
      fleet = f;
      redis().pause();
      await hold(FAULT_MS);
      redis().resume();
      await afterFault(f, CAP);
    }, 20_000);

    it('Redis answering OOM errors (maxmemory, noeviction) for 4.5 s: no excess when it recovers', async () => {
      const f = await busyFleet('oom', redis);
      fleet = f;
      await redis().command('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
      await redis().command('CONFIG', 'SET', 'maxmemory', '1');
      await hold(FAULT_MS);
      await redis().command('CONFIG', 'SET', 'maxmemory', '0');
      await afterFault(f, CAP);
    }, 20_000);
  },
);
