/**
 * One FIFO gate's scripts run alone against a private redis-server, on key state a test writes
 * itself: the script as the store loads it (src/redis/scripts.ts), by EVALSHA on a connection of
 * the test's own, and Redis's state read back afterwards, where the invariants are checked.
 *
 * Times in a crafted state are relative to Redis `TIME` read just before the script: a test
 * says "a lease with 2 s left", and checks a score against the window [before, after] of
 * Redis's clock around the run.
 */
import { afterAll, beforeAll, beforeEach, expect } from 'vitest';
import { connectResp, type RespConnection, type RespValue } from '../../../bench/lib/resp.js';
import {
  KEY_SUFFIXES,
  LAYOUT,
  RATE_LAYOUT,
  type Script,
  scripts,
} from '../../../src/redis/scripts.js';
import { type RedisServer, startRedis, stopAllRedis } from '../../helpers/redis-server.js';

export { scripts };

/** Arguments every script starts with (src/redis/commands/includes/prelude.lua). */
export interface Common {
  cap: number;
  leaseMs: number;
  liveMs: number;
  /** 1: the caller used the gate before (a missing meta is a loss). */
  known: 0 | 1;
  firstUseWaitMs: number;
  claimMs: number;
  /** `limit:per:burst`, '' for none. */
  rate: string;
}

export const COMMON: Common = {
  cap: 2,
  leaseMs: 10_000,
  liveMs: 5_000,
  known: 0,
  firstUseWaitMs: 0,
  claimMs: 1_500,
  rate: '',
};

/** The gate every test uses: keys `lab:{g}:h` … `lab:{g}:m`, wake-ups on `lab:{g}:wake:<owner>`. */
export const GATE = 'lab:{g}:';
export const KEYS = KEY_SUFFIXES.map((suffix) => GATE + suffix);
export const [H, Q, S, P, M] = KEYS as [string, string, string, string, string];
export const WAKE = `${GATE}wake:`;

/** What a test sets up: scores are ms from now (Redis time) for `h` and `p`, sequence for `q`. */
export interface Crafted {
  /** Lease or claim units: member -> ms left (negative: expired). */
  h?: Record<string, number>;
  /** Tickets: id -> arrival sequence. */
  q?: Record<string, number>;
  /** Processes: id -> ms of liveness left. */
  p?: Record<string, number>;
  s?: number;
  /** Meta fields as stored, but `lr` and a non-zero `r` as ms from now (numbers under 1e12). */
  m?: Record<string, string | number>;
}

/** A gate's keys as Redis holds them after a run. */
export interface GateState {
  /** Redis time (ms) when it was read. */
  now: number;
  h: Map<string, number>;
  q: Map<string, number>;
  p: Map<string, number>;
  s: string | null;
  m: Record<string, string>;
  /** PTTL of each key (-1 none, -2 missing). */
  ttl: Record<'h' | 'q' | 's' | 'p' | 'm', number>;
}

export interface Lab {
  readonly server: () => RedisServer;
  /** Redis time, ms. */
  now(): Promise<number>;
  craft(state: Crafted): Promise<number>;
  /** EVALSHA of `script` with the gate's keys, the common arguments (over `common`) and `own`. */
  run(script: Script, own: (string | number)[], common?: Partial<Common>): Promise<Ran>;
  state(): Promise<GateState>;
  /** Sharded subscriptions: the messages published on each channel, as they come. */
  listen(...owners: string[]): Promise<Map<string, string[]>>;
}

/** A script's reply and Redis's clock just before and after it ran. */
export interface Ran {
  reply: RespValue[];
  before: number;
  after: number;
}

/** A private redis-server for one test file, and a connection of the test's own to it. */
export interface RedisBench {
  readonly server: () => RedisServer;
  command(...args: (string | number)[]): Promise<RespValue>;
  /** Redis time, ms. */
  now(): Promise<number>;
}

/**
 * Starts one redis-server for the file with `loaded` in its script cache (each checked to load
 * under the SHA the store sends), and empties it before each test.
 */
