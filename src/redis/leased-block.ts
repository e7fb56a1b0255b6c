/**
 * A leased gate's block of the cap as Redis last answered it, what a refresh reports as held,
 * and when to ask again (issue 35: on change, not every interval). While the gate's signals are
 * heard (leased-signals.ts) a busy process refreshes when its demand moved past what its block
 * serves, when Redis says a process waits for units it could give back or that the fair level
 * moved, when the state was lost, and otherwise once per half lease (as an idle one). While they
 * are not heard: every `refreshMs`, as before. Early asks come at most every `askMs`.
 */
import type { RateShare } from './leased-rate-share.js';
import type { BlockAnswer } from './leased-refresh.js';
import type { ResolvedLeasedOptions } from './leased-share.js';

/** What the timer weighs besides the block: this process's use and demand now. */
export interface Demands {
  /** Permits held here. */
  held: number;
  /** Demand of the cap (held + queued, smoothed). */
  wants: number;
  /** Demand of the rate (0 without one). */
  rateWants: number;
  rate: RateShare | undefined;
  /** The signal subscription's epoch while the gate's channel is heard, -1 while it is not. */
  signals: number;
  /** The heaviest head waiting (0: none). */
  need: number;
  /** That head is another than the last refresh reported (the one reported was served). */
  moved?: boolean;
  /** The heaviest head the last refresh reported (0: none). */
  reported?: number;
}

export class BlockLease {
  block = 0;
  /** The block (and the rate share) is used until then: the refresh's departure + leaseMs. */
  validUntil = Number.NEGATIVE_INFINITY;
  target = 0;
  free = 0;
  processes = 1;
  /** The cap, as Redis last answered. */
  cap = 1;
  blocks = 0;
  clusterHeld = 0;
  answeredAt = Number.NEGATIVE_INFINITY;
  recovering = false;
  /** When the recovery window Redis last reported ends (this process's clock): ask then. */
  recoveredAt = 0;
  /** The units held when the last refresh left (what Redis counts for us until it answers). */
  heldAtSend = 0;
  lastSent = Number.NEGATIVE_INFINITY;
  /** The last refresh failed (Redis unreachable, slow, or erroring). */
  down = false;
  /** When its refreshes began to fail (performance.now(); undefined: they do not). */
  downSince: number | undefined;
  /** The demand the last refresh reported. */
  sentWants = 0;
  /** The signals' epoch when the last refresh left: another means a message may be lost. */
  #epoch = -1;
  /** Heard since the last refresh left: the fair level (`give`), the state lost (`lost`). */
  #level: { level: number; top: string } | undefined = undefined;
  #lost = false;
  /** Heard since the last refresh left: units came free that floors met at a walk are owed. */
  #owed = false;
  /**
   * When an `owed` was first heard and not yet followed by a refresh a no-show later (Redis
   * passes an owner over that has not come by then: leasedWalk.lua, the owed no-show).
   */
  #owedAt: number | undefined = undefined;
  /** Heard since the last refresh left: a floor met at the walk lacks units held over the level. */
  #floor = false;
  /** The fair level of Redis's last walk, as the last answer said (-1: every demand fits). */
  #walked = -1;
  /** When the refresh left whose answer last grew the block: a met head's turn began then. */
  #grewAt = Number.NEGATIVE_INFINITY;

  constructor(readonly o: ResolvedLeasedOptions) {}

  /**
   * A refresh leaves at `sentAt`: whether the block is still valid, and what Redis is to count
   * for us until the answer: held, plus a little of a valid block that demand still wants, kept
   * in use while the answer is on its way (so a refresh does not stall the next grant). An idle
   * process reserves nothing.
   */
  sending(
    sentAt: number,
    held: number,
    wants: number,
    signals: number,
  ): { valid: boolean; held: number; block: number } {
    this.#epoch = signals;
    this.lastSent = sentAt;
    this.sentWants = wants;
    this.#level = undefined;
    this.#lost = false;
    this.#owed = false;
    this.#floor = false;
    if (this.#owedAt !== undefined && sentAt >= this.#owedAt + this.#noShowMs) {
      this.#owedAt = undefined;
    }
    const valid = sentAt < this.validUntil;
    const slack = Math.max(1, Math.ceil(held / 10));
    this.heldAtSend =
      valid && wants > held ? Math.max(held, Math.min(this.block, wants, held + slack)) : held;
    return { valid, held: this.heldAtSend, block: this.block };
  }

  /** The block's part of the answer to a refresh that left at `sentAt`. */
  answered(answer: BlockAnswer, sentAt: number): void {
    this.recovering = answer.recoveringMs > 0;
    this.recoveredAt = sentAt + answer.recoveringMs;
    if (answer.block > this.block) this.#grewAt = sentAt;
    this.block = answer.block;
    this.validUntil = sentAt + answer.leaseMs;
    this.processes = Math.max(1, answer.processes);
    if (answer.cap > 0) this.cap = answer.cap;
    this.blocks = answer.blocks;
    this.clusterHeld = answer.held;
    this.free = answer.free;
    this.target = answer.target;
    if (answer.level !== undefined) this.#walked = answer.level;
    this.answeredAt = performance.now();
    this.down = false;
    this.downSince = undefined;
  }

