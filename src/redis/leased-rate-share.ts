/**
 * A leased gate's share of its rate, this process's side: the share Redis granted (REFRESH's
 * answer), the demand and the arguments each refresh sends for it, and the share the gate's
 * GCRA paces at now, from that answer, the block's lease and the store's policy.
 */
import type { RateOptions, ResolvedRate } from '../gate/rate.js';
import { leasedRate, RateUse, rateNeedOf, rateShareOf } from './leased-rate.js';
import type { LeasedRateView } from './leased-stats.js';
import type { ResolvedStoreOptions } from './options.js';
import { rateArg } from './shared-rate.js';
import { LEASED_SMALL_BURST } from './warnings.js';

/** What the rate's share reads of its gate's block lease, when it applies a share. */
export interface LeaseNow {
  /** The block and the share are used until then (this process's clock). */
  readonly validUntil: number;
  /** Refused (another layout) or closed: no share any more. */
  readonly stopped: boolean;
  /** A refresh on its way: when it left (undefined: none). */
  readonly sentAt: number | undefined;
  /** The last refresh failed. */
  readonly down: boolean;
  /** Processes with a live entry, as Redis last said. */
  readonly processes: number;
  /**
   * More processes than the cap, and this one holds no unit and has none in its block: none of
   * its calls can be sent until a unit comes to it.
   */
  readonly capless: boolean;
  /** The cap, as Redis last said. */
  readonly cap: number;
}

/** What the rate's share uses of its gate (a `LeasedSemaphore`). */
export interface RateShareGate {
  readonly name: string | undefined;
  readonly options: ResolvedStoreOptions;
  /** The gate's GCRA: paces at `share` when given one; returns the rate's use so far. */
  shareRate(share?: {
    rate: ResolvedRate;
    limit: number;
    burst: number;
    until: number;
    holdMs?: number;
  }): {
    taken: number;
    backlog: number;
    throttled: number;
    lead: number;
    leadMs: number;
  };
  lease(): LeaseNow;
  /** A refresh now, unless one is on its way (or the gate is closed). */
  refreshSoon(): void;
  /** The highest cost of a head waiting (0: nobody waits). */
  costliest(): number;
}

/**
 * This process's lease of a leased gate's rate: whole calls per `per`, a max-min fair share of
 * the fleet's rate that Redis grants at each refresh (REFRESH, includes/leasedShare.lua).
 */
export class RateShare {
  /** The fleet's rate as Redis holds it. */
  rate: ResolvedRate;
  /** The rate this process asks for (`limit:per:burst`): its own, or the one it set. */
  arg: string;
  /** The share Redis granted, its target, Σ counted, and the demand last sent. */
  share = 0;
  target = 0;
  counted = 0;
  wants = 0;
  /** The share its costliest waiting head needs (rateNeedOf; 1 at least while one waits). */
  need = 0;
  /** The share this process sends at now, and its burst. */
  applied = 0;
  #burst = 0;
  /** A refresh that cuts the share to its target was sent at once after the last answer. */
  #cutting = false;
  #warned: string | undefined = undefined;
  #warnedBurst = false;
  /** The rate the applied share is of (a new one from Redis is applied even at the same share). */
  #appliedOf: ResolvedRate | undefined = undefined;
  #until = 0;
  /** A refresh failed: Redis may have shrunk the share it was sent for; none until an answer. */
  #unsure = false;
  /**
   * The units its TAT ran ahead of its pace when its share last went down, reported until a
   * window after (Redis counts them for that window: includes/leasedCounted.lua, the lead).
   */
  #cutLead = 0;
  #cutLeadUntil = 0;
  /**
   * A share taken from a parked place: when the closed process's next slot comes (this process's
   * clock: the answer's arrival and Redis's ms, later than Redis's by the trip; -∞: none).
   */
  #slotAt = Number.NEGATIVE_INFINITY;
  /** The last demand was of a process with no unit, among more processes than units (0). */
  #capless = false;
  /** The share is being cut here, before asking (sending): Redis hears the lead with it. */
  #selfCut = false;
  readonly #use: RateUse;
  readonly #gate: RateShareGate;