export function useRedisBench(loaded: readonly Script[]): RedisBench {
  let server: RedisServer | undefined;
  let conn: RespConnection | undefined;
  beforeAll(async () => {
    server = await startRedis();
    conn = await connectResp(server.port);
    for (const script of loaded) {
      expect(await conn.command('SCRIPT', 'LOAD', script.source)).toBe(script.sha);
    }
  });
  beforeEach(async () => {
    await conn!.command('FLUSHALL');
  });
  afterAll(async () => {
    conn?.close();
    await stopAllRedis();
  });
  const command = (...args: (string | number)[]) => conn!.command(...args);
  const now = async () => {
    const [s, us] = (await command('TIME')) as [string, string];
    return Number(s) * 1000 + Math.floor(Number(us) / 1000);
  };
  return { server: () => server!, command, now };
}

/** Starts one redis-server for the file, empties it before each test. */
export function useLab(): Lab {
  const { server, command, now } = useRedisBench(Object.values(scripts));
  const subscribers: RespConnection[] = [];
  beforeEach(() => {
    for (const sub of subscribers.splice(0)) sub.close();
  });
  afterAll(() => {
    for (const sub of subscribers.splice(0)) sub.close();
  });
  return {
    server,
    now,
    async craft(state) {
      const at = await now();
      const zadd = async (key: string, entries: Record<string, number>, offset: number) => {
        const args = Object.entries(entries).flatMap(([member, score]) => [offset + score, member]);
        if (args.length > 0) await command('ZADD', key, ...args);
      };
      await zadd(H, state.h ?? {}, at);
      await zadd(Q, state.q ?? {}, 0);
      await zadd(P, state.p ?? {}, at);
      if (state.s !== undefined) await command('SET', S, state.s);
      // So do the sequence and the process set: the script that creates them sets it.
      for (const key of [S, P]) await command('PEXPIRE', key, 30 * 86_400_000);
      const meta = Object.entries(state.m ?? {}).flatMap(([field, value]) => [
        field,
        (field === 'lr' || (field === 'r' && value !== 0)) &&
        typeof value === 'number' &&
        Math.abs(value) < 1e12
          ? at + value
          : value,
      ]);
      // A meta hash always has its TTL: the script that creates it sets one, heartbeats renew it.
      if (meta.length > 0) await command('HSET', M, ...meta);
      if (meta.length > 0) await command('PEXPIRE', M, 30 * 86_400_000);
      return at;
    },
    async run(script, own, common = {}) {
      const c = { ...COMMON, ...common };
      const before = await now();
      const reply = (await command(
        'EVALSHA',
        script.sha,
        KEYS.length,
        ...KEYS,
        c.cap,
        c.leaseMs,
        c.liveMs,
        WAKE,
        c.known,
        c.firstUseWaitMs,
        c.claimMs,
        c.rate,
        ...own,
      )) as RespValue[];
      const after = await now();
      return { reply, before, after };
    },
    async state() {
      const zset = async (key: string) => {
        const flat = (await command('ZRANGE', key, 0, -1, 'WITHSCORES')) as string[];
        const map = new Map<string, number>();
        for (let i = 0; i < flat.length; i += 2) map.set(flat[i]!, Number(flat[i + 1]));
        return map;
      };
      const flat = (await command('HGETALL', M)) as string[];
      const m: Record<string, string> = {};
      for (let i = 0; i < flat.length; i += 2) m[flat[i]!] = flat[i + 1]!;
      const ttl = async (key: string) => Number(await command('PTTL', key));
      return {
        now: await now(),
        h: await zset(H),
        q: await zset(Q),
        p: await zset(P),
        s: (await command('GET', S)) as string | null,
        m,
        ttl: {
          h: await ttl(H),
          q: await ttl(Q),
          s: await ttl(S),
          p: await ttl(P),
          m: await ttl(M),
        },
      };
    },
    async listen(...owners) {
      const heard = new Map<string, string[]>();
      const sub = await connectResp(server().port);
      subscribers.push(sub);
      sub.onPush((value) => {
        const [kind, channel, message] = value as [string, string, string];
        if (kind === 'smessage') heard.get(channel)?.push(message);
      });
      for (const owner of owners) {
        heard.set(WAKE + owner, []);
        await sub.command('SSUBSCRIBE', WAKE + owner);
      }
      return heard;
    },
  };
}

