/**
 * A leased gate's REFRESH (src/redis/commands/leasedRefresh-4.lua) run alone against a private
 * redis-server, on key state a test writes itself: the script as the store loads it
 * (src/redis/leased-scripts.ts), by EVALSHA, and Redis's own state read back afterwards.
 *
 * Times in a crafted state (an entry's expiry and hold end, the meta's `r` `t` `lr` `x`) are ms
 * from Redis `TIME` read just before the script, as in lab.ts for the FIFO scripts.
 */
import { expect } from 'vitest';
import {
  LEASED_KEY_SUFFIXES,
  LEASED_LAYOUT,
  LEASED_RATE_LAYOUT,
  leasedScripts,
} from '../../../src/redis/leased-scripts.js';
import type { RespValue } from '../../helpers/redis-server.js';
import { type Ran, useRedisBench } from './lab.js';

export { expectAhead } from './lab.js';

export const refresh = leasedScripts.refresh;

/** The gate every test uses: keys `lab:{lg}:m`, `:l`, `:h`, `:q`. */
export const GATE = 'lab:{lg}:';
export const KEYS = LEASED_KEY_SUFFIXES.map((suffix) => GATE + suffix);
export const [M, L, H, Q] = KEYS as [string, string, string, string];

/** REFRESH's arguments, in order (the command file's header says what each is). */
export interface RefreshArgs {
  cap: number;
  leaseMs: number;
  windowMs: number;
  processId: string;
  held: number;
  wants: number;
  valid: 0 | 1;
  setCap: number;
  scanMs: number;
  /** `limit:per:burst`, '' for none. */
  rate: string;
  rateUsed: number;
  rateWants: number;
  holdMs: number;
  setRate: string;
  seen: number;
  elapsed: number;
  down: 0 | 1;
  had: 0 | 1;
  need: number;
  tol: number;
  gapMs: number;
  closing: 0 | 1;
  /** A closing process's sends of the last window by age, space-separated. */
  sent: string;
  selfcut: 0 | 1;
  /** The token of its heaviest waiting head (0: none). */
  head: number;
  /** The rate share its costliest waiting head needs (0: none). */
  rateNeed: number;
  /** The gate's signal channel ('' none), and how often `give` may be said. */
  signal: string;
  signalMs: number;
  /** Closing: the units its TAT runs ahead of now (0: none reported). */
  lead: number;
  /**
   * Ms until its pace would let its next call go: closing, its parked place's slot; else, the
   * slot of a share it gives back here (M.cs).
   */
  leadMs: number;
  /** Ms since its refreshes began to fail (0: they do not). */
  downMs: number;
  /** This refresh's number (0: none, as an older process), written in its entry. */
  seq: number;
  /** The highest number among its refreshes Redis answered (0: none). */
  acked: number;
  /** Its block as it knows it. */
  known: number;
  /** 1: its fallback may grant past what Redis counts ('local' with a localLimit or a rate). */
  overrun: number;
}

/** A busy process `pa` of a gate of cap 4 without a rate, as the gate sends them. */
export const ARGS: RefreshArgs = {
  cap: 4,
  leaseMs: 10_000,
  windowMs: 1_000,
  processId: 'pa',
  held: 0,
  wants: 0,
  valid: 0,
  setCap: 0,
  scanMs: 500,
  rate: '',
  rateUsed: 0,
  rateWants: 0,
  holdMs: 0,
  setRate: '',
  seen: 0,
  elapsed: 0,
  down: 0,
  had: 0,
  need: 0,
  tol: 1_000,
  gapMs: 3_000,
  closing: 0,
  sent: '',
  selfcut: 1,
  head: 0,
  rateNeed: 0,
  signal: '',
  signalMs: 100,
  lead: 0,
  leadMs: 0,
  downMs: 0,
  seq: 0,
  acked: 0,
  known: 0,
  overrun: 0,
};

