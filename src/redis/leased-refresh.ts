/**
 * A leased gate's REFRESH (commands/leasedRefresh-4.lua), the process's side of the call: what
 * the gate uses of its store, the script's arguments for a refresh and for a clean close, and
 * what the gate keeps of each answer to tell Redis, on the next, of time that passed unobserved
 * (issue 32).
 */
import type { SharedLayoutError } from '../common/errors.js';
import { coreEntry } from '../gate/counting-gate.js';
import type { Semaphore } from '../gate/semaphore.js';
import type { ResolvedLeasedOptions } from './leased-share.js';
import type { ResolvedStoreOptions } from './options.js';
import { LEASED_SMALL_CAP } from './warnings.js';

/**
 * What a leased gate uses of its store (a `RedisStore`), declared here so that store.ts can
 * build the gates without an import circle.
 */
export interface LeasedGateStore {
  readonly options: ResolvedStoreOptions;
  readonly processId: string;
  readonly closed: boolean;
  /** Subscribes a leased gate's signal channel (issue 35); `heard` gets its messages. */
  listenLeased?(channel: string, heard: (message: string) => void): void;
  /** The signal subscription's epoch while `channel` can be heard, else -1. */
  leasedSignals?(channel: string): number;
  /** One REFRESH script; rejects on an error or a timeout ({@link SharedLayoutError} for a layout). */
  refreshLeased(
    keys: readonly string[],
    args: readonly (string | number)[],
    gate: string,
    layout: string,
  ): Promise<unknown[]>;
}

/** The rate arguments of a gate without a rate (RateShare.args for one with a rate). */
export const NO_RATE: readonly (string | number)[] = ['', 0, 0, 0, ''];

/** What a refresh tells Redis of this process. */
export interface Report {
  /** The cap this process asked for (Redis's, if it has one, wins). */
  requested: number;
  /** Units Redis is to count for this process until the next refresh. */
  held: number;
  wants: number;
  /** The block of the last answer is still valid. */
  valid: boolean;
  /** The block as this process knows it (the last answer's, less what a failed refresh cut). */
  block: number;
  /** > 0: the cap becomes this, for every process. */
  setCap: number;
  rate: readonly (string | number)[];
  /** The heaviest head waiting (its weight), undefined: none. */
  head: { readonly weight: number } | undefined;
  /** The rate share the costliest waiting head needs (RateShare.need), 0: none. */
  rateNeed: number;
  /** The units its rate's TAT runs ahead, or ran when its share last went down (RateShare.lead). */
  rateLead: number;
  /** The same in ms: when its pace would let its next call go (RateShare.leadMs). */
  rateLeadMs: number;
  /** The last refresh failed. */
  down: boolean;
  /** When its refreshes began to fail (the first failure seen), undefined: they do not. */
  downSince?: number | undefined;
}

/** REFRESH's answer, the block's part (the rate's: RateShare.answer). */
export interface BlockAnswer {
  block: number;
  leaseMs: number;
  cap: number;
  processes: number;
  blocks: number;
  held: number;
  free: number;
  target: number;
  /** Ms left of a recovery window, 0: none. */
  recoveringMs: number;
  /** The fair level of the last walk (-1: every demand fits). */
  level?: number;
}

/** One gate's REFRESH calls: arguments built, sent through the store, answers read. */
export class RefreshCalls {
  /**
   * Redis's time in the last answer and this process's monotonic clock when it came: the script
   * holds the two against each other to see a step of Redis's clock (issue 32).
   */
  #seen = 0;
  #seenAt = 0;
  /**
   * This gate's refreshes numbered (the last sent), and the highest number Redis answered: an
   * entry of ours in Redis with a lower number than that was written before writes Redis lost
   * (commands/leasedRefresh-4.lua, Lost writes).
   */
  #seq = 0;
  #acked = 0;
  /** Redis answered this gate once: a missing state is then a loss, not a first use. */
  #had = false;
  /**
   * The heaviest head last reported, and its token: a new head, a new token. Redis orders the
   * fleet's heads by when it first heard of each (its token), so the oldest is met first.
   */
  #head: object | undefined = undefined;
  #warnedSmall = false;
  /** The heaviest head the last refresh reported (undefined: none waited). */
  #sentHead: { readonly weight: number } | undefined = undefined;
  #headToken = 0;
  /**
   * The gate's signal channel (commands/leasedRefresh-4.lua, Signals): in its hash slot, beside
   * the FIFO mode's wake-up channels (`<prefix>{<name>}:wake:…`; keys[0] is `<prefix>{<name>}:m`).
   */
  readonly channel: string;