/** Weight of a lease or ticket id: `/<w>` at its end, else 1 (as the scripts read it). */
export function weightOf(id: string): number {
  const match = /\/(\d+)$/.exec(id);
  return match === null ? 1 : Number(match[1]);
}

/** The members of `h` that hold id's units. */
export function unitsOf(id: string): string[] {
  return [id, ...Array.from({ length: weightOf(id) - 1 }, (_, k) => `${id}#${k + 2}`)];
}

/** Lease ids in `h` (a unit `<id>#k` counted under its id). */
export function leaseIds(state: GateState): string[] {
  return [...state.h.keys()].filter((member) => !/#\d+$/.test(member));
}

/**
 * What every run must leave, whatever it did: each lease whole (all its units, one expiry), no
 * id both a lease and a ticket, nothing expired left in `h`, meta's `h` flag true to `h`, a
 * versioned layout, and TTLs only where the layout puts them (`h` and `q` never, `m` always).
 * With `withinCap`, the units held are at most the cap: held + free = cap, free >= 0.
 */
export function expectConsistent(state: GateState, { withinCap = true } = {}): void {
  const leases = leaseIds(state);
  let units = 0;
  for (const id of leases) {
    const score = state.h.get(id);
    for (const unit of unitsOf(id)) expect(state.h.get(unit), `unit ${unit} of ${id}`).toBe(score);
    units += weightOf(id);
    expect(state.q.has(id), `${id} is a lease and a ticket`).toBe(false);
  }
  expect(units, 'every member of h is a unit of a lease').toBe(state.h.size);
  for (const [member, score] of state.h)
    expect(score, `${member} expired`).toBeGreaterThan(state.now - 50);
  expect([LAYOUT, RATE_LAYOUT]).toContain(state.m.v);
  const cap = Number(state.m.c);
  expect(Number.isSafeInteger(cap) && cap > 0).toBe(true);
  if (withinCap) expect(cap - state.h.size).toBeGreaterThanOrEqual(0);
  expect(state.m.h ?? '0').toBe(state.h.size > 0 ? '1' : '0');
  // The lease set and the queue carry no TTL, but the lease set of a gate its last live process
  // left (BYE: meta 'o'), which ends with its last lease.
  if (state.m.o === undefined && state.m.oq === undefined) expect(state.ttl.h).toBeLessThan(0);
  if (state.m.oq === undefined) expect(state.ttl.q).toBeLessThan(0);
  expect(state.ttl.m).toBeGreaterThan(0);
  // The sequence and the process set carry a TTL from their first write: a process that dies
  // before its first heartbeat leaves no key that never expires (-1; -2: no key).
  expect(state.ttl.s, 'the sequence key without a TTL').not.toBe(-1);
  expect(state.ttl.p, 'the process set without a TTL').not.toBe(-1);
}

/** The rate's tail of a reply: `[hint, nextSlotMs, backlog, rate]` after `n` fields. */
export function rateTail(reply: RespValue[], n: number): [string, number, string, string] {
  return reply.slice(n, n + 4) as [string, number, string, string];
}

/** A meta hash of a gate in use: cap, layout, no recovery, last run just now. */
export function inUse(cap = COMMON.cap, extra: Record<string, string | number> = {}) {
  return { c: cap, v: LAYOUT, r: 0, h: 0, lr: 0, ...extra };
}

/** `value` (a Redis-time score) lies `offsetMs` past Redis's clock as it was during `ran`. */
export function expectAhead(value: number | string | undefined, ran: Ran, offsetMs: number): void {
  const at = Number(value);
  expect(at).toBeGreaterThanOrEqual(ran.before + offsetMs - 1);
  expect(at).toBeLessThanOrEqual(ran.after + offsetMs + 1);
}

/** Ms for a key's TTL of 30 days (the meta, process and sequence keys), less a minute of slack. */
export const META_TTL_FLOOR = 30 * 86_400_000 - 60_000;