const ORDER: (keyof RefreshArgs)[] = [
  'cap',
  'leaseMs',
  'windowMs',
  'processId',
  'held',
  'wants',
  'valid',
  'setCap',
  'scanMs',
  'rate',
  'rateUsed',
  'rateWants',
  'holdMs',
  'setRate',
  'seen',
  'elapsed',
  'down',
  'had',
  'need',
  'tol',
  'gapMs',
  'closing',
  'sent',
  'selfcut',
  'head',
  'rateNeed',
  'signal',
  'signalMs',
  'lead',
  'leadMs',
  'downMs',
  'seq',
  'acked',
  'known',
  'overrun',
];

/** An entry of `L`, as the script reads it (leasedEntry.lua). */
export interface Entry {
  expiry: number;
  block: number;
  held: number;
  wants: number;
  share: number;
  counted: number;
  /** The end of its rate hold, 0: none. */
  until: number;
  rateWants: number;
  need: number;
  /** When Redis first heard of its heaviest head, 0: none. */
  since: number;
  /** That head's token. */
  head: number;
  /** Units its met floor still lacks (Σ in M.o). */
  owed: number;
  /** The rate share its costliest head needs. */
  rateNeed: number;
  /**
   * What it adds to `L._r` (its counted share as of its last write or walk); left out, the
   * entry is written without it, as an older writer's (the script reads it as counted now).
   */
  rc?: number;
  /** Only while a rate hold is on after calls sent ahead of their pace: the hold's lead. */
  rl?: number;
  /** The number of the refresh that wrote it (left out: an older writer's entry). */
  sq?: number;
}

const FIELDS: (keyof Entry)[] = [
  'expiry',
  'block',
  'held',
  'wants',
  'share',
  'counted',
  'until',
  'rateWants',
  'need',
  'since',
  'head',
  'owed',
  'rateNeed',
  'rc',
  'rl',
  'sq',
];

/** REFRESH's reply, named. */
export interface Answer {
  block: number;
  leaseMs: number;
  cap: number;
  processes: number;
  blocks: number;
  helds: number;
  free: number;
  target: number;
  recoveringMs: number;
  share: number;
  rateTarget: number;
  counted: number;
  rate: string;
  now: number;
  /** The fair level of the last walk (-1: every demand fits). */
  level: number;
  /** A share taken from a parked place: ms until the closed process's next slot (0: now). */
  rateSlot: number;
  /** This refresh's number, as it sent it. */
  seq: number;
}

/** REFRESH's reply, in order. */
const ANSWER: (keyof Answer)[] = [
  'block',
  'leaseMs',
  'cap',
  'processes',
  'blocks',
  'helds',
  'free',
  'target',
  'recoveringMs',
  'share',
  'rateTarget',
  'counted',
  'rate',
  'now',
  'level',
  'rateSlot',
  'seq',
];

/**
 * What a test sets up. Entry times (expiry, until, since) and `r` `t` `lr` `x` `lx` are ms from now;
 * 0 stays 0.
 */
export interface Crafted {
  /** Meta fields; a gate in use by default: see {@link inUse}. */
  m?: Record<string, string | number>;
  /** Entries of `L` by id (fields left out are 0, the expiry a lease ahead). */
  l?: Record<string, Partial<Entry>>;
  /** `L._s` and `L._r` as stored. */
  s?: number;
  r?: number;
  /** FIFO keys beside the gate's (a holder in `H`). */
  fifo?: boolean;
}

/** A gate's keys as Redis holds them after a run. */
export interface LeasedState {
  /** Redis time (ms) when it was read. */
  now: number;
  m: Record<string, string>;
  /** The entries of `L` (`_s` and `_r` apart), times as stored. */
  l: Map<string, Entry>;
  s: number | undefined;
  r: number | undefined;
  /** PTTL of each key (-1 none, -2 missing). */
  ttl: { m: number; l: number };
}