  /** Whether the last refresh failed, and since when its refreshes fail (RefreshReport). */
  fault(): { down: boolean; downSince: number | undefined } {
    return { down: this.down, downSince: this.downSince };
  }

  /** A refresh failed (not a refusal). */
  failed(): void {
    this.down = true;
    // Since when (the first failure seen): Redis tells its own outage from this process's.
    this.downSince ??= performance.now();
    // Redis may still run it (a timeout is not a refusal) and shrink the block, counting
    // max(new block, held at send) for us and giving the rest away: grow past nothing more.
    this.block = Math.min(this.block, this.heldAtSend);
  }

  /** A message on the gate's signal channel (commands/leasedRefresh-4.lua, Signals). */
  heard(message: string): void {
    if (message === 'lost') this.#lost = true;
    if (message === 'owed') {
      this.#owed = true;
      this.#owedAt ??= performance.now();
    }
    if (message === 'floor') this.#floor = true;
    const give = /^give (-?\d+) (.*)$/.exec(message);
    if (give !== null) this.#level = { level: Number(give[1]), top: give[2] ?? '' };
  }

  /** Redis's no-show time (3 asks, at least 50 ms) and a little, so this ask lands past it. */
  get #noShowMs(): number {
    return Math.max(50, 3 * this.o.askMs) + 20;
  }

  /** This process's fair share by the level heard (floors aside), for a demand of `wants`. */
  #fair(wants: number, id: string): number | undefined {
    const heard = this.#level;
    if (heard === undefined) return undefined;
    if (heard.level < 0) return wants;
    return Math.min(wants, heard.level + (heard.top !== '' && id <= heard.top ? 1 : 0));
  }

  /** The timer, no refresh on its way: whether to refresh now (`id`: this process's). */
  due(
    now: number,
    { held, wants, rateWants, rate, signals, need, moved = false, reported = 0 }: Demands,
    id = '',
  ): boolean {
    const o = this.o;
    const since = now - this.lastSent;
    const block = this.block;
    const share = rate?.share ?? 0;
    const idle = wants === 0 && held === 0 && block === 0 && rateWants === 0 && share === 0;
    // Heard: the subscription was up when the last refresh left and has not been lost since.
    const heard = signals >= 0 && signals === this.#epoch;
    // Unheard, a busy process refreshes one timer step early: within an interval of its last
    // refresh its entry is renewed (what a first use's window counts on after a loss). Heard,
    // the `lost` signal asks for that refresh instead.
    const every = (idle || heard) && !this.down ? o.leaseMs / 2 : o.refreshMs - o.askMs;
    if (since >= every) return true;
    // Redis shrank the block below what was held (another process's heavier head, a fairer
    // share, a met head's turn over): it counts what was held at the refresh until the next one
    // says less. Say it as soon as some of it is released, so the other process's head is not
    // held up a whole interval; at once when all of it is (one refresh per shrink): a unit
    // handed on waited up to a timer step here (a cap smaller than the fleet).
    const drained = this.heldAtSend > block && held < this.heldAtSend;
    if (drained && held <= block) return true;
    // A head heavier than 1 gets its units through Redis in a chain: a walk meets its floor (at
    // once for a new head, leasedWalk.lua `unmet`), `floor` asks the processes over the level to
    // give back, `owed` says units came free, its process takes them, and once it is served
    // its process says so, so the next head is met. Each link asks at once, not at the next
    // `askMs`, and a served heavy head gets no turn: its units served one call, and the calls
    // after it fit the level (issue 32, weights heavier than a replica's part of the cap: a
    // fresh fleet of 2 at cap 4 with heads of 3 and a rate of 30/s sent 8 of 30 calls in a
    // second, one process at a time while the other's head waited; campaign seed 86007).
    const walked = this.#level?.level ?? this.#walked;
    const fair = this.#fair(wants, id);
    const reportedFloor = Math.min(reported, this.sentWants);
    // (`moved` stays true until a refresh succeeds: while they fail, the throttled path below.)
    const heavyServed =
      !this.down &&
      moved &&
      reportedFloor > 1 &&
      walked >= 0 &&
      reportedFloor > walked &&
      block > 0 &&
      this.free === 0 &&
      this.processes > 1;
    const heavyOwed = this.#owed && need > 1 && need > block;
    const heavyGive = this.#floor && fair !== undefined && block > fair;
    if (heavyServed || heavyOwed || heavyGive) return true;
    // Units came free for another's floor a no-show ago and this process still waits: ask, so
    // that an owner that never came (killed at that moment) is passed over now, not when its
    // entry falls silent (seed 88263: cap 1 over 6, the survivors at 0 for 3.1 s).
    const owedAt = this.#owedAt;
    if (owedAt !== undefined && now >= owedAt + this.#noShowMs && need > block) return true;
    if (since < o.askMs) return false;
    // Units came free that a floor met at the walk is owed: if it is this process's head's, its
    // refresh takes them now, not at its next ask.
    if (this.#owed && need > block) return true;
    // The subscription came up or was lost since: a signal may be gone, ask once.
    if (signals !== this.#epoch) return true;
    if (this.#lost && (block > 0 || held > 0)) return true;
    // An old answer, or a recovery window that has ended since.
    const stale =
      now - this.answeredAt >= o.refreshMs || (this.recovering && now >= this.recoveredAt);
    // More than the block, and Redis last said there is some (free permits, or a fair share
    // above this block that others give back), or a demand that grew past what Redis last
    // served in full: ask now. Heard, an answer that is merely old is no reason (it would be
    // every interval).
    const grew = wants > this.sentWants && this.target >= this.sentWants;
    // Free units (a head may take one whole, leasedRefresh-4.lua) are worth an ask at once too.
    const under = !this.recovering && (block < this.target || grew || this.free > 0);
    const more = wants > block && (heard ? under || (stale && this.recovering) : stale || under);
    // Redis said a process waits or the fair level moved: under it and wanting more, take; over
    // it, give back at once what is idle, and what is in use no more often than every interval
    // (as before, when every refresh gave it back): a unit in use moves only after its call, so
    // moving it sooner only churns (a fresh fleet of 7 at cap 4 held 2 of 4, campaign seed 20000).
    // (Given back at once when a heavy floor met at the walk lacks units: `heavyGive` above.)
    const over = block > held || since >= o.refreshMs - o.askMs;
    const level = fair !== undefined && ((block > fair && over) || (block < fair && wants > block));
    // A block twice what is wanted: give the unused part back now, for processes that need it.
    const less = block > held && wants <= Math.floor(block / 2);
    // The same for the rate's share (its free part: the rate's limit less every counted share).
    const rateFree = rate === undefined ? 0 : rate.rate.limit - rate.counted;
    const rateAsk = !this.recovering && (rateFree > 0 || share < (rate?.target ?? 0));
    const moreRate =
      rateWants > share &&
      (heard ? rateAsk || (stale && (rateFree > 0 || this.recovering)) : stale || rateAsk);
    const lessRate = share > 0 && rateWants <= Math.floor(share / 2);
    // A head the block cannot serve, with none free and no target above the block: its floor
    // waits for a walk (at most every refreshMs / 2, oldest heads first), and the answer that
    // meets it is this process's next refresh. Ask once per walk, not once per interval (issue
    // 32: heavy heads waited a timer step to learn they were met, twice, and timed out).
    // A new heavy head asks at once: Redis meets it now if nothing older is gathering units.
    const headWaits = need > block && (since >= o.refreshMs / 2 || (moved && need > 1));
    // A block no larger than the head waiting, none free, other processes: the units are a
    // floor met for the head reported (oldest first), not a share of the level. Once that head
    // was served, say so, so the floor moves on to an older head elsewhere (a cap smaller than
    // the fleet, campaign seed 99009: cap 1 over 4 processes, the unit stayed with one for half
    // a lease, 62 calls, while the others' callers timed out; a heavy head's block the same).
    // A turn of half an interval first (as a head waiting asks once per walk): said after every
    // call, the units went from process to process each call and a fleet of 5 at cap 4 held
    // 2.7-3.1 of 4 (seed 99138; 3.2 and more before). Counted from the answer that grew the
    // block, not from the last refresh: a rated process asks for its share a few times as its
    // turn begins, and each ask put its turn's end off (turns of 0.9 s at a 1 s interval, and
    // with cap 1 over 3 a caller asked at the start timed out at 2.9 s: campaign seed 92045).
    // With fewer units than processes the turn is that much shorter, so that every process
    // waiting has its turn within half an interval or so (cap 2 over 7: a process's first turn
    // came 1.8 s after the first use, 3.5 turns of half an interval, and its callers timed out
    // at 2.5 s; campaign seeds 92061, 92077). A handoff idles a unit some 20-30 ms: a turn is
    // a quarter of that at the least (cap 3 over 6 at a 500 ms interval: 94% of the cap in use
    // with turns of 250 ms, 89% with 125 ms).
    // Only a floor above the level (as Redis walks at once for it: leasedWalk.lua, `served`):
    // heads of 1 in a fleet at its cap move at every grant.
    const served =
      moved &&
      now - this.#grewAt >=
        (o.refreshMs / 2) * Math.max(0.25, Math.min(1, this.cap / this.processes)) &&
      block > 0 &&
      walked >= 0 &&
      reportedFloor > walked &&
      this.free === 0 &&
      this.processes > 1;
    return more || level || less || moreRate || lessRate || drained || headWaits || served;
  }
}