  constructor(rate: RateOptions, refreshMs: number, gate: RateShareGate) {
    this.rate = leasedRate(rate);
    this.arg = rateArg(this.rate);
    this.#use = new RateUse(this.rate.per, refreshMs);
    this.#gate = gate;
    gate.shareRate({ rate: this.rate, limit: 0, burst: 0, until: Number.POSITIVE_INFINITY });
  }

  /** `setSharedRate`: the rate this process asks Redis to hold from now on. */
  ask(rate: RateOptions): string {
    this.arg = rateArg(leasedRate(rate));
    return this.arg;
  }

  /**
   * The rate demand: cost units taken in the last `per` ms plus those queued, smoothed; at least
   * the share its costliest waiting head needs to be sent at all.
   */
  demand(now: number): number {
    const limit = this.rate.limit;
    const { processes, capless, cap } = this.#gate.lease();
    // The equal split among the processes that can send at once: no more than the cap's units.
    const split = Math.ceil(limit / Math.max(1, Math.min(processes, cap)));
    const cost = this.#gate.costliest();
    // Any waiting head needs a share of one call at least: a floor met oldest head first, so
    // with fewer calls per window than processes the shares move from head to head. Without
    // it the level is 0 and the calls left over go to the lowest ids, for good: 8 processes of
    // calls of cost 1 at 4 per 500 ms, four sent their first call and then nothing for seconds.
    this.need = cost > 0 ? Math.max(1, rateNeedOf(this.rate, cost)) : 0;
    if (!this.#warnedBurst && processes > 1) this.#warnBurst(cost, processes);
    // With fewer units than processes, one that holds none sends nothing until a unit comes to
    // it: it asks for no rate. Its queue and its last turn's calls asked for more, and the rate
    // sat in the shares of processes with no unit while the unit's holder sent at its own small
    // share (3 processes, cap 1, a rate of 80/s the cap alone never reaches: 7 calls a second,
    // 55 without the rate; campaign seed 92045). Its share, cut here before it asks, is counted
    // at the cut from that refresh on; the holder's grows at its next ask. Where the rate binds
    // each handoff so moves a share too (a cut's edge counted for a window; cap 2 over 3 at a
    // binding 10/s: about 8 calls a second before, 4-6 after; docs/shared-gates.md).
    this.#capless = capless;
    if (capless) return 0;
    return Math.max(
      this.need,
      this.#use.wants(this.#gate.shareRate(), this.applied, now, limit, split),
    );
  }

  /**
   * A refresh leaves at `sentAt`: the demand it sends. A share above the rate's demand, or
   * above the fair target Redis last answered, is cut here, before asking: Redis then counts
   * the cut from this refresh on (one call more for a window), not from when an answer that cut
   * it arrives. Redis does not cut a share this process still sends at (`selfcut`); it answers
   * the target, and a refresh leaves at once.
   */
  sending(sentAt: number): void {
    this.wants = this.demand(sentAt);
    const keep = this.share > this.target ? Math.min(this.wants, this.target) : this.wants;
    if (keep < this.share) {
      this.share = keep;
      this.#selfCut = true;
      this.apply(sentAt);
      this.#selfCut = false;
    }
  }

  /**
   * The units its TAT runs ahead of its pace (whole, for the refresh): now, or as they were
   * when its share last went down, for a window after. A call that cost more than its burst
   * share (sent on idle credit) leaves more than `burst + 1`, the most Redis otherwise counts a
   * cut share's edge at (campaign seed 74047: a cost-2 call sent at share 2, burst 0, then the
   * share cut to 0 and counted at 1 for the window: 7 units at a promise of 6).
   */
  lead(now: number): number {
    const cut = now < this.#cutLeadUntil ? this.#cutLead : 0;
    return Math.ceil(Math.max(this.#gate.shareRate().lead, cut) - 1e-9);
  }

  /** When its pace would let its next call go, in ms from now (whole): a cut's slot in Redis. */
  leadMs(): number {
    return Math.ceil(this.#gate.shareRate().leadMs);
  }

  /** The share goes down from `applied`: the lead it ran at is noted for a window. */
  #cut(now: number): void {
    const lead = this.#gate.shareRate().lead;
    if (!(lead > 0)) return;
    this.#cutLead = Math.max(now < this.#cutLeadUntil ? this.#cutLead : 0, lead);
    this.#cutLeadUntil = now + this.rate.per;
    // Cut to 0 by Redis's answer (not here, before asking), after a call sent ahead of a paced
    // share's lead: Redis counts the old share only until the answer could have reached it, so
    // it is told the lead now, while that hold is on (a share above 0 carries it: GateRate.share).
    if (!this.#selfCut && this.share === 0 && lead > this.#burst + 1 + 1e-9) {
      setImmediate(() => this.#gate.refreshSoon()).unref?.();
    }
  }

  /**
   * Loud, once per gate: a call that costs more than an equal share sends at once waits for its
   * process's idle credit (docs/rates.md, Costs), so such a fleet sends less than its rate.
   */
  #warnBurst(cost: number, processes: number): void {
    const { limit, per, burst } = this.rate;
    const equal = Math.floor(limit / processes);
    // A full bucket of an equal share sends its burst share and one more at once.
    const at = rateShareOf(this.rate, equal) + 1;
    if (!(cost > at)) return;
    this.#warnedBurst = true;
    const enough =
      equal > 0
        ? `a burst of at least ${Math.ceil(((cost - 1) * limit) / equal)} serves such calls at once, as does the FIFO mode (one bucket in Redis)`
        : 'the FIFO mode (one bucket in Redis) serves such calls at once';
    process.emitWarning(
      `shared gate ${JSON.stringify(this.#gate.name ?? '')} (mode 'leased', rate ${limit} per ${per} ms, burst ${burst}) has ${processes} processes and a call of cost ${cost}: an equal share of the rate sends at most ${at} at once, so such a call waits until its process has gone ${cost - at} interval(s) of its share without sending, and the fleet sends less than its rate; ${enough}`,
      { code: LEASED_SMALL_BURST },
    );
  }

  /** The REFRESH script's rate arguments. */
  args(wants: number, setRate: string): (string | number)[] {
    return [this.arg, this.applied, wants, this.#gate.options.commandTimeoutMs, setRate];
  }

  /**
   * A clean close's rate arguments: what was sent in the last window, and those sends by age.
   * Redis keeps at most its burst share + 1 of them counted for a window (what it may have sent
   * ahead of its pace) and gives the rest of the share back at once (issue 32, item 6).
   */
  closing(now: number): {
    args: (string | number)[];
    sent: string;
    lead: number;
    leadMs: number;
  } {
    const use = this.#gate.shareRate();
    const tail = this.#use.sentByAge(use.taken, now);
    const args = this.args(0, '');
    args[1] = Math.min(this.rate.limit, Math.ceil(tail.reduce((a, b) => a + b, 0)));
    // How far its TAT runs ahead: after a call that cost more than its burst share (the idle
    // credit) that is more than burst + 1, and Redis keeps that much counted instead.
    // And in ms, when its pace would have let its next call go: a replacement that takes over its
    // share (a parked place) sends no sooner.
    const sent = tail.map((units) => Math.ceil(units)).join(' ');
    return { args, sent, lead: this.lead(now), leadMs: this.leadMs() };
  }

  /** The rate's part of an answer: this process's share, and the rate Redis holds (adopted, warned once). */
  answer(reply: unknown[]): void {
    this.share = Number(reply[9]);
    this.target = Number(reply[10]);
    // A share above its target: cut it now, in a refresh that says so (once per answer that
    // asks; a cut answered with a share above the target again waits for the timer).
    if (this.share > this.target && !this.#cutting) {
      this.#cutting = true;
      setImmediate(() => this.#gate.refreshSoon()).unref?.();
    } else this.#cutting = false;
    // A unit came to a process that asked for no rate (it had none): ask for its share now, not
    // at its next ask (a handoff of the cap's only unit idled it for that long).
    if (this.#capless && Number(reply[0]) > 0 && this.share === 0 && this.#gate.costliest() > 0) {
      setImmediate(() => this.#gate.refreshSoon()).unref?.();
    }
    this.counted = Number(reply[11]);
    this.#unsure = false;
    const slotMs = Number(reply[15]) || 0;
    if (slotMs > 0) this.#slotAt = Math.max(this.#slotAt, performance.now() + slotMs);
    const held = String(reply[12] ?? '');
    if (held === '' || held === rateArg(this.rate)) return;
    const [limit, per, burst] = held.split(':').map(Number) as [number, number, number];
    if (!(limit >= 1) || !(per > 0) || !(burst >= 0)) return;
    this.rate = { limit, per, burst };
    if (held !== this.arg && this.#warned !== held) {
      this.#warned = held;
      const mine = this.arg.split(':');
      process.emitWarning(
        `shared gate ${JSON.stringify(this.#gate.name ?? '')}: Redis holds rate ${limit} per ${per} ms (burst ${burst}) for it, this process asked for ${mine[0]} per ${mine[1]} ms (burst ${mine[2]}); gating by Redis's (change it for every process with setSharedRate(rate))`,
        { code: 'HOSTGATE_SHARED_RATE_MISMATCH' },
      );
    }
  }

  /**
   * A refresh failed: Redis may have run it and shrunk this process's share, counting the old
   * one only a command timeout and a window past it: send on no share until an answer says.
   */
  failed(): void {
    this.#unsure = true;
  }

  /** Sets the share this process sends at, from Redis's answer, its lease and the store policy. */
  apply(now: number): void {
    const rate = this.rate;
    const lease = this.#gate.lease();
    const options = this.#gate.options;
    let share: number;
    // A share from Redis is sent at until the lease ends, and while a refresh is on its way
    // until a command timeout after it left: Redis holds what it reports only that long.
    let until = lease.validUntil;
    if (lease.stopped) share = 0;
    else if (now < lease.validUntil) {
      share = this.#unsure ? 0 : this.share;
      if (lease.sentAt !== undefined)
        until = Math.min(until, lease.sentAt + options.commandTimeoutMs);
    } else {
      share = lease.down && options.onStoreError === 'local' ? this.#fallback(lease) : 0;
      until = Number.POSITIVE_INFINITY;
    }
    const burst = rateShareOf(rate, share);
    if (share < this.applied) this.#cut(now);
    const same = share === this.applied && burst === this.#burst;
    const holdMs = share > 0 ? Math.max(0, this.#slotAt - now) : 0;
    if (same && rate === this.#appliedOf && until === this.#until && holdMs === 0) return;
    this.#appliedOf = rate;
    this.applied = share;
    this.#burst = burst;
    this.#until = until;
    if (holdMs > 0) this.#slotAt = Number.NEGATIVE_INFINITY;
    this.#gate.shareRate({ rate, limit: share, burst, until, holdMs });
  }

  /**
   * Redis unreachable past the lease, under `onStoreError: 'local'`: a share of the rate as the
   * FIFO mode's, `limit / processes` (at least one call), so with every process cut off the
   * shares add up to the rate.
   */
  #fallback(lease: LeaseNow): number {
    return Math.max(1, Math.floor(this.rate.limit / lease.processes));
  }

  view(): LeasedRateView {
    return {
      share: this.applied,
      burst: this.#burst,
      target: this.target,
      demand: this.wants,
      counted: this.counted,
    };
  }
}