export interface LeasedLab {
  now(): Promise<number>;
  /** Writes `state`; returns the Redis time its relative times are from. */
  craft(state: Crafted): Promise<number>;
  /** REFRESH by EVALSHA with {@link ARGS} over `args`. */
  refresh(args?: Partial<RefreshArgs>): Promise<Ran & { answer: Answer }>;
  state(): Promise<LeasedState>;
  command(...args: (string | number)[]): Promise<RespValue>;
}

/**
 * A meta hash of a gate in use: cap, layout, no recovery, run just now, never walked (the next
 * refresh walks `L`; `t: -1` with the walk's `b` `e` `n` `k` `u`: walked just now).
 */
/**
 * Campaign seed 82285's killed process: a head of 3 known for 5 s (the oldest), 2 units of it
 * owed, 1 held, and no refresh for half a lease and a gap (its entry lives a lease and a gap past
 * its last refresh): silent.
 */
export function silentHeavyHead(): Partial<Entry> {
  const silentFor = ARGS.leaseMs / 2 + ARGS.gapMs + 100;
  return {
    block: 1,
    held: 1,
    wants: 3,
    need: 3,
    since: -5000,
    owed: 2,
    expiry: ARGS.leaseMs + ARGS.gapMs - silentFor,
  };
}

export function inUse(cap = ARGS.cap, extra: Record<string, string | number> = {}) {
  return { v: LEASED_LAYOUT, c: cap, r: 0, x: -1, t: 0, lr: -1, ...extra };
}

/** The same with a rate (`limit:per:burst`). */
export function ratedInUse(
  rate: string,
  cap = ARGS.cap,
  extra: Record<string, string | number> = {},
) {
  return inUse(cap, { v: LEASED_RATE_LAYOUT, rt: rate, ...extra });
}

const TIMES = new Set(['r', 't', 'lr', 'x', 'lx', 'ot', 'cs', 'll', 'lq', 'rq']);

export function formatEntry(entry: Entry): string {
  // A numbered entry writes its lead (0: none) and its counted share before its number.
  if (entry.sq !== undefined) entry = { ...entry, rc: entry.rc ?? 0, rl: entry.rl ?? 0 };
  return FIELDS.filter((field) => entry[field] !== undefined)
    .map((field) => entry[field])
    .join(' ');
}

export function parseEntry(text: string): Entry {
  const numbers = text.split(' ').map(Number);
  const entry = Object.fromEntries(
    FIELDS.map((field, i) => [
      field,
      numbers[i] ?? (field === 'rc' || field === 'rl' || field === 'sq' ? undefined : 0),
    ]),
  ) as unknown as Entry;
  if (entry.rc === undefined) delete entry.rc;
  if (entry.rl === undefined) delete entry.rl;
  if (entry.sq === undefined) delete entry.sq;
  return entry;
}

