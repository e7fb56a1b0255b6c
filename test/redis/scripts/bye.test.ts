/**
 * BYE (src/redis/commands/bye-5.lua) alone on crafted state: a process that closes cleanly
 * leaves the process set; the last one takes what no live process owns with it (issue 32, item
 * 8: the campaign's seed 10040, a lease a snapshot brought back after its owner released it,
 * stayed in a lease set without a TTL once every replica had closed).
 */
import { expect, it } from 'vitest';
import { describeRedis } from '../../helpers/redis-server.js';
import { expectConsistent, inUse, scripts, useLab } from './lab.js';

describeRedis('BYE alone', () => {
  const lab = useLab();
  const bye = (proc: string) => lab.run(scripts.bye, [proc]);
  /** pa about to leave, pb left behind (live 4 s more) with a lease and a ticket. */
  const othersLeft = () =>
    lab.craft({
      m: inUse(2, { h: 1 }),
      h: { 'pb:1': 5_000 },
      q: { 'pb:2': 1 },
      p: { pa: 4_000, pb: 4_000 },
    });

  it('a process that is not the last leaves the set; the others keep their leases and tickets, both expiring a lease after the last of them lapses unless one runs a script (seeds 97041, 97059: a dead process taken for live past a gap)', async () => {
    await othersLeft();
    const ran = await bye('pa');
    expect(ran.reply).toEqual([1, 1, 1]);
    const state = await lab.state();
    expect([...state.p.keys()]).toEqual(['pb']);
    expect([...state.h.keys()]).toEqual(['pb:1']);
    expect([...state.q.keys()]).toEqual(['pb:2']);
    // pb's liveness (4 s) and a lease (10 s) on: past its last lease (5 s).
    for (const ttl of [state.ttl.h, state.ttl.q]) {
      expect(ttl).toBeGreaterThan(13_000);
      expect(ttl).toBeLessThanOrEqual(14_001);
    }
    expect(state.m.oq).toBe('1');
    expectConsistent(state);
  });

  it("the others' next script takes the TTL off the queue and the lease set again", async () => {
    await othersLeft();
    await bye('pa');
    await lab.run(scripts.release, ['pb:9']);
    const state = await lab.state();
    expect([state.ttl.h, state.ttl.q]).toEqual([-1, -1]);
    expect(state.m.oq).toBeUndefined();
    expectConsistent(state);
  });

  it('the last live process to leave drops the queue and sets the lease set to expire with its last lease: no key without a TTL is left, no lease taken back early', async () => {
    // 'pz:1': a lease a restart from a snapshot brought back after pz released it; 'pk:1': a
    // killed process's lease, pk past its liveness; 'py:1': a ticket of a process taken for dead.
    await lab.craft({
      m: inUse(3, { h: 1 }),
      h: { 'pz:1': 2_000, 'pk:1': 5_000 },
      q: { 'py:1': 1 },
      p: { pa: 4_000, pk: -100 },
    });
    const ran = await bye('pa');
    expect(ran.reply).toEqual([2, 0, 1]);
    const state = await lab.state();
    expect([...state.h.keys()].sort()).toEqual(['pk:1', 'pz:1']);
    expect(state.ttl.h).toBeGreaterThan(4_000);
    expect(state.ttl.h).toBeLessThanOrEqual(5_001);
    expect(state.ttl.q).toBe(-2);
    expect(state.m.o).toBe('1');
    expectConsistent(state);
  });

  it('the gate in use again: the next script takes the TTL off the lease set', async () => {
    await lab.craft({ m: inUse(2, { h: 1 }), h: { 'pz:1': 5_000 }, p: { pa: 4_000 } });
    await bye('pa');
    await lab.run(scripts.release, ['pz:9']);
    const state = await lab.state();
    expect(state.ttl.h).toBe(-1);
    expect(state.m.o).toBeUndefined();
    expectConsistent(state);
  });

  it('the lease set expired meanwhile: the next script reads it as emptied (holders flag cleared), not as evicted (no recovery window)', async () => {
    await lab.craft({ m: inUse(2, { h: 1 }), h: { 'pz:1': 30 }, p: { pa: 4_000 } });
    await bye('pa');
    await new Promise((resolve) => setTimeout(resolve, 120));
    const ran = await lab.run(scripts.acquire, ['pb', 'pb:1', 1, 5_000]);
    expect(ran.reply.slice(0, 2)).toEqual([1, 1]);
    const state = await lab.state();
    expect(state.m.o).toBeUndefined();
    expect(state.m.h).toBe('1');
    expectConsistent(state);
  });

  it('a gate whose meta hash is gone (flushed since): BYE writes nothing, and opens no recovery window for the next process', async () => {
    const ran = await bye('pa');
    expect(ran.reply).toEqual([0, 0, 0]);
    const state = await lab.state();
    expect(state.m).toEqual({});
    expect(state.p.size + state.h.size + state.q.size).toBe(0);
  });

  it('a stalled process still live keeps everything: the leaver is not the last live one', async () => {
    await lab.craft({
      m: inUse(2, { h: 1 }),
      h: { 'ps:1': 5_000 },
      q: { 'ps:2': 1 },
      p: { pa: 4_000, ps: 1_000 },
    });
    const ran = await bye('pa');
    expect(ran.reply).toEqual([1, 1, 1]);
    const state = await lab.state();
    expect(state.m.o).toBeUndefined();
    // Expiring a lease after ps lapses (1 s + 10 s) unless ps runs a script before.
    expect(state.ttl.h).toBeGreaterThan(10_000);
    expect(state.ttl.q).toBeGreaterThan(10_000);
    expect(state.m.oq).toBe('1');
    expectConsistent(state);
  });
});