  constructor(
    readonly store: LeasedGateStore,
    readonly keys: readonly string[],
    readonly name: string,
    readonly o: ResolvedLeasedOptions,
  ) {
    this.channel = `${(keys[0] ?? '').slice(0, -1)}wake:give`;
  }

  /** Runs REFRESH with `args`; `layout` is this process's (named by a layout refusal). */
  call(args: readonly (string | number)[], layout: string): Promise<unknown[]> {
    return this.store.refreshLeased(this.keys, args, this.name, layout);
  }

  /** A refresh's arguments, the refresh leaving at `sentAt` (this process's clock). */
  args(report: Report, sentAt: number): (string | number)[] {
    return [
      report.requested,
      this.o.leaseMs,
      // A first use, or a loss found by a process that never had an entry: no block beyond
      // what is held until a busy process that had one could have refreshed (one interval: a
      // busy process refreshes a timer step early, so its reply has that step to arrive); that
      // process makes it a lease. A command timeout more would leave a fresh fleet idle that
      // long (issue 32, item 7).
      this.o.refreshMs,
      this.store.processId,
      report.held,
      report.wants,
      report.valid ? 1 : 0,
      report.setCap,
      // How often some refresh walks the fleet's entries: twice per interval per gate.
      Math.max(1, Math.floor(this.o.refreshMs / 2)),
      ...report.rate,
      ...this.#faultArgs(sentAt, report.head?.weight ?? 0, report.down, false),
      '',
      1, // it cuts its own share to a lower target (issue 32, item 6)
      this.#sent(report.head),
      report.rateNeed,
      this.channel,
      this.o.askMs, // a caller below its share says so at most this often
      report.rateLead,
      report.rateLeadMs,
      // Ms since its refreshes began to fail: Redis tells its own outage from this process's.
      report.downSince === undefined ? 0 : Math.max(0, Math.floor(sentAt - report.downSince)),
      ++this.#seq,
      this.#acked,
      report.block,
      this.#overrun(report.rate),
    ];
  }