/** Starts one redis-server for the file, empties it before each test. */
export function useLeasedLab(): LeasedLab {
  const { command, now } = useRedisBench([refresh]);
  return {
    now,
    command,
    async craft(state) {
      const at = await now();
      const meta = Object.entries(state.m ?? {}).flatMap(([field, value]) => [
        field,
        TIMES.has(field) && typeof value === 'number' && value !== 0 ? at + value : value,
      ]);
      if (meta.length > 0) {
        await command('HSET', M, ...meta);
        await command('PEXPIRE', M, 30 * 86_400_000);
      }
      const entries = Object.entries(state.l ?? {}).flatMap(([id, entry]) => {
        const full: Entry = { ...parseEntry(''), expiry: ARGS.leaseMs, ...entry };
        full.expiry += at;
        if (full.until !== 0) full.until += at;
        if (full.since !== 0) full.since += at;
        return [id, formatEntry(full)];
      });
      if (state.s !== undefined) entries.push('_s', String(state.s));
      if (state.r !== undefined) entries.push('_r', String(state.r));
      if (entries.length > 0) await command('HSET', L, ...entries);
      if (state.fifo) await command('ZADD', H, at + 10_000, 'fifo:1');
      return at;
    },
    async refresh(args = {}) {
      const all = { ...ARGS, ...args };
      const before = await now();
      const reply = (await command(
        'EVALSHA',
        refresh.sha,
        KEYS.length,
        ...KEYS,
        ...ORDER.map((name) => all[name]),
      )) as RespValue[];
      const after = await now();
      const answer = Object.fromEntries(
        ANSWER.map((name, i) => [name, name === 'rate' ? String(reply[i]) : Number(reply[i])]),
      ) as unknown as Answer;
      return { reply, before, after, answer };
    },
    async state() {
      const flatM = (await command('HGETALL', M)) as string[];
      const m: Record<string, string> = {};
      for (let i = 0; i < flatM.length; i += 2) m[flatM[i]!] = flatM[i + 1]!;
      const flatL = (await command('HGETALL', L)) as string[];
      const l = new Map<string, Entry>();
      let s: number | undefined;
      let r: number | undefined;
      for (let i = 0; i < flatL.length; i += 2) {
        const [id, value] = [flatL[i]!, flatL[i + 1]!];
        if (id === '_s') s = Number(value);
        else if (id === '_r') r = Number(value);
        else l.set(id, parseEntry(value));
      }
      return {
        now: await now(),
        m,
        l,
        s,
        r,
        ttl: { m: Number(await command('PTTL', M)), l: Number(await command('PTTL', L)) },
      };
    },
  };
}

/** A closed process's tail (`<id>~<k>`): its rate only, never a live process. */
export const isTail = (id: string): boolean => id.includes('~');

/**
 * The invariant over live entries, as Redis holds them after a walk: Σ max(block, held) ≤ cap,
 * and `_s` equal to that sum over every entry (a walk leaves no lapsed entry with permits).
 */
export function expectBlocksWithinCap(state: LeasedState): void {
  let live = 0;
  let all = 0;
  for (const [id, entry] of state.l) {
    const counted = Math.max(entry.block, entry.held);
    all += counted;
    if (entry.expiry > state.now && !isTail(id)) live += counted;
  }
  expect(live, 'Σ max(block, held) over live entries').toBeLessThanOrEqual(Number(state.m.c));
  expect(state.s, '_s').toBe(all);
}

/**
 * A share as the script counts it at `now` (countedOf in leasedCounted.lua, written out again
 * as its comment states the rule): the hold `counted` in full until `until - per`, then the
 * share, one call and the burst the cut lost (at a share of 0, at least the lead it reported,
 * `rl`) until `until` (unless the share has grown past the hold), then the share alone.
 */
export function countedAt(entry: Entry, now: number, rate: string): number {
  const [limit, per, burst] = rate.split(':').map(Number) as [number, number, number];
  const burstOf = (units: number) => Math.floor((burst * units) / limit);
  if (entry.until <= now) return entry.share;
  if (entry.until - per > now) return Math.max(entry.share, entry.counted);
  if (entry.counted <= entry.share) return entry.share; // a hold the share grew past: no edge
  // The edge: one call and the lost burst; at a share of 0, at least the lead it reported.
  const paced = 1 + Math.max(0, burstOf(entry.counted) - burstOf(entry.share));
  return entry.share > 0 ? entry.share + paced : Math.max(paced, entry.rl ?? 0);
}

/**
 * The rate's invariant as Redis holds it after a walk: `_r` is Σ counted over the entries (each
 * as {@link countedAt} at the run), and at most the rate's limit.
 */
export function expectRateCounted(state: LeasedState, rate: string, at: number): void {
  let counted = 0;
  for (const entry of state.l.values()) counted += countedAt(entry, at, rate);
  expect(state.r, '_r').toBe(counted);
  expect(counted, 'Σ counted').toBeLessThanOrEqual(Number(rate.split(':')[0]));
}
