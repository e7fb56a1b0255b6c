/**
 * A leased gate's rate, in REFRESH alone (src/redis/commands/leasedRefresh-4.lua and its parts
 * includes/leasedCounted.lua, leasedShare.lua, leasedClose.lua): how a share is counted while a
 * hold is on (countedOf), a cut and a process that cuts itself, slow start, a clean close's
 * tail, and lapsed entries. `_r` is checked against the rule written out in leased-lab.ts.
 *
 * The rate is 10 calls per 10 s with a burst of 4: a share's burst is floor(0.4 × share).
 */
import { expect, it } from 'vitest';
import { describeRedis } from '../../helpers/redis-server.js';
import {
  countedAt,
  expectAhead,
  expectBlocksWithinCap,
  expectRateCounted,
  inUse,
  L,
  M,
  type RefreshArgs,
  ratedInUse,
  useLeasedLab,
} from './leased-lab.js';

const RATE = '10:10000:4';
const PER = 10_000;
/** A process of a gate with a rate, as the gate sends it (holdMs: a command timeout). */
const RATED: Partial<RefreshArgs> = { rate: RATE, holdMs: 500 };
const countedAtFor = (entry: Parameters<typeof countedAt>[0], at: number) =>
  countedAt(entry, at, RATE);

/** pa with a head of cost 3 waiting (a rate floor of 5: burst share floor(0.4 × 5) = 2), walking. */
const COST_3_HEAD: Partial<RefreshArgs> = {
  ...RATED,
  rateWants: 5,
  rateNeed: 5,
  need: 1,
  head: 3,
  scanMs: 0,
};