  /**
   * What this process's fallback may grant past what Redis counts for it while Redis is away,
   * as bits: 1 the cap (`onStoreError: 'local'` with a `localLimit`), 2 the rate ('local' with a
   * rate: a share of `limit / processes`). Back from an outage, a learning window of what such a
   * process overran opens (commands/includes/leasedGap.lua); with none, the state is what every
   * process left, and nothing waits for a lease.
   */
  #overrun(rate: readonly (string | number)[]): number {
    const options = this.store.options;
    if (options.onStoreError !== 'local') return 0;
    return (options.localLimit !== undefined ? 1 : 0) + (rate[0] !== '' ? 2 : 0);
  }

  /** A clean close: the entry goes (a failure is ignored: the entry lapses with its lease). */
  leave(
    requested: number,
    rate: { args: readonly (string | number)[]; sent: string; lead: number; leadMs?: number },
    down: boolean,
    now: number,
    layout: string,
  ): Promise<void> {
    const args = this.closeArgs(requested, rate.args, rate.sent, down, now, rate.lead, rate.leadMs);
    return this.call(args, layout).then(
      () => undefined,
      () => undefined,
    );
  }

  /**
   * A clean close's arguments: the entry goes (held and demand 0); with a rate, `rate` says what
   * was sent in the last window, `sent` those sends by age and `lead` the units its TAT runs
   * ahead of now (`leadMs` in ms: the parked place's slot).
   */
  closeArgs(
    requested: number,
    rate: readonly (string | number)[],
    sent: string,
    down: boolean,
    now: number,
    lead = 0,
    leadMs = 0,
  ): (string | number)[] {
    return [
      requested,
      this.o.leaseMs,
      1,
      this.store.processId,
      0,
      0,
      0,
      0,
      this.o.refreshMs,
      ...rate,
      ...this.#faultArgs(now, 0, down, true),
      sent,
      1,
      0,
      0,
      '',
      0,
      lead,
      leadMs,
    ];
  }

  #sent(head: { readonly weight: number } | undefined): number {
    this.#sentHead = head;
    return this.#token(head);
  }

  /**
   * The heaviest head the last refresh reported, against `head` (the heaviest waiting now):
   * `moved` if it is another, `reported` its weight (0: none).
   */
  reported(head: object | undefined): { moved: boolean; reported: number } {
    return { moved: head !== this.#sentHead, reported: this.#sentHead?.weight ?? 0 };
  }

  /** The token of the heaviest waiting head: the same head, the same token (0: none). */
  #token(head: object | undefined): number {
    if (head === undefined) return 0;
    if (head !== this.#head) {
      this.#head = head;
      this.#headToken = (this.#headToken % 1_000_000_000) + 1;
    }
    return this.#headToken;
  }

  /**
   * Loud, once per gate: the mode works with fewer units than processes, or with a call heavier
   * than an equal block, but every such unit moves between processes through Redis
   * (docs/shared-gates.md, Leased shares).
   */
  #warnSmall(cap: number, processes: number): void {
    if (this.#warnedSmall || !(cap > 0) || processes < 2) return;
    // The largest of the equal blocks (the split's remainder goes one unit to each of a few).
    const equal = Math.ceil(cap / processes);
    const weight = this.#sentHead?.weight ?? 0;
    const heavy = weight > equal;
    if (processes <= cap && !heavy) return;
    this.#warnedSmall = true;
    const why =
      processes > cap
        ? 'with fewer units than processes each unit moves between them through Redis, a few round trips idle at every handoff and callers waiting turns'
        : `a call of weight ${weight} is more than an equal block (at most ${equal}), so it waits for units the others give back through Redis, met one walk at a time, oldest first, while its process's block idles`;
    process.emitWarning(
      `shared gate ${JSON.stringify(this.name ?? '')} (mode 'leased') has ${processes} processes and a cap of ${cap}: ${why}; the FIFO mode (one queue in Redis) serves such a gate better`,
      { code: LEASED_SMALL_CAP },
    );
  }

  /** An answer came: Redis's time in it is kept for the next refresh; its block part. */
  answered(reply: unknown[]): BlockAnswer {
    this.#seen = Number(reply[13]) || 0;
    this.#seenAt = performance.now();
    this.#had = true;
    this.#acked = Math.max(this.#acked, Number(reply[16]) || 0);
    const [block, leaseMs, cap, processes, blocks, held, free, target, recoveringMs] = reply.map(
      Number,
    ) as [number, number, number, number, number, number, number, number, number];
    this.#warnSmall(cap, processes);
    const level = reply[14] === undefined ? undefined : Number(reply[14]);
    return {
      block,
      leaseMs,
      cap,
      processes,
      blocks,
      held,
      free,
      target,
      recoveringMs,
      ...(level === undefined || Number.isNaN(level) ? {} : { level }),
    };
  }

  /**
   * The script's arguments that let it tell time that passed unobserved (issue 32): Redis's time
   * last seen and the monotonic ms since, whether the last refresh failed and whether this
   * process had an entry; the heaviest waiting head; the tolerance of a reply's delay (a command
   * timeout) and the longest gap between refreshes of a healthy fleet; a clean close.
   */
  #faultArgs(sentAt: number, need: number, down: boolean, closing: boolean): (string | number)[] {
    const timeout = this.store.options.commandTimeoutMs;
    return [
      this.#seen,
      this.#seen > 0 ? Math.max(0, Math.floor(sentAt - this.#seenAt)) : 0,
      down ? 1 : 0,
      this.#had ? 1 : 0,
      need,
      // A reply's delay beyond this is taken for a step (a false one only holds time still
      // for the gap since the last run): within a quarter lease, so a step too small to see
      // cannot expire an entry renewed within the last interval (refreshMs ≤ leaseMs / 2).
      Math.min(timeout, Math.floor(this.o.leaseMs / 4)),
      // A gap longer than this after failed refreshes is an outage: no live entry expires
      // within half a lease of its last renewal.
      Math.min(this.o.refreshMs + timeout, Math.floor(this.o.leaseMs / 2)),
      closing ? 1 : 0,
    ];
  }
}

/**
 * The heaviest head waiting in any priority class of `gate` (a unit the block must fit at once),
 * undefined when nobody waits.
 */
export function heaviestHead(gate: Semaphore): { readonly weight: number } | undefined {
  let heaviest: { readonly weight: number } | undefined;
  for (const cls of coreEntry.parts(gate).queue.classes) {
    const head = cls.head;
    if (head !== undefined && head.weight > (heaviest?.weight ?? 0)) heaviest = head;
  }
  return heaviest;
}

/** The highest rate cost of a head waiting in any priority class of `gate` (0: nobody waits). */
export function costliestHead(gate: Semaphore): number {
  let cost = 0;
  for (const cls of coreEntry.parts(gate).queue.classes) {
    const head = cls.head;
    if (head !== undefined && head.cost > cost) cost = head.cost;
  }
  return cost;
}
