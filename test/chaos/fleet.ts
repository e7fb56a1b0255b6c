/**
 * Runs one schedule (test/chaos/plan.ts) for real: replicas from a pool of worker processes
 * (test/chaos/worker.ts, bundled), the partner in this process counting units in flight and
 * arrivals, the faults done on time, Redis's state sampled, and at the end every replica closed
 * cleanly and the gate's keys read. Returns what test/chaos/oracle.ts judges.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { bundleForNode } from '../../bench/lib/bundle.js';
import { type FleetMessage, forkWorker, type Worker } from '../../bench/lib/fleet.js';
import { Link } from './link.js';
import type { Applied, Arrival, Call, Run } from './oracle.js';
import type { Rate, Schedule, Step } from './plan.js';
import { REDIS_AWAY, reconnectMs, timings } from './plan.js';
import { answeredSet } from './sets.js';

/** Faults done to the `redis-server` itself (serialized). */
const REDIS_FAULTS = new Set<string>([...REDIS_AWAY, 'flushall', 'clock-step']);

import { type ChaosRedis, clockStep, heldBy, leftovers, readState } from './redis.js';
import type { CallRecord, OpenGate } from './worker.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** Bundles the worker from src/ into node_modules/.cache (resolves its packages from there). */
export async function bundleWorker(): Promise<string> {
  const out = new URL(
    `../../node_modules/.cache/hostgate-chaos/worker-${process.pid}.mjs`,
    import.meta.url,
  ).pathname;
  await bundleForNode(new URL('./worker.ts', import.meta.url).pathname, out);
  return out;
}

/** Worker processes kept between schedules: a fork costs ~0.3 s of CPU, a schedule reuses them. */
export class Pool {
  readonly #idle: Worker[] = [];
  readonly #script: string;

  constructor(script: string) {
    this.#script = script;
  }

  async #fork(): Promise<Worker> {
    const worker = forkWorker(this.#script, {}, { execArgv: ['--max-old-space-size=128'] });
    await worker.next('ready', 20_000);
    return worker;
  }

  /** `n` workers ready (idle ones first, the rest forked in parallel). */
  async take(n: number): Promise<Worker[]> {
    const out: Worker[] = [];
    while (out.length < n) {
      const w = this.#idle.pop();
      if (w === undefined) break;
      if (w.child.exitCode === null && w.child.signalCode === null) out.push(w);
    }
    const forks = await Promise.all(Array.from({ length: n - out.length }, () => this.#fork()));
    return [...out, ...forks];
  }

  give(worker: Worker): void {
    if (worker.child.exitCode !== null || worker.child.signalCode !== null) return;
    if (this.#idle.length >= 12) worker.kill('SIGKILL');
    else this.#idle.push(worker);
  }

  async close(): Promise<void> {
    const all = this.#idle.splice(0);
    await Promise.all(
      all.map((w) => {
        w.kill('SIGKILL');
        return w.exited;
      }),
    );
  }
}

/** Waits for a message of `type` carrying `token` (or any, without one); rejects after `ms`. */
function reply(worker: Worker, type: string, ms: number, token?: string): Promise<FleetMessage> {
  return new Promise((resolve, reject) => {
    const onMessage = (raw: unknown) => {
      const m = raw as FleetMessage;
      if (m.type !== type && !(type === 'opened' && m.type === 'open-failed')) return;
      if (token !== undefined && m.token !== token) return;
      done();
      resolve(m);
    };
    const onExit = () => {
      done();
      reject(new Error(`worker exited before '${type}'`));
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`no '${type}' within ${ms} ms`));
    }, ms);
    const done = () => {
      clearTimeout(timer);
      worker.child.off('message', onMessage);
      worker.child.off('exit', onExit);
    };
    worker.child.on('message', onMessage);
    worker.child.on('exit', onExit);
  });
}

/** The partner: units in flight (by weight) and arrivals, for the current schedule's token. */
export class Partner {
  port = 0;
  token = '';
  t0 = 0;
  inflight = 0;
  readonly bySlot = new Map<number, number>();
  log: [number, number][] = [];
  arrivals: Arrival[] = [];
  readonly #server: http.Server;

