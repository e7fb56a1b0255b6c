/**
 * CLAIM (src/redis/commands/claim-5.lua) alone on crafted state: a wake-up is a hint, the claim
 * asks Redis; a rated grant claimed too late goes back to the head of the queue, once.
 */
import { describe, expect, it } from 'vitest';
import { RATE_LAYOUT } from '../../../src/redis/scripts.js';
import { LATE_FLOOR_MS } from '../../../src/redis/shared-rate.js';
import { describeRedis } from '../../helpers/redis-server.js';
import { COMMON, expectAhead, expectConsistent, inUse, scripts, useLab } from './lab.js';

describeRedis('CLAIM alone', () => {
  const lab = useLab();
  const claim = (id: string, late: 0 | 1 | 2 = 0, common = {}) =>
    lab.run(scripts.claim, [id, late], common);

  it('a ticket granted by a release becomes a full lease when its owner claims it', async () => {
    await lab.craft({ m: inUse(2, { h: 1 }), h: { 'pa:1': 1_000 }, p: { pa: 4_000 } });
    const ran = await claim('pa:1');
    expect(ran.reply.slice(0, 4)).toEqual([1, 1, 0, 2]);
    const state = await lab.state();
    expectAhead(state.h.get('pa:1'), ran, COMMON.leaseMs);
    expectConsistent(state);
  });

  it('a claim of a ticket not granted (a forged or stale wake-up) grants and changes nothing', async () => {
    await lab.craft({
      m: inUse(1, { h: 1 }),
      h: { 'pb:1': 5_000 },
      q: { 'pa:1': 1 },
      p: { pa: 4_000 },
    });
    const before = await lab.state();
    const ran = await claim('pa:1');
    expect(ran.reply.slice(0, 4)).toEqual([0, 1, 1, 1]);
    const after = await lab.state();
    expect([after.h, after.q]).toEqual([before.h, before.q]);
    expectConsistent(after);
  });

  describe('on a gate with a rate', () => {
    const rate = '10:1000:0'; // lateMs = max(LATE_FLOOR_MS, 100 ms)
    const granted = (agoMs: number) => COMMON.claimMs - agoMs; // a claim window's score, from now
    const crafted = (agoMs: number) =>
      lab.craft({
        m: inUse(2, { v: RATE_LAYOUT, rt: rate, h: 1 }),
        h: { 'pa:1': granted(agoMs) },
        q: { 'pb:1': 5 },
        p: { pa: 4_000, pb: 4_000 },
      });

    it('a grant claimed later than lateMs after it was made goes back to the head of the queue, units freed', async () => {
      await crafted(LATE_FLOOR_MS + 150);
      const ran = await claim('pa:1', 0, { rate });
      // Back at the head; fill() offers it again at once, but nobody listens for pa: passed over.
      expect(ran.reply.slice(0, 4)).toEqual([0, 0, 2, 2]);
      const state = await lab.state();
      expect(state.h.size).toBe(0);
      expect([...state.q]).toEqual([
        ['pa:1', 4],
        ['pb:1', 5],
      ]);
      expectConsistent(state);
    });

    it('in time, or taken again once before (late 2), the grant stands and becomes a lease', async () => {
      await crafted(50);
      const inTime = await claim('pa:1', 0, { rate });
      expect(inTime.reply[0]).toBe(1);
      await lab.server().command('FLUSHALL');
      await crafted(LATE_FLOOR_MS + 150);
      const again = await claim('pa:1', 2, { rate });
      expect(again.reply[0]).toBe(1);
      const state = await lab.state();
      expectAhead(state.h.get('pa:1'), again, COMMON.leaseMs);
      expectConsistent(state);
    });

    it('says how long ago Redis made the grant (the owner adds its round trip: campaign seed 116065, grants 270 ms late passed each half alone)', async () => {
      await crafted(200);
      const ran = await claim('pa:1', 0, { rate });
      expect(ran.reply[0]).toBe(1);
      // {granted, held, queued, cap, hint, next slot, backlog, rate, since}
      expect(ran.reply[8]).toBeGreaterThanOrEqual(200);
      expect(ran.reply[8]).toBeLessThan(200 + 100);
    });

    it('a grant its owner read late (late 1) is taken again however young it is', async () => {
      await crafted(10);
      const ran = await claim('pa:1', 1, { rate });
      expect(ran.reply[0]).toBe(0);
      expect([...(await lab.state()).q.keys()]).toEqual(['pa:1', 'pb:1']);
    });
  });
});
