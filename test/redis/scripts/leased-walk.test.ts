/**
 * The walk of a large fleet split over refreshes (includes/leasedPass.lua, leasedLevel.lua): a
 * hash of 5,001 entries walked a slice per refresh gives the levels the whole computation gives
 * (written out again here from leasedFair.lua's comments), reaps expired entries, leaves `_s` and
 * `_r` exact, and no single call walks the fleet (the longest printed, from SLOWLOG: a figure,
 * not a timed assertion).
 */
import { expect, it } from 'vitest';
import { describeRedis } from '../../helpers/redis-server.js';
import {
  type Entry,
  inUse,
  L,
  M,
  ratedInUse,
  silentHeavyHead,
  useLeasedLab,
} from './leased-lab.js';

/** fair() of leasedFair.lua: levels with floors met oldest head first, extra units to low ids. */
function fairOf(
  entries: Map<string, { want: number; need: number; since: number }>,
  total: number,
) {
  const ids = [...entries.keys()];
  const all = ids.reduce((s, id) => s + entries.get(id)!.want, 0);
  if (all <= total) return { level: -1, top: '', met: '' };
  const floor = new Map(
    ids.map((id) => [id, Math.min(entries.get(id)!.need, entries.get(id)!.want)]),
  );
  const order = ids
    .filter((id) => floor.get(id)! > 0)
    .sort((a, b) => entries.get(a)!.since - entries.get(b)!.since || (a < b ? -1 : a > b ? 1 : 0));
  let used = 0;
  let met = '';
  let full = false;
  for (const id of order) {
    if (!full && used + floor.get(id)! <= total) {
      used += floor.get(id)!;
      met = `${entries.get(id)!.since} ${id}`;
    } else {
      full = true;
      floor.set(id, 0);
    }
  }
  const filled = (l: number) =>
    ids.reduce((s, id) => s + Math.min(entries.get(id)!.want, Math.max(floor.get(id)!, l)), 0);
  let lo = 0;
  let hi = total;
  while (lo < hi) {
    const mid = Math.floor((lo + hi + 1) / 2);
    if (filled(mid) <= total) lo = mid;
    else hi = mid - 1;
  }
  const extra = total - filled(lo);
  if (extra <= 0) return { level: lo, top: '', met };
  const at = ids.filter((id) => floor.get(id)! <= lo && entries.get(id)!.want > lo).sort();
  return { level: lo, top: at[Math.min(extra, at.length) - 1] ?? '', met };
}

/**
 * A seeded fleet: 5,000 entries, demands 0-7, a head on every third since a few seconds; rated,
 * rate demands 0-7 and a rate need on most heads; owed units on every seventh (as if met).
 */
function fleet(size: number, seed: number, dead = 0, rated = false) {
  let x = seed;
  const next = (n: number) => {
    x = (x * 1_103_515_245 + 12_345) % 2_147_483_648;
    return (x >>> 16) % n;
  };
  const l: Record<string, Partial<Entry>> = {};
  for (let i = 0; i < size; i++) {
    const wants = next(8);
    const need = i % 3 === 0 ? Math.min(wants, 1 + next(3)) : 0;
    const block = next(3);
    l[`p${(i * 7919).toString(36).padStart(6, '0')}`] = {
      block,
      held: next(3),
      wants,
      need,
      since: need > 0 ? -5_000 + next(4_000) : 0,
      head: need > 0 ? 1 : 0,
      owed: i % 7 === 0 ? 1 + (i % 3) : 0,
      ...(i < dead ? { expiry: -1_000 } : {}),
    };
    if (rated) {
      const rateWants = next(8);
      Object.assign(l[`p${(i * 7919).toString(36).padStart(6, '0')}`]!, {
        rateWants,
        rateNeed: need > 0 ? Math.min(rateWants, next(4)) : 0,
      });
    }
  }
  return l;
}

/** Σ owed of the entries live at `now`. */
function owedOf(state: { now: number; l: Map<string, Entry> }) {
  let owed = 0;
  for (const e of state.l.values()) if (e.expiry > state.now) owed += e.owed;
  return owed;
}