  constructor() {
    this.#server = http.createServer((req, res) => {
      const url = new URL(req.url ?? '/', 'http://x');
      const q = url.searchParams;
      const delay = Number(q.get('d') ?? 0);
      if (!q.get('g')?.startsWith(`${this.token}-`)) {
        res.end('late'); // a straggler of an earlier schedule
        return;
      }
      const w = Number(q.get('w') ?? 1);
      const slot = Number(q.get('s') ?? -1);
      const now = performance.now() - this.t0;
      this.arrivals.push({
        at: now,
        w,
        cost: Number(q.get('c') ?? 1),
        slot,
        latency: Date.now() - Number(q.get('t') ?? Date.now()),
      });
      this.#add(slot, w, now);
      let open = true;
      const end = () => {
        if (!open) return;
        open = false;
        this.#add(slot, -w, performance.now() - this.t0);
      };
      // In flight from arrival until the response is written or the connection dies (a
      // SIGKILLed replica's socket): never after the client could release its permit.
      res.on('finish', end);
      res.on('close', end);
      req.resume();
      setTimeout(() => res.end('ok'), delay);
    });
    this.#server.keepAliveTimeout = 10_000;
  }

  #add(slot: number, w: number, at: number): void {
    this.inflight += w;
    this.bySlot.set(slot, (this.bySlot.get(slot) ?? 0) + w);
    this.log.push([at, this.inflight]);
  }

  async listen(): Promise<void> {
    this.#server.listen(0, '127.0.0.1');
    await once(this.#server, 'listening');
    this.port = (this.#server.address() as AddressInfo).port;
  }

  /** A new schedule: counts from zero, requests of the previous one no longer counted. */
  reset(token: string, t0: number): void {
    this.token = token;
    this.t0 = t0;
    this.inflight = 0;
    this.bySlot.clear();
    this.log = [[0, 0]];
    this.arrivals = [];
  }

  close(): Promise<void> {
    this.#server.closeAllConnections();
    return new Promise((resolve) => this.#server.close(() => resolve()));
  }
}

interface Slot {
  worker: Worker | undefined;
  /** Its store's process id (the `opened` reply's). */
  processId: string | undefined;
  callers: number;
  stopped: boolean;
  stalled: number;
  generation: number;
  /**
   * Link faults on it (replica-partition, replica-slow; a count: they may overlap): its demand
   * is not the others' to serve meanwhile.
   */
  cut: number;
}

let runs = 0;

/** Runs `schedule` on `redis` with `pool`'s workers, the partner counting; returns the log. */
export async function runSchedule(
  schedule: Schedule,
  redis: ChaosRedis,
  pool: Pool,
  partner: Partner,
): Promise<Run> {
  const { config, steps } = schedule;
  const name = `c${schedule.seed}-${schedule.mode}-${++runs}`;
  const token = `${process.pid}-${runs}`;
  const errors: string[] = [];
  /** Replicas whose close the library warned it could not finish. */
  let unfinished = 0;
  await redis.heal();
  // Workers: the fleet, plus one for every new start the schedule has.
  const extra = steps.reduce(
    (n, s) =>
      n +
      (s.kind === 'replica-kill' && s.restartMs !== undefined ? 1 : 0) +
      (s.kind === 'replica-roll' ? (s.count ?? 1) : 0),
    0,
  );
  const spares = await pool.take(config.replicas + extra);
  const slots: Slot[] = config.callers.map((callers) => ({
    worker: undefined,
    processId: undefined,
    callers,
    stopped: false,
    stalled: 0,
    generation: 0,
    cut: 0,
  }));
  // A replica's own link to Redis, where a schedule cuts one off (test/chaos/link.ts); the
  // others connect to Redis itself, as before.
  const links = steps.some((s) => s.kind === 'replica-partition' || s.kind === 'replica-slow')
    ? await Promise.all(
        slots.map(async () => {
          const link = new Link(redis.port);
          await link.listen();
          return link;
        }),
      )
    : undefined;
  const demand: [number, number][] = [];
  const caps: [number, number][] = [[0, config.cap]];
  const rates: [number, Rate][] = config.rate ? [[0, config.rate]] : [];
  const calls: Call[] = [];
  const states: Run['states'] = [];
  const applied: Applied[] = [];
  const closing: Promise<void>[] = [];
  let t0 = performance.now();
  let t0Epoch = Date.now();
  const now = () => performance.now() - t0;
  partner.reset(token, t0);
  const pushDemand = () => {
    let d = 0;
    for (const s of slots)
      if (s.worker && !s.stopped && s.stalled === 0 && s.cut === 0) d += s.callers;
    demand.push([now(), d]);
  };
  const alive = () => slots.filter((s) => s.worker !== undefined).length;

  const openSlot = async (i: number, start = true) => {
    const worker = spares.pop() ?? (await pool.take(1))[0]!;
    const slot = slots[i]!;
    slot.generation++;
    const open: OpenGate = {
      token: `${token}-${i}-${slot.generation}`,
      slot: i,
      redisPort: links?.[i]?.port ?? redis.port,
      partnerPort: partner.port,
      name,
      config,
      callers: slot.callers,
      seed: schedule.seed * 1000 + i * 10 + slot.generation,
      start,
    };
    worker.send({ type: 'open', ...open });
    const m = await reply(worker, 'opened', 15_000, open.token);
    if (m.type === 'open-failed') {
      errors.push(`replica ${i}: open failed: ${String(m.error)}`);
      pool.give(worker);
      return;
    }
    slot.worker = worker;
    slot.processId = typeof m.processId === 'string' ? m.processId : undefined;
    if (start) pushDemand();
  };
  const collect = (slot: number, records: CallRecord[]) => {
    for (const [asked, wait, timeout, outcome, stalled, weight] of records) {
      calls.push({
        slot,
        asked: asked - t0Epoch,
        wait,
        timeout,
        outcome,
        stalled: stalled === 1,
        weight,
      });
    }
  };
  const closeSlot = async (i: number) => {
    const slot = slots[i]!;
    const worker = slot.worker;
    if (worker === undefined) return;
    slot.worker = undefined;
    pushDemand();
    worker.kill('SIGCONT');
    worker.send({ type: 'close' });
    try {
      const m = await reply(worker, 'closed', 15_000);
      collect(i, m.calls as CallRecord[]);
      unfinished += Number(m.unfinished ?? 0);
      for (const [k, n] of Object.entries((m.errors ?? {}) as Record<string, number>)) {
        errors.push(`replica ${i}: ${k} ×${n}`);
      }
      pool.give(worker);
    } catch (error) {
      errors.push(`replica ${i}: close: ${String(error)}`);
      worker.kill('SIGKILL');
    }
  };

  // The fleet starts together: every replica opens its gate, then all start calling at once
  // (opening takes seconds on a busy machine; the schedule's clock starts at the `go`).
  await Promise.all(slots.map((_, i) => openSlot(i, false)));
  t0 = performance.now();
  t0Epoch = Date.now();
  partner.reset(token, t0);
  demand.length = 0;
  for (const s of slots) s.worker?.send({ type: 'go' });
  pushDemand();
  const { tickMs } = timings(config);

  // Faults on Redis one at a time: a restart while another one has Redis down would start it
  // from an old dump (a rollback, not the fault drawn); a later one waits for the earlier.
  let redisFree: Promise<unknown> = Promise.resolve();
  const doStep = async (step: Step): Promise<void> => {
    await sleep(step.at - now());
    if (REDIS_FAULTS.has(step.kind)) {
      const before = redisFree;
      let done = () => {};
      redisFree = new Promise<void>((resolve) => {
        done = resolve;
      });
      await before;
      try {
        await runStep(step);
      } finally {
        done();
      }
      return;
    }
    await runStep(step);
  };
  const runStep = async (step: Step): Promise<void> => {
    const a: Applied = { step, at: now(), end: now(), alive: alive() };
    applied.push(a);
    const target = step.slot !== undefined && step.slot >= 0 ? slots[step.slot] : undefined;
    const ms = step.ms ?? 0;
    switch (step.kind) {
      case 'redis-stop':
        redis.pause();
        await sleep(ms);
        redis.resume();
        break;
      case 'redis-restart-empty':
        await redis.kill();
        await sleep(ms);
        await redis.start(false);
        break;
      case 'redis-restart-data':
        await redis.save().catch((e: unknown) => errors.push(`SAVE: ${String(e)}`));
        await redis.kill();
        await sleep(ms);
        await redis.start(true);
        break;
      case 'redis-restart-stale':
        await redis.save().catch((e: unknown) => errors.push(`SAVE: ${String(e)}`));
        await sleep(step.stale ?? 0);
        await redis.kill();
        await sleep(ms);
        await redis.start(true);
        break;
      case 'flushall':
        await redis.command(3000, 'FLUSHALL');
        break;
      case 'redis-oom':
        await redis.command(3000, 'CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
        await redis.command(3000, 'CONFIG', 'SET', 'maxmemory', '1');
        await sleep(ms);
        await redis.command(3000, 'CONFIG', 'SET', 'maxmemory', '0');
        break;
      case 'client-pause':
        await redis.command(3000, 'CLIENT', 'PAUSE', ms, 'ALL');
        await sleep(ms);
        break;
      case 'debug-sleep':
        await redis.command(ms + 3000, 'DEBUG', 'SLEEP', (ms / 1000).toFixed(3));
        break;
      case 'clock-step':
        await clockStep(redis, name, (step.sign ?? 1) * ms);
        break;
      case 'replica-stop':
        if (target?.worker) {
          const worker = target.worker;
          worker.kill('SIGSTOP');
          target.stopped = true;
          pushDemand();
          await sleep(ms);
          worker.kill('SIGCONT');
          target.stopped = false;
          pushDemand();
        }
        break;
      case 'replica-stall':
        if (target?.worker) {
          target.worker.send({ type: 'stall', ms });
          target.stalled++;
          pushDemand();
          await sleep(ms);
          target.stalled--;
          pushDemand();
        }
        break;
      case 'replica-partition':
        if (target && links) {
          const link = links[step.slot!]!;
          link.cut(step.cut ?? 'blackhole');
          target.cut++;
          pushDemand();
          await sleep(ms);
          link.heal();
          // Its demand is the fleet's again once it can have reached Redis: its client
          // reconnects on its own backoff after a reset, then a refresh or heartbeat.
          const back = step.cut === 'reset' ? reconnectMs(config.client, ms) : 0;
          a.end = now();
          await sleep(back + timings(config).tickMs + config.commandTimeoutMs);
          target.cut--;
          pushDemand();
          return;
        }
        break;
      case 'replica-slow':
        if (links) {
          // One replica's link, or every replica's (slot -1: Redis slow to all of them).
          const slowed = step.slot === -1 ? links : [links[step.slot!]!];
          const one = step.slot === -1 ? undefined : target;
          for (const link of slowed) link.slow(step.delay ?? 0);
          if (one) one.cut++;
          pushDemand();
          await sleep(ms);
          for (const link of slowed) link.slow(0);
          a.end = now();
          if (one) {
            // What it sent before is still on its way (a delay), then a refresh or heartbeat.
            await sleep((step.delay ?? 0) * 2 + timings(config).tickMs + config.commandTimeoutMs);
            one.cut--;
            pushDemand();
          }
          return;
        }
        break;
      case 'replica-kill':
        if (target?.worker) {
          a.killedUnits = partner.bySlot.get(step.slot!) ?? 0;
          a.totalUnits = partner.inflight;
          const worker = target.worker;
          target.worker = undefined;
          const killedAt = now();
          worker.kill('SIGKILL');
          // What Redis counts for it: permits it held between calls (granted, not yet at the
          // partner, or answered and not yet released) are out of the cap until they lapse too.
          // Read once it has exited, and Redis has answered since: a grant Redis made while the
          // signal was on its way (its wake-up subscriber still connected) is its too, and waits
          // out its claim window (seed 95010: 3 of cap 4 granted 2-35 ms after the kill, read as
          // 0 before it, the survivors' heavy head without room for 1.5 s).
          if (target.processId !== undefined) {
            await Promise.race([worker.exited, sleep(1000)]);
            await heldBy(redis, name, target.processId, 300);
            a.killedHeld = await heldBy(redis, name, target.processId, 300);
          }
          pushDemand();
          if (step.restartMs !== undefined) {
            await sleep(step.restartMs - (now() - killedAt));
            await openSlot(step.slot!);
          }
        }
        break;
      case 'replica-roll':
        for (let k = 0; k < (step.count ?? 1); k++) {
          if (k > 0) await sleep(step.at + k * step.every! - now());
          const i = (step.slot! + k) % slots.length;
          if (slots[i]!.worker === undefined) continue;
          closing.push(closeSlot(i));
          await openSlot(i);
        }
        break;
      case 'demand-shift':
        for (const [i, s] of slots.entries()) {
          if (step.slot !== -1 && i !== step.slot) continue;
          s.callers = step.callers!;
          s.worker?.send({ type: 'callers', n: step.callers });
        }
        pushDemand();
        break;
      case 'set-limit':
      case 'set-rate': {
        const from = target?.worker ? target : slots.find((s) => s.worker !== undefined);
        if (from?.worker) {
          const at = now();
          if (step.kind === 'set-limit') from.worker.send({ type: 'set-limit', value: step.value });
          else from.worker.send({ type: 'set-rate', rate: step.rate });
          // Recorded whatever the answer: a call that timed out at the client may still run in
          // Redis later (ioredis queues it while Redis is away), so the new value is possible.
          // A set that failed may as well not have run (Redis refused it out of memory, or the
          // leased refresh carrying it failed): judged by the looser of the two (seed 84273: a
          // rate set to 30/s during OOM errors failed, and the fleet rightly ran at the 80/s
          // Redis kept).
          const series: [number, unknown][] = step.kind === 'set-limit' ? caps : rates;
          const before = series[series.length - 1]?.[1];
          const entry: [number, unknown] = [
            at,
            step.kind === 'set-limit' ? step.value! : step.rate!,
          ];
          series.push(entry);
          const m = await reply(from.worker, 'set', 5000).catch(() => undefined);
          answeredSet(series, entry, m?.ok !== false, before);
        }
        break;
      }
    }
    a.end = now();
  };

  let running = true;
  const sampler = (async () => {
    while (running) {
      try {
        const s = await readState(redis, name, 250);
        const used =
          config.mode === 'leased'
            ? s.blocks.reduce((sum, [b, h]) => sum + Math.max(b, h), 0)
            : s.liveUnits;
        states.push({
          at: now(),
          used,
          ...(config.mode === 'leased' && s.storedSum !== undefined
            ? { storedSum: s.storedSum }
            : {}),
        });
      } catch {
        // Redis away: nothing to read
      }
      await sleep(150);
    }
  })();
  const stepRuns = steps.map((step) =>
    doStep(step).catch((error: unknown) => {
      errors.push(`${step.kind} at ${step.at}: ${String(error)}`);
    }),
  );
  await sleep(config.durationMs - now());
  await Promise.all(stepRuns);
  running = false;
  await sampler;
  const end = now();
  const tClose = performance.now();
  // Every replica closes cleanly (Redis healthy again), then the gate's keys are read.
  await redis.heal();
  await Promise.all([...slots.keys()].map((i) => closeSlot(i)));
  await Promise.all(closing);
  // A closed leased gate's last refresh, or a FIFO release, may still be on its way.
  await sleep(tickMs > 0 ? 100 : 0);
  let left: Run['leftovers'] = [];
  try {
    left = await leftovers(redis, name);
    await redis.command(3000, 'FLUSHALL');
  } catch (error) {
    errors.push(`keys: ${String(error)}`);
  }
  for (const w of spares) pool.give(w);
  if (links) await Promise.all(links.map((link) => link.close()));
  if (process.env.CHAOS_DEBUG) {
    console.error(
      `  timing: ran ${Math.round(end)} ms, closing ${Math.round(performance.now() - tClose)} ms`,
    );
  }
  return {
    schedule,
    applied,
    arrivals: partner.arrivals,
    inflight: partner.log,
    demand,
    caps,
    rates,
    calls,
    states,
    leftovers: left,
    unfinished,
    errors,
    end,
  };
}
