/**
 * HEARTBEAT (src/redis/commands/heartbeat-5.lua) alone on crafted state: leases and liveness
 * renewed, lost leases registered again, lost wake-ups and lost tickets found, the TTLs of the
 * keys that carry one renewed.
 */
import { expect, it } from 'vitest';
import { describeRedis } from '../../helpers/redis-server.js';
import {
  COMMON,
  expectAhead,
  expectConsistent,
  inUse,
  META_TTL_FLOOR,
  scripts,
  unitsOf,
  useLab,
  WAKE,
} from './lab.js';

describeRedis('HEARTBEAT alone', () => {
  const lab = useLab();
  const beat = (proc: string, leases: string[], tickets: string[] = []) =>
    lab.run(scripts.heartbeat, [proc, leases.length, ...leases, ...tickets]);

  it('renews every unit of its leases and its liveness, and the 30-day TTLs of the sequence, process and meta keys', async () => {
    const units = Object.fromEntries(unitsOf('pa:1/2').map((unit) => [unit, 1_000]));
    await lab.craft({ m: inUse(3, { h: 1 }), h: units, p: { pa: 1_000 }, s: 5 });
    const ran = await beat('pa', ['pa:1/2']);
    expect(ran.reply.slice(0, 7)).toEqual([[], [], 2, 0, 1, [], 3]);
    const state = await lab.state();
    for (const unit of unitsOf('pa:1/2')) expectAhead(state.h.get(unit), ran, COMMON.leaseMs);
    expectAhead(state.p.get('pa'), ran, COMMON.liveMs);
    for (const key of ['s', 'p', 'm'] as const) {
      expect(state.ttl[key], key).toBeGreaterThan(META_TTL_FLOOR);
    }
    expectConsistent(state);
  });

  it('a lease Redis no longer has is registered again (its request still runs) and reported lost', async () => {
    await lab.craft({ m: inUse(2) });
    const ran = await beat('pa', ['pa:1']);
    expect(ran.reply.slice(0, 3)).toEqual([['pa:1'], [], 1]);
    const state = await lab.state();
    expectAhead(state.h.get('pa:1'), ran, COMMON.leaseMs);
    expect(state.m.h).toBe('1');
    expectConsistent(state);
  });

  it('a ticket granted meanwhile (its wake-up lost) is reported granted and becomes a full lease', async () => {
    await lab.craft({ m: inUse(2, { h: 1 }), h: { 'pa:2': 1_000 }, p: { pa: 1_000 } });
    const ran = await beat('pa', [], ['pa:2']);
    expect(ran.reply.slice(0, 4)).toEqual([[], ['pa:2'], 1, 0]);
    const state = await lab.state();
    expectAhead(state.h.get('pa:2'), ran, COMMON.leaseMs);
    expectConsistent(state);
  });

  it('a ticket Redis lost joins the tail again and is reported requeued', async () => {
    await lab.craft({
      m: inUse(1, { h: 1 }),
      h: { 'pc:1': 5_000 },
      q: { 'pb:1': 1 },
      p: { pb: 4_000 },
      s: 1,
    });
    const ran = await beat('pa', [], ['pa:3']);
    expect(ran.reply.slice(0, 6)).toEqual([[], [], 1, 2, 2, ['pa:3']]);
    const state = await lab.state();
    expect([...state.q]).toEqual([
      ['pb:1', 1],
      ['pa:3', 2],
    ]);
    expectConsistent(state);
  });

  it('a grant to its own ticket needs no wake-up: a free unit goes to the caller though nobody listens', async () => {
    await lab.craft({ m: inUse(1), q: { 'pa:1': 1 }, p: { pa: 1_000 }, s: 1 });
    const ran = await beat('pa', [], ['pa:1']);
    // Granted by fill() within this heartbeat: a claim window, claimed by the owner's CLAIM.
    expect(ran.reply.slice(0, 4)).toEqual([[], [], 1, 0]);
    const state = await lab.state();
    expectAhead(state.h.get('pa:1'), ran, COMMON.claimMs);
    expectConsistent(state);
  });

  it('a grant its owner heard, then stopped listening for (killed before its CLAIM), goes back to the head of the queue when tickets wait for units: the unit goes on', async () => {
    // pk heard its grant pk:1 (the mark: half a ms) and its connections closed; pl heard pl:1
    // and still listens. pk's lease, and pk:2 (a whole ms: a lease near its end, or a grant
    // its owner took itself, unheard), are never taken back.
    await lab.craft({
      m: inUse(4, { h: 1 }),
      h: { 'pk:1': 1_000.5, 'pk:0': 8_000, 'pk:2': 1_000, 'pl:1': 1_000.5 },
      q: { 'pb:1': 5 },
      p: { pk: 4_000, pl: 4_000, pb: 4_000 },
      s: 5,
    });
    const heard = await lab.listen('pb', 'pl');
    const ran = await beat('pb', [], ['pb:1']);
    expect(ran.reply.slice(2, 4)).toEqual([4, 1]);
    const state = await lab.state();
    expect([...state.h.keys()].sort()).toEqual(['pb:1', 'pk:0', 'pk:2', 'pl:1']);
    expectAhead(state.h.get('pb:1'), ran, COMMON.claimMs);
    expect([...state.q]).toEqual([['pk:1', 4]]); // ahead of every ticket: it keeps its turn
    expect(heard.get(`${WAKE}pb`)).toEqual(['pb:1']);
    expect(heard.get(`${WAKE}pl`)).toEqual(['pl:1']); // asked again: a wake-up told twice
    expectConsistent(state);
  });

  it('forgets processes whose liveness ended a lease ago, and keeps the others', async () => {
    await lab.craft({
      m: inUse(2),
      p: { pz: -(COMMON.leaseMs + 1_000), py: -(COMMON.leaseMs - 1_000) },
    });
    const ran = await beat('pa', []);
    expect(ran.reply[4]).toBe(2);
    const state = await lab.state();
    expect([...state.p.keys()].sort()).toEqual(['pa', 'py']);
    expectConsistent(state);
  });
});
