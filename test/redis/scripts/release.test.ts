/**
 * RELEASE (src/redis/commands/release-5.lua) alone on crafted state: leases given back in every
 * unit, tickets withdrawn, and freed units handed on in FIFO order to live owners only.
 */
import { expect, it } from 'vitest';
import { describeRedis } from '../../helpers/redis-server.js';
import {
  COMMON,
  expectAhead,
  expectConsistent,
  inUse,
  scripts,
  unitsOf,
  useLab,
  WAKE,
} from './lab.js';

describeRedis('RELEASE alone', () => {
  const lab = useLab();
  const release = (...ids: string[]) => lab.run(scripts.release, ids);

  it('gives back every unit of a lease, and clears the holders flag as the set empties', async () => {
    const units = Object.fromEntries(unitsOf('pa:1/2').map((unit) => [unit, 5_000]));
    await lab.craft({ m: inUse(3, { h: 1 }), h: units });
    const ran = await release('pa:1/2');
    expect(ran.reply.slice(0, 3)).toEqual([0, 0, 3]);
    const state = await lab.state();
    expect(state.h.size).toBe(0);
    expect(state.m.h).toBe('0');
    expectConsistent(state);
  });

  it("hands a freed unit to the oldest ticket of a live process as a claim window, told on its owner's channel only", async () => {
    await lab.craft({
      m: inUse(1, { h: 1 }),
      h: { 'pa:1': 5_000 },
      q: { 'pb:1': 1, 'pc:1': 2 },
      p: { pb: 4_000, pc: 4_000 },
    });
    const heard = await lab.listen('pb', 'pc');
    const ran = await release('pa:1');
    expect(ran.reply.slice(0, 3)).toEqual([1, 1, 1]);
    const state = await lab.state();
    expectAhead(state.h.get('pb:1'), ran, COMMON.claimMs);
    expect([...state.q.keys()]).toEqual(['pc:1']);
    expect(heard.get(`${WAKE}pb`)).toEqual(['pb:1']);
    expect(heard.get(`${WAKE}pc`)).toEqual([]);
    expectConsistent(state);
  });

  it("skips a dead process's ticket (dropped), passes over a live owner nobody listens for (it keeps its place), and grants the next", async () => {
    await lab.craft({
      m: inUse(1, { h: 1 }),
      h: { 'pa:1': 5_000 },
      q: { 'pd:1': 1, 'pe:1': 2, 'pf:1': 3 },
      p: { pd: -100, pe: 4_000, pf: 4_000 },
    });
    const heard = await lab.listen('pf');
    const ran = await release('pa:1');
    expect(ran.reply.slice(0, 3)).toEqual([1, 1, 1]);
    const state = await lab.state();
    expect([...state.h.keys()]).toEqual(['pf:1']);
    expect([...state.q]).toEqual([['pe:1', 2]]);
    expect(heard.get(`${WAKE}pf`)).toEqual(['pf:1']);
    expectConsistent(state);
  });

  it('a heavy head waits for room and nobody behind it overtakes; once room is free it takes every unit at once', async () => {
    await lab.craft({
      m: inUse(3, { h: 1 }),
      h: { 'pa:1': 5_000, 'pa:2': 5_000, 'pa:3': 5_000 },
      q: { 'pb:1/3': 1, 'pc:1': 2 },
      p: { pb: 4_000, pc: 4_000 },
    });
    const heard = await lab.listen('pb', 'pc');
    const partial = await release('pa:1');
    expect(partial.reply.slice(0, 3)).toEqual([2, 2, 3]);
    expect(heard.get(`${WAKE}pc`)).toEqual([]);
    expectConsistent(await lab.state());
    const rest = await release('pa:2', 'pa:3');
    expect(rest.reply.slice(0, 3)).toEqual([3, 1, 3]);
    const state = await lab.state();
    expect([...state.h.keys()].sort()).toEqual(unitsOf('pb:1/3'));
    expect([...state.q.keys()]).toEqual(['pc:1']);
    expect(heard.get(`${WAKE}pb`)).toEqual(['pb:1/3']);
    expectConsistent(state);
  });

  it('withdraws a waiting ticket (a cancelled waiter), and an unknown id changes nothing', async () => {
    await lab.craft({
      m: inUse(1, { h: 1 }),
      h: { 'pa:1': 5_000 },
      q: { 'pb:1': 1 },
      p: { pb: 4_000 },
    });
    const ran = await release('pb:1', 'pz:9');
    expect(ran.reply.slice(0, 3)).toEqual([1, 0, 1]);
    const state = await lab.state();
    expect(state.q.size).toBe(0);
    expect([...state.h.keys()]).toEqual(['pa:1']);
    expectConsistent(state);
  });
});
