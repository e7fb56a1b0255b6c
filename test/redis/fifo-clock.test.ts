/**
 * Issue 32, item 2 (FIFO half): a forward step of Redis's clock must not let the fleet
 * over-admit. Emulated as the campaign does (SHARED-FIXES.md): one script moves every stored
 * Redis-time timestamp of the gate back 5 s, the last run `lr` included; to the scripts that is
 * a gap (no script ran for 5 s), found and undone as one (time taken as frozen during it). A
 * real step reads the same: `now - lr` is the step plus the time since the last run. Before the
 * fix the first script after the step reaped every lease. Scenario: fifo-outage-fleet.ts.
 */
import { it } from 'vitest';
import { describeRedis } from '../helpers/redis-server.js';
import { CLOCK_STEP, LEASE_MS, useOutageFleet } from './fifo-outage-fleet.js';

describeRedis("FIFO gates and steps of Redis's clock", () => {
  const fleet = useOutageFleet();

  it("a forward step of Redis's clock (+5 s, emulated) is not taken for expiry", async () => {
    const { prefix } = await fleet.busy();
    const keys = ['h', 'p', 'm'].map((k) => `${prefix}{billing}:${k}`);
    fleet.faultStarts();
    await fleet.redis.command('EVAL', CLOCK_STEP, 3, ...keys, 5000);
    await fleet.judge('clock step +5 s', LEASE_MS, false);
  }, 20_000);

  it("a backward step of Redis's clock (-5 s, emulated) leaves no lease stretched", async () => {
    const { prefix } = await fleet.busy();
    const keys = ['h', 'p', 'm'].map((k) => `${prefix}{billing}:${k}`);
    fleet.faultStarts();
    await fleet.redis.command('EVAL', CLOCK_STEP, 3, ...keys, -5000);
    await fleet.judge('clock step -5 s', 3 * LEASE_MS, false);
    // Nothing held, then nothing left: the stretched expiries were undone, not waited out.
    const h = `${prefix}{billing}:h`;
    const far = await fleet.redis.command(
      'EVAL',
      `local t = redis.call('TIME')
      return redis.call('ZCOUNT', KEYS[1], t[1] * 1000 + 2 * ${LEASE_MS}, '+inf')`,
      1,
      h,
    );
    if (Number(far) !== 0) throw new Error(`${far} leases expire more than 2 leases from now`);
  }, 20_000);
});