describeRedis('leased REFRESH alone: the rate', () => {
  const lab = useLeasedLab();

  for (const [phase, until, counted] of [
    ['before until - per: the hold in full', 15_000, 8],
    ['between until - per and until: the share, one call and the lost burst (3 - 0)', 5_000, 6],
    ['after until: the share alone', -5_000, 2],
  ] as const) {
    it(`a share of 2 with a hold of 8 is counted ${counted} ${phase}`, async () => {
      await lab.craft({
        m: ratedInUse(RATE),
        l: { pb: { share: 2, counted: 8, until, rateWants: 2 } },
        r: 8,
      });
      const ran = await lab.refresh(RATED);
      expect(ran.answer.counted).toBe(counted);
      expectRateCounted(await lab.state(), RATE, ran.answer.now);
    });
  }

  it('a hold the share has since grown past counts no edge: Σ counted stays within the limit at the next walk', async () => {
    // pb: share 5 with an older hold of 4 in its edge phase (its share went up since); pc: 5.
    // An edge counted here would make the walk's Σ 11 at a limit of 10 (the unit pc took).
    await lab.craft({
      m: ratedInUse(RATE),
      l: {
        pb: { share: 5, counted: 4, until: 5_000, rateWants: 5 },
        pc: { share: 5, rateWants: 5 },
      },
      r: 10,
    });
    const ran = await lab.refresh({ ...RATED, scanMs: 0 });
    expect(ran.answer.counted).toBeLessThanOrEqual(10);
    expectRateCounted(await lab.state(), RATE, ran.answer.now);
  });

  it('a cut: the share goes to the fair target, the old one is counted in full until it reaches the process (holdMs), then one call more and the lost burst for a window', async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: { pa: { share: 6, rateWants: 10 }, pb: { share: 4, rateWants: 10 } },
      r: 10,
    });
    const ran = await lab.refresh({ ...RATED, rateUsed: 6, rateWants: 10, selfcut: 0 });
    expect(ran.answer).toMatchObject({ share: 5, rateTarget: 5, counted: 10 });
    const state = await lab.state();
    const pa = state.l.get('pa')!;
    expect(pa).toMatchObject({ share: 5, counted: 6, rateWants: 10 });
    expectAhead(pa.until, ran, 500 + PER);
    expectRateCounted(state, RATE, ran.answer.now);
  });

  it('a process that cuts itself (selfcut) and reports sending above its new fair share keeps that share: it is answered its target and cuts itself at once', async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: { pa: { share: 6, rateWants: 10 }, pb: { share: 4, rateWants: 10 } },
      r: 10,
    });
    const ran = await lab.refresh({ ...RATED, rateUsed: 6, rateWants: 10, selfcut: 1 });
    expect(ran.answer).toMatchObject({ share: 6, rateTarget: 5, counted: 10 });
    let state = await lab.state();
    expect(state.l.get('pa')).toMatchObject({ share: 6, counted: 0, until: 0 });
    expectRateCounted(state, RATE, ran.answer.now);
    // Its refresh right after, at the cut: counted at the cut from now (one call more and the
    // lost burst for a window), not a command timeout later.
    const cut = await lab.refresh({ ...RATED, rateUsed: 5, rateWants: 10, selfcut: 1 });
    expect(cut.answer).toMatchObject({ share: 5, rateTarget: 5, counted: 10 });
    state = await lab.state();
    const pa = state.l.get('pa')!;
    expect(pa).toMatchObject({ share: 5, counted: 6 });
    expectAhead(pa.until, cut, PER);
    expectRateCounted(state, RATE, cut.answer.now);
  });

  it('a self-cut process is not kept above the share it had (rused > its share is cut as any)', async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: { pa: { share: 5, rateWants: 10 }, pb: { share: 4, rateWants: 10 } },
      r: 9,
    });
    const ran = await lab.refresh({ ...RATED, rateUsed: 6, rateWants: 10, selfcut: 1 });
    expect(ran.answer.share).toBe(5);
    expect((await lab.state()).l.get('pa')).toMatchObject({ share: 5, counted: 6 });
  });

  it('an earlier hold keeps its own end when the share stays', async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: { pa: { share: 3, counted: 6, until: 15_000, rateWants: 3 } },
      r: 6,
    });
    const at = await lab.now();
    const ran = await lab.refresh({ ...RATED, rateUsed: 3, rateWants: 3 });
    expect(ran.answer).toMatchObject({ share: 3, counted: 6 });
    const pa = (await lab.state()).l.get('pa')!;
    expect(pa).toMatchObject({ share: 3, counted: 6 });
    expect(Math.abs(pa.until - (at + 15_000))).toBeLessThan(50);
  });

  it('slow start: a share grows to the equal split at once, past it at most twofold a refresh', async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: { pa: { share: 1, rateWants: 1 }, pb: {} },
      r: 1,
    });
    const first = await lab.refresh({ ...RATED, rateUsed: 1, rateWants: 10 });
    expect(first.answer).toMatchObject({ share: 5, rateTarget: 10 });
    const second = await lab.refresh({ ...RATED, rateUsed: 5, rateWants: 10 });
    expect(second.answer).toMatchObject({ share: 10, rateTarget: 10, counted: 10 });
    expectRateCounted(await lab.state(), RATE, second.answer.now);
  });

  it('the cost stall: a head of cost 3 needs a share of 5 (its burst share floor(0.4 x 5) = 2 = cost - 1); met as a floor oldest first, it gets 5 where the level gave 3, and the others share the rest', async () => {
    // The campaign's seeds 2017, 2019, 5023: a process whose burst share + 1 is below its head's
    // cost granted nothing until its share grew, and in a busy fleet it never did.
    await lab.craft({
      m: ratedInUse(RATE),
      l: {
        pb: { rateWants: 10, need: 1, since: -500 },
        pc: { rateWants: 10, need: 1, since: -400 },
      },
    });
    const pa = await lab.refresh(COST_3_HEAD);
    expect(pa.answer).toMatchObject({ share: 5, rateTarget: 5 });
    const state = await lab.state();
    expect(state.m.rf).toBe(`${state.l.get('pa')!.since} pa`);
    expect(state.l.get('pa')!.rateNeed).toBe(5);
    const pb = await lab.refresh({ ...RATED, processId: 'pb', rateWants: 10, need: 1 });
    expect(pb.answer.rateTarget).toBeLessThanOrEqual(3);
    expectRateCounted(await lab.state(), RATE, pb.answer.now);
  });

  it('rate floors are met oldest head first while they fit, and one that does not fit is no minimum: three heads of cost 3 (floors of 5) in a rate of 10', async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: {
        pb: { rateWants: 5, rateNeed: 5, need: 1, since: -500, head: 1 },
        pd: { rateWants: 10, need: 1, since: -300 },
      },
    });
    // pb's floor (oldest) and pa's fit (5 + 5): both met.
    const pa = await lab.refresh(COST_3_HEAD);
    expect(pa.answer.rateTarget).toBe(5);
    const paSince = (await lab.state()).l.get('pa')!.since;
    expect((await lab.state()).m.rf).toBe(`${paSince} pa`);
    // pc's head, newer than pa's, does not fit: no minimum, it gets the level (0 here).
    await lab.refresh({ ...RATED, processId: 'pc', rateWants: 10, rateNeed: 5, need: 1, head: 9 });
    const pc = await lab.refresh({
      ...RATED,
      processId: 'pc',
      rateWants: 10,
      rateNeed: 5,
      need: 1,
      head: 9,
      scanMs: 0,
    });
    expect(pc.answer.rateTarget).toBeLessThan(5);
    expect((await lab.state()).m.rf).toBe(`${paSince} pa`);
    expectRateCounted(await lab.state(), RATE, pc.answer.now);
  });

  it('no share of the rate: no units of the cap beyond what it holds (they would sit idle beside processes with a share)', async () => {
    // The campaign's seed 20010: rate 5/500 ms over 7 processes, the cap's units in the two
    // without a share while heads of 3 waited in those with one: the partner at 50-60%.
    await lab.craft({
      m: ratedInUse(RATE, 4, { t: -1, b: -1, rb: -1 }),
      l: { pb: { share: 10, rateWants: 10 } },
      r: 10,
    });
    const pa = await lab.refresh({ ...RATED, wants: 3, rateWants: 5, held: 1 });
    expect(pa.answer).toMatchObject({ share: 0, block: 1, target: 1 });
    // With a share, the same process takes its block.
    await lab.command('HSET', L, 'pb', '0 0 0 0 0 0 0 0');
    await lab.command('HSET', L, '_r', 0);
    const again = await lab.refresh({ ...RATED, wants: 3, rateWants: 5, held: 1 });
    expect(again.answer.share).toBeGreaterThan(0);
    expect(again.answer.block).toBe(3);
    expectBlocksWithinCap(await lab.state());
  });

  for (const [sent, units] of [
    ['1 0 0 0 0 0 0 0', 1],
    ['5 4 0 0 0 0 0 0', 3],
    ['', 3],
  ] as const) {
    it(`a clean close with a rate, sending at 6 and ${sent === '' ? 'no sends reported' : `${sent} sent by age`}: a tail <id>~0 of ${units} (min(sent, burstOf(6) + 1)) counted for a window`, async () => {
      await lab.craft({
        m: ratedInUse(RATE),
        l: { pa: { block: 1, held: 1, share: 6, rateWants: 6 }, pb: { share: 3, rateWants: 3 } },
        r: 9,
        s: 1,
      });
      const ran = await lab.refresh({ ...RATED, closing: 1, rateUsed: 6, sent });
      expect(ran.answer).toMatchObject({ block: 0, counted: 3 + units });
      const state = await lab.state();
      expect([...state.l.keys()].sort()).toEqual(['pa~0', 'pb']);
      const tail = state.l.get('pa~0')!;
      expect(tail).toMatchObject({ block: 0, held: 0, share: 0, counted: units });
      expectAhead(tail.expiry, ran, 0);
      expectAhead(tail.until, ran, 2 * PER);
      expect(state.r).toBe(3 + units);
      expectRateCounted(state, RATE, ran.answer.now);
      expectBlocksWithinCap(state);
    });
  }

  it('a clean close whose last call cost more than its burst share (sent on idle credit) reports its lead: min(sent, lead) counted for a window, where burstOf(6) + 1 would say 3', async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: { pa: { block: 1, held: 1, share: 6, rateWants: 6 }, pb: { share: 3, rateWants: 3 } },
      r: 9,
      s: 1,
    });
    const ran = await lab.refresh({
      ...RATED,
      closing: 1,
      rateUsed: 6,
      sent: '5 1 0 0 0 0 0 0',
      lead: 5,
    });
    expect(ran.answer).toMatchObject({ block: 0, counted: 3 + 5 });
    const state = await lab.state();
    expect(state.l.get('pa~0')).toMatchObject({ counted: 5 });
    expectRateCounted(state, RATE, ran.answer.now);
  });

  it('the cut-after-idle-credit race (campaign seed 74047): a process that sent a call on idle credit and cuts its share to 0 reports its lead, and Redis counts that lead for the window after, where one call and the lost burst (2) would let another share take what it had sent', async () => {
    // pa sent a call of cost 4 at share 4 (burst share 1: a paced share runs at most 2 ahead)
    // and cuts itself to 0; pb wants the whole rate.
    await lab.craft({
      m: ratedInUse(RATE),
      l: { pa: { share: 4, rateWants: 4, rc: 4 }, pb: { share: 6, rateWants: 10, rc: 6 } },
      r: 10,
    });
    const pa = await lab.refresh({ ...RATED, rateUsed: 0, rateWants: 0, lead: 4 });
    expect(pa.answer).toMatchObject({ share: 0, counted: 10 });
    const state = await lab.state();
    expect(state.l.get('pa')).toMatchObject({ share: 0, counted: 4, rc: 4, rl: 4 });
    expectAhead(state.l.get('pa')!.until, pa, PER);
    expectRateCounted(state, RATE, pa.answer.now);
    // pb is held at 6 for that window (before: 8, beside the 4 units pa had just sent).
    const pb = await lab.refresh({ ...RATED, processId: 'pb', rateUsed: 6, rateWants: 10 });
    expect(pb.answer.share).toBe(6);
    expectRateCounted(await lab.state(), RATE, pb.answer.now);
    // Without a reported lead the edge is as before: one call and the lost burst.
    await lab.craft({ l: { pa: { share: 4, rateWants: 4, rc: 4 } }, r: 10 });
    await lab.refresh({ ...RATED, rateUsed: 0, rateWants: 0 });
    expect((await lab.state()).l.get('pa')).toMatchObject({ counted: 4, rc: 2 });
  });

  it('a cut to 0 Redis made, told the lead by the refresh that follows it: the hold keeps its end and counts that lead as its edge; an entry without a lead keeps fourteen numbers', async () => {
    // pa was cut from 6 to 0 (the hold in full until the answer reached it), and its answer
    // found its TAT 5 units ahead (a call of cost 5 sent on idle credit while the answer was on
    // its way): it refreshes at once and says so.
    const at = await lab.craft({
      m: ratedInUse(RATE),
      l: { pa: { share: 0, counted: 6, until: PER + 400, rateWants: 0, rc: 6 } },
      r: 6,
    });
    const pa = await lab.refresh({ ...RATED, rateUsed: 0, rateWants: 0, lead: 5 });
    const entry = (await lab.state()).l.get('pa')!;
    expect(entry).toMatchObject({ share: 0, counted: 6, until: at + PER + 400, rl: 5 });
    // In full until `until - per`; then the lead, where one call and the lost burst say 3.
    expect(pa.answer.counted).toBe(6);
    expect(countedAtFor(entry, entry.until - 1)).toBe(5);
    // A share above 0 carries the lead into its pace (GateRate.share): the edge as before.
    expect(countedAtFor({ ...entry, share: 1 }, entry.until - 1)).toBe(1 + 3);
    expectRateCounted(await lab.state(), RATE, pa.answer.now);
    const raw = (await lab.command('HGET', L, 'pa')) as string;
    expect(raw.split(' ')).toHaveLength(15);
    await lab.craft({ l: { pb: { share: 3, rateWants: 3, rc: 3 } }, r: 9 });
    await lab.refresh({ ...RATED, processId: 'pb', rateUsed: 3, rateWants: 3, lead: 2 });
    expect(((await lab.command('HGET', L, 'pb')) as string).split(' ')).toHaveLength(14);
  });

  it('a clean close while a cut to 0 is still counted: its tail keeps what the hold counted (min(sent, that)), where before the entry and its hold went with nothing left', async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: {
        pa: { share: 0, counted: 4, until: PER / 2, rateWants: 0, rc: 4, rl: 4 },
        pb: { share: 6, rateWants: 6, rc: 6 },
      },
      r: 10,
    });
    const ran = await lab.refresh({
      ...RATED,
      closing: 1,
      rateUsed: 0,
      sent: '0 0 0 4 0 0 0 0',
      lead: 0,
    });
    expect(ran.answer.counted).toBe(6 + 4);
    const state = await lab.state();
    expect(state.l.get('pa~0')).toMatchObject({ counted: 4 });
    expectRateCounted(state, RATE, ran.answer.now);
  });

  it('a clean close parks its share for a window: the survivors keep their level, and a process asking for its first share takes the place (a rolling deploy)', async () => {
    // pa, pb and pc at 3-4 of 10, all busy; pa closes. Before: the walk of the close set the
    // level to 5 for the two left, pb and pc grew into pa's share at their next refresh, and
    // were cut back when pa's replacement asked, each cut counted for a window.
    await lab.craft({
      m: ratedInUse(RATE),
      l: {
        pa: { share: 4, rateWants: 10 },
        pb: { share: 3, rateWants: 10 },
        pc: { share: 3, rateWants: 10 },
      },
      r: 10,
    });
    const closed = await lab.refresh({
      ...RATED,
      closing: 1,
      rateUsed: 4,
      rateWants: 10,
      sent: '1 0 0 0 0 0 0 0',
      scanMs: 0,
      leadMs: 180,
    });
    let state = await lab.state();
    // With its next slot: when its pace would have let its next call go (180 ms on).
    expect(state.m.pk).toBe(`${closed.answer.now + PER}:4:${closed.answer.now + 180}`);
    expect(Number(state.m.rb), 'the level kept pa its place').toBe(3);
    // pb refreshes, walking: its share stays at the level (3, or 4 as the first of the three
    // ids that take the tenth unit), not the 5 of a level over two; Σ counted as answered
    // includes the parked 4, so it does not ask for them again and again.
    const pb = await lab.refresh({
      ...RATED,
      processId: 'pb',
      rateUsed: 3,
      rateWants: 10,
      scanMs: 0,
    });
    expect(pb.answer.share).toBeLessThanOrEqual(4);
    expect(pb.answer.counted).toBe((await lab.state()).r! + 4);
    // The replacement, pd: its first refresh with a demand takes the place, within what the
    // others and pa's tail leave of the rate (10 - 4 - 3 - 1).
    const pd = await lab.refresh({ ...RATED, processId: 'pd', rateWants: 10, scanMs: 0 });
    expect(pd.answer.share).toBe(2);
    // And goes on from pa's pace: its first call no sooner than pa's next slot (campaign seed
    // 92287: a replacement sent at once, 6 in a window at a promise of 5).
    expect(pd.answer.rateSlot).toBeGreaterThan(0);
    expect(pd.answer.rateSlot).toBeLessThanOrEqual(closed.answer.now + 180 - pd.answer.now);
    state = await lab.state();
    expect(state.m.pk).toBeUndefined();
    expect(Number(state.m.rb)).toBe(3);
    expectRateCounted(state, RATE, pd.answer.now);
  });

  it('a share given back goes on from its pace: a process taking a share from none is answered the slot (M.cs), one that had a share is not (cap 1 over 2 at 3 per 500 ms: shares handed from process to process each sent at once, 4 calls in 405 ms)', async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: { pa: { share: 4, rateWants: 10 }, pb: { share: 3, rateWants: 10 } },
      r: 7,
    });
    // pa gives its whole share back (it holds no unit any more: it asks for none), its pace
    // 300 ms from its next call.
    const cut = await lab.refresh({ ...RATED, rateUsed: 0, rateWants: 0, leadMs: 300 });
    expect(cut.answer.share).toBe(0);
    let state = await lab.state();
    expect(Number(state.m.cs)).toBe(cut.answer.now + 300);
    // pc, with no share, takes one: its first call no sooner than pa's next slot.
    const pc = await lab.refresh({ ...RATED, processId: 'pc', rateWants: 10, scanMs: 0 });
    expect(pc.answer.share).toBeGreaterThan(0);
    expect(pc.answer.rateSlot).toBeGreaterThan(0);
    expect(pc.answer.rateSlot).toBeLessThanOrEqual(cut.answer.now + 300 - pc.answer.now);
    // pb grows from its own share: its own pace goes on, no slot.
    const pb = await lab.refresh({
      ...RATED,
      processId: 'pb',
      rateUsed: 3,
      rateWants: 10,
      scanMs: 0,
    });
    expect(pb.answer.rateSlot).toBe(0);
    // A cut with no lead (its bucket full) sets no slot later than the one held.
    const idle = await lab.refresh({
      ...RATED,
      processId: 'pb',
      rateUsed: 0,
      rateWants: 0,
      scanMs: 0,
      leadMs: 0,
    });
    state = await lab.state();
    expect(Number(state.m.cs)).toBe(cut.answer.now + 300);
    expectRateCounted(state, RATE, idle.answer.now);
  });

  it('a parked place lapses after a window: the survivors grow into it', async () => {
    await lab.craft({
      m: ratedInUse(RATE, undefined, { pk: '1:4' }),
      l: { pb: { share: 3, rateWants: 10 }, pc: { share: 3, rateWants: 10 } },
      r: 6,
    });
    const pb = await lab.refresh({
      ...RATED,
      processId: 'pb',
      rateUsed: 3,
      rateWants: 10,
      scanMs: 0,
    });
    expect(pb.answer.share).toBe(5);
    expect(pb.answer.counted).toBe(8);
  });

  it('the last process closing with a rate leaves its tail and L for a window only', async () => {
    await lab.craft({ m: ratedInUse(RATE), l: { pa: { share: 4, rateWants: 4 } }, r: 4 });
    await lab.refresh({ ...RATED, closing: 1, rateUsed: 4, sent: '2 0 0 0 0 0 0 0' });
    const state = await lab.state();
    expect([...state.l.keys()]).toEqual(['pa~0']);
    expect(state.ttl.l).toBeGreaterThan(PER - 1_000);
    expect(state.ttl.l).toBeLessThanOrEqual(PER + 1);
  });

  it("a closed process's tail is counted by the walks until a window after its close, then reaped", async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: {
        'py~0': { expiry: -PER - 1, counted: 2, until: PER - 1 },
        'pz~0': { expiry: -1_000, counted: 3, until: 2 * PER - 1_000 },
      },
      r: 5,
    });
    const ran = await lab.refresh(RATED);
    expect(ran.answer.counted).toBe(3);
    const state = await lab.state();
    expect([...state.l.keys()].sort()).toEqual(['pa', 'pz~0']);
    expectRateCounted(state, RATE, ran.answer.now);
  });

  it("a lapsed entry's permits go at the walk, its share stays counted until per after its lease", async () => {
    await lab.craft({
      m: ratedInUse(RATE),
      l: {
        pb: { expiry: -1_000, block: 2, held: 1, wants: 2, share: 3, rateWants: 3 },
        pc: { expiry: -PER - 1_000, block: 1, held: 1, share: 2, rateWants: 2 },
      },
      s: 3,
      r: 5,
    });
    const at = await lab.now();
    const ran = await lab.refresh({ ...RATED, wants: 4 });
    expect(ran.answer).toMatchObject({ block: 4, counted: 3 });
    const state = await lab.state();
    expect(state.l.has('pc')).toBe(false);
    const pb = state.l.get('pb')!;
    expect(pb).toMatchObject({ block: 0, held: 0, wants: 0, share: 3 });
    expect(Math.abs(pb.expiry - (at - 1_000))).toBeLessThan(50);
    expectBlocksWithinCap(state);
    expectRateCounted(state, RATE, ran.answer.now);
  });

  it('a process with a rate adopts a gate kept without one (its layout and rate written); one without a rate is then refused', async () => {
    await lab.craft({ m: inUse(), l: { pb: { block: 1, held: 1, wants: 1 } }, s: 1 });
    const ran = await lab.refresh({ ...RATED, rateWants: 2 });
    expect(ran.answer).toMatchObject({ share: 2, rate: RATE });
    expect(await lab.command('HMGET', M, 'v', 'rt')).toEqual(['leased/1+rate', RATE]);
    await expect(lab.refresh({ processId: 'pb', wants: 1, held: 1 })).rejects.toThrow(
      'HOSTGATE_LAYOUT leased/1+rate',
    );
    expect(await lab.command('HEXISTS', L, 'pa')).toBe(1);
  });

  it("the rate lives in Redis: a process asking for another gets Redis's, setRate changes it", async () => {
    await lab.craft({ m: ratedInUse(RATE) });
    expect((await lab.refresh({ ...RATED, rate: '20:1000:0' })).answer.rate).toBe(RATE);
    const set = await lab.refresh({ ...RATED, setRate: '20:1000:0', rateWants: 20 });
    expect(set.answer.rate).toBe('20:1000:0');
    expect(await lab.command('HGET', M, 'rt')).toBe('20:1000:0');
  });
});