describeRedis('leased REFRESH: the walk of a large fleet, a slice per refresh', () => {
  const lab = useLeasedLab();

  /** Refreshes as `pa` (wants 0, a crafted entry) until the walk under way ends; its calls. */
  async function walkThrough(args = {}) {
    await lab.command('CONFIG', 'SET', 'slowlog-log-slower-than', 0);
    await lab.command('SLOWLOG', 'RESET');
    let calls = 0;
    do {
      await lab.refresh({ scanMs: 0, ...args });
      calls++;
    } while ((await lab.command('HEXISTS', M, 'wc')) === 1 && calls < 1_000);
    const slow = (await lab.command('SLOWLOG', 'GET', 2_000)) as unknown[][];
    const longest = Math.max(
      ...slow.filter((e) => String((e[3] as unknown[])[0]) === 'EVALSHA').map((e) => Number(e[2])),
    );
    return { calls, longest };
  }

  for (const cap of [100, 40]) {
    it(`5,001 processes at cap ${cap}: the levels (b, e, f) are the whole computation's, and no call walks the fleet at once`, async () => {
      const l = fleet(5_000, cap);
      l.pa = { wants: 0 };
      await lab.craft({ m: inUse(cap), l });
      const { calls, longest } = await walkThrough({ cap });
      expect(calls).toBeGreaterThan(10);
      const state = await lab.state();
      const expected = fairOf(
        new Map(
          [...state.l].map(([id, e]) => [id, { want: e.wants, need: e.need, since: e.since }]),
        ),
        cap,
      );
      expect({ level: Number(state.m.b), top: state.m.e, met: state.m.f }).toEqual(expected);
      expect(expected.met).not.toBe('');
      expect(Number(state.m.n)).toBe(5_001);
      console.log(`walk of 5,001 in ${calls} slices, the longest call ${longest} µs (SLOWLOG)`);
    });
  }

  it('expired entries are reaped by their slice, and after a whole walk `_s` is exact', async () => {
    const l = fleet(3_000, 7, 500);
    // pa there from the start: a process whose entry is new during a walk may or may not be
    // counted by it (HSCAN returns what was there for the whole scan; its hash seed is Redis's
    // own, per server), and is by the next (n was 2,500 once in the fault lane, 2026-12-07).
    l.pa = { wants: 0 };
    let s = 0;
    for (const e of Object.values(l)) s += Math.max(e.block ?? 0, e.held ?? 0);
    await lab.craft({ m: inUse(100), l, s });
    await walkThrough({ cap: 100 });
    const state = await lab.state();
    expect(state.l.size).toBe(2_501); // 500 reaped
    let live = 0;
    for (const e of state.l.values()) live += Math.max(e.block, e.held);
    expect(state.s).toBe(live);
    expect(Number(state.m.n)).toBe(2_500 + 1);
  });

  it('a rated fleet: a lapsed entry keeps its share counted, `_r` is Σ counted after a whole walk', async () => {
    const RATE = '1000:1000:0';
    const l: Record<string, Partial<Entry>> = {};
    let r = 0;
    for (let i = 0; i < 1_000; i++) {
      l[`q${String(i).padStart(5, '0')}`] = {
        share: 1,
        rateWants: 2,
        block: 1,
        ...(i % 10 === 0 ? { expiry: -500 } : {}),
        ...(i % 10 === 1 ? { expiry: -5_000 } : {}),
      };
      r += 1;
    }
    await lab.craft({ m: ratedInUse(RATE, 2_000), l, s: 1_000, r });
    await walkThrough({ rate: RATE, cap: 2_000 });
    const state = await lab.state();
    expect(state.l.size).toBe(1_000 - 100 + 1); // lapsed a lease and more ago: reaped
    const lapsed = [...state.l.values()].filter((e) => e.expiry < state.now);
    expect(lapsed).toHaveLength(100);
    expect(lapsed.every((e) => e.block === 0 && e.share === 1)).toBe(true);
    expect(state.r).toBe(900 + (state.l.get('pa')?.share ?? 0));
    expect(state.s).toBe(800 + (state.l.get('pa')?.block ?? 0));
    // The rate's level over the live entries' rate demands, as the whole computation's.
    const live = [...state.l].filter(([, e]) => e.expiry > state.now);
    const rated = fairOf(
      new Map(live.map(([id, e]) => [id, { want: e.rateWants, need: 0, since: 0 }])),
      1_000,
    );
    expect({ level: Number(state.m.rb), top: state.m.re }).toEqual({
      level: rated.level,
      top: rated.top,
    });
    expect(rated.level).toBe(1);
  });
  it("a rated fleet of 5,001: the rate levels (rb, re, rf) are fair()'s with rate needs met oldest head first, the cap's too", async () => {
    const RATE = '200:1000:0';
    const l = fleet(5_000, 11, 0, true);
    l.pa = { wants: 0 };
    await lab.craft({ m: ratedInUse(RATE, 60), l });
    const args = { rate: RATE, cap: 60, wants: 3, need: 2, head: 1, rateWants: 4, rateNeed: 3 };
    const { calls } = await walkThrough(args);
    expect(calls).toBeGreaterThan(10);
    const state = await lab.state();
    const of = (pick: (e: Entry) => { want: number; need: number; since: number }) =>
      new Map([...state.l].map(([id, e]) => [id, pick(e)]));
    const cap = fairOf(
      of((e) => ({ want: e.wants, need: e.need, since: e.since })),
      60,
    );
    const rate = fairOf(
      of((e) => ({ want: e.rateWants, need: e.rateNeed, since: e.since })),
      200,
    );
    expect({ level: Number(state.m.b), top: state.m.e, met: state.m.f }).toEqual(cap);
    expect({ level: Number(state.m.rb), top: state.m.re, met: state.m.rf }).toEqual(rate);
    // Floors bite: rate floors were met, and the level alone would not give them.
    expect(rate.met).not.toBe('');
    expect(rate.level).toBeLessThan(2);
    expect(state.l.get('pa')).toMatchObject({ rateNeed: 3, owed: 0 });
  });

  it('M.o after a whole sliced walk is Σ owed of the live entries (the dead ones taken out as reaped)', async () => {
    const l = fleet(3_000, 5, 400);
    let all = 0;
    for (const e of Object.values(l)) all += e.owed ?? 0;
    l.pa = { wants: 0 };
    await lab.craft({ m: inUse(100, { o: all }), l });
    await walkThrough({ cap: 100 });
    const state = await lab.state();
    expect(state.l.size).toBe(2_601);
    expect(Number(state.m.o)).toBe(owedOf(state));
    expect(owedOf(state)).toBeLessThan(all);
  });

  it('M.o errs high, never low: a process whose owed rose after its slice is counted at its new value', async () => {
    const l = fleet(3_000, 5);
    let all = 0;
    for (const e of Object.values(l)) all += e.owed ?? 0;
    l.pa = { wants: 0 };
    // Every floor met at the last walk (`f` past every head), the cap all counted: a met floor
    // gets no unit, all of it owed.
    const m = inUse(100, { o: all, b: 0, f: `${Number.MAX_SAFE_INTEGER} ~` });
    await lab.craft({ m, l, s: 100 });
    // A process the first slice walks (the walk's HSCAN from cursor 0), owing nothing then.
    const first = ((await lab.command('HSCAN', L, 0, 'COUNT', 64)) as [string, string[]])[1];
    const late = first.find((id, i) => i % 2 === 0 && l[id] !== undefined && !l[id]!.owed)!;
    for (let i = 0; i < 5; i++) await lab.refresh({ cap: 100, scanMs: 0 });
    expect(await lab.command('HEXISTS', M, 'wc')).toBe(1);
    await lab.refresh({ cap: 100, scanMs: 0, processId: late, wants: 3, need: 3, head: 2 });
    const rise = (await lab.state()).l.get(late)!.owed;
    expect(rise).toBeGreaterThan(0);
    await walkThrough({ cap: 100 });
    const state = await lab.state();
    expect(owedOf(state)).toBe(all + rise);
    const owed = Number(state.m.o);
    expect(owed).toBeGreaterThanOrEqual(owedOf(state));
    expect(owed).toBeLessThanOrEqual(owedOf(state) + rise);
  });

  it('the silent heavy head in a fleet walked in slices: a process that stopped refreshing keeps its block counted but no floor and nothing owed (seed 82285, past WALK_FULL)', async () => {
    // As leased-refresh's "the silent heavy head", beside 200 idle entries: pb's head of 3 is the
    // oldest and owed 2, but pb last refreshed half a lease and a gap ago; pa's head of 3 came
    // later. The small walk stopped meeting a silent floor in 82285's fix; the slices did not.
    const l: Record<string, Partial<Entry>> = {};
    for (let i = 0; i < 200; i++) l[`q${String(i).padStart(3, '0')}`] = {};
    l.pb = silentHeavyHead();
    // pa's entry too: a slice counts the entries it finds (pa's head, known since later).
    l.pa = { wants: 3, need: 3, head: 1, since: -1000 };
    await lab.craft({ m: inUse(4, { o: 2, t: -10_000 }), l, s: 1 });
    const head = { cap: 4, wants: 3, need: 3, head: 1 };
    await walkThrough(head);
    const state = await lab.state();
    expect(Number(state.m.n)).toBe(202); // a walk in slices: more than WALK_FULL entries
    // pb counts as the block it has (1): pa's 3 fit beside it, every demand met.
    expect(state.m.f ?? '').not.toContain('pb');
    expect(Number(state.m.o ?? 0)).toBe(0);
    const pa = await lab.refresh(head);
    // Before: pb's floor met again (oldest) and its owed units kept from pa: target 0.
    expect(pa.answer).toMatchObject({ target: 3, block: 3 });
  });
});
