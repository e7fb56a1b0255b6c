/**
 * SETCAP, SETRATE and SETTLE (src/redis/commands/setCap-5.lua, setRate-5.lua, settle-5.lua)
 * alone on crafted state: the explicit changes of a gate's cap and rate, and settled costs.
 */
import { expect, it } from 'vitest';
import { RATE_LAYOUT } from '../../../src/redis/scripts.js';
import { describeRedis } from '../../helpers/redis-server.js';
import { expectAhead, expectConsistent, inUse, rateTail, scripts, useLab, WAKE } from './lab.js';

describeRedis('SETCAP, SETRATE, SETTLE alone', () => {
  const lab = useLab();

  it('SETCAP raises the cap for every process and hands the units it frees to the queue at once', async () => {
    await lab.craft({
      m: inUse(1, { h: 1 }),
      h: { 'pa:1': 5_000 },
      q: { 'pb:1': 1 },
      p: { pb: 4_000 },
    });
    const heard = await lab.listen('pb');
    const ran = await lab.run(scripts.setCap, [2]);
    expect(ran.reply.slice(0, 3)).toEqual([2, 0, 2]);
    const state = await lab.state();
    expect(state.m.c).toBe('2');
    expect(heard.get(`${WAKE}pb`)).toEqual(['pb:1']);
    expectConsistent(state);
  });

  it('SETCAP lowered below what is held takes nothing back, and grants nothing until the holders are under it', async () => {
    await lab.craft({
      m: inUse(3, { h: 1 }),
      h: { 'pa:1': 5_000, 'pa:2': 5_000, 'pa:3': 5_000 },
      q: { 'pb:1': 1 },
      p: { pb: 4_000 },
    });
    await lab.listen('pb');
    expect((await lab.run(scripts.setCap, [1])).reply.slice(0, 3)).toEqual([3, 1, 1]);
    expectConsistent(await lab.state(), { withinCap: false });
    expect((await lab.run(scripts.release, ['pa:1', 'pa:2'])).reply.slice(0, 3)).toEqual([1, 1, 1]);
    const state = await lab.state();
    expect([...state.q.keys()]).toEqual(['pb:1']);
    expectConsistent(state);
  });

  it('SETRATE changes the rate Redis holds for every process; the timestamp stays', async () => {
    const rate = '10:1000:0';
    await lab.craft({ m: inUse(2, { v: RATE_LAYOUT, rt: rate, t: '123.5' }) });
    const ran = await lab.run(scripts.setRate, ['20:1000:4'], { rate });
    expect(rateTail(ran.reply, 3)[3]).toBe('20:1000:4');
    const state = await lab.state();
    expect([state.m.rt, state.m.t]).toEqual(['20:1000:4', '123.5']);
    expectConsistent(state);
  });

  it('SETTLE moves the timestamp by the units settled: a debt from now, a refund never below now', async () => {
    const rate = '10:1000:0'; // 100 ms a unit
    await lab.craft({ m: inUse(2, { v: RATE_LAYOUT, rt: rate }) });
    const debt = await lab.run(scripts.settle, [3], { rate });
    expectAhead(Math.round(Number((await lab.state()).m.t)), debt, 300);
    await lab.run(scripts.settle, [-1], { rate });
    expectAhead(Math.round(Number((await lab.state()).m.t)), debt, 200);
    const all = await lab.run(scripts.settle, [-10], { rate });
    const t = Number((await lab.state()).m.t);
    expect(t).toBeGreaterThanOrEqual(all.before - 1);
    expect(t).toBeLessThanOrEqual(all.after + 1);
    expectConsistent(await lab.state());
  });

  it('SETTLE on a gate without a rate changes nothing', async () => {
    await lab.craft({ m: inUse(2) });
    await lab.run(scripts.settle, [5]);
    expect((await lab.state()).m.t).toBeUndefined();
  });
});
