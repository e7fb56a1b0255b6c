/**
 * The client side of the overload benchmark: the limiters under test ("contenders"), the
 * per-call bookkeeping, and the runs (closed burst, open loop, shed probe, memory per waiter).
 *
 * Every time here is real (wall-clock) milliseconds; the report converts to the seed's time
 * base. A call's latency runs from the moment undici writes its request to a socket
 * (`undici:client:sendHeaders`) to the end of its response body, and its timeout is armed at
 * that same moment — the same point for every contender, including undici's own pool whose
 * queue sits below any interceptor. End-to-end latency runs from the caller's `request()`
 * (or `limit()`) call to the same end.
 */
import diagnostics from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';
import { setImmediate as nextMacrotask } from 'node:timers/promises';
import v8 from 'node:v8';
import vm from 'node:vm';
import pLimit from 'p-limit';
import { Agent, type Dispatcher, request } from 'undici';
import { findShedError, QueueFullError, QueueTimeoutError } from '../../src/common/errors.js';
import type { Semaphore } from '../../src/gate/semaphore.js';
import { limitHosts } from '../../src/index.js';
import { HostLimiter } from '../../src/partners/host-limiter.js';
import type { PartnerProcess, PartnerStats } from './partner.js';

export type ContenderKind = 'p-limit' | 'undici' | 'hostgate' | 'hostgate-bounded';

export const CONTENDERS: readonly ContenderKind[] = [
  'p-limit',
  'undici',
  'hostgate',
  'hostgate-bounded',
];

export const CONTENDER_LABEL: Record<ContenderKind, string> = {
  'p-limit': 'p-limit',
  undici: 'undici Agent({ connections: N })',
  hostgate: 'hostgate, unbounded queue',
  'hostgate-bounded': 'hostgate, bounded',
};

export const OK = 1;
export const TIMEOUT = 2;
export const SHED_FULL = 3;
export const SHED_TIMEOUT = 4;
export const ERROR = 5;

const now = () => performance.now();

/** Per-call records for one run, in flat typed arrays (no allocation per call beyond undici's). */
export class Run {
  readonly n: number;
  readonly start: Float64Array;
  readonly sent: Float64Array;
  readonly end: Float64Array;
  readonly outcome: Uint8Array;
  readonly timedOut: Uint8Array;
  readonly controllers: (AbortController | undefined)[];
  readonly timers: (ReturnType<typeof setTimeout> | undefined)[];
  /** Callers that have called in and are not yet on the wire nor settled. */
  waiting = 0;
  peakWaiting = 0;
  started = 0;
  sentCount = 0;
  settled = 0;
  done = 0;
  errorSample: string | undefined = undefined;
  #onAllSettled: (() => void) | undefined;

  constructor(
    n: number,
    readonly timeoutMs: number,
    readonly path: '/work' | '/hang' = '/work',
    /** Simulated client-side work after each response, inside the call and its timeout. */
    readonly clientWorkMs = 0,
  ) {
    this.n = n;
    this.start = new Float64Array(n);
    this.sent = new Float64Array(n);
    this.end = new Float64Array(n);
    this.outcome = new Uint8Array(n);
    this.timedOut = new Uint8Array(n);
    this.controllers = new Array(n).fill(undefined);
    this.timers = new Array(n).fill(undefined);
  }

  began(i: number): AbortController {
    this.start[i] = now();
    this.started++;
    if (++this.waiting > this.peakWaiting) this.peakWaiting = this.waiting;
    const controller = new AbortController();
    this.controllers[i] = controller;
    return controller;
  }

  onSent(i: number): void {
    if (this.sent[i] !== 0 || this.outcome[i] !== 0) return;
    this.sent[i] = now();
    this.sentCount++;
    this.waiting--;
    if (this.timeoutMs > 0) this.timers[i] = setTimeout(onCallTimeout, this.timeoutMs, this, i);
  }

  finish(i: number, outcome: number, error?: unknown): void {
    if (this.outcome[i] !== 0) return;
    const end = now();
    this.end[i] = end;
    // Past its deadline is a timeout even if the timer has not run yet: timers fire up to
    // ~1 ms late, which the time scale would magnify into the model.
    const sent = this.sent[i]!;
    if (outcome === OK && this.timeoutMs > 0 && sent > 0 && end - sent > this.timeoutMs) {
      outcome = TIMEOUT;
      this.timedOut[i] = 1;
    }
    this.outcome[i] = outcome;
    const timer = this.timers[i];
    if (timer !== undefined) clearTimeout(timer);
    this.timers[i] = undefined;
    this.controllers[i] = undefined;
    if (this.sent[i] === 0) this.waiting--;
    if (outcome === ERROR && this.errorSample === undefined)
      this.errorSample = describeError(error);
    this.settled++;
  }

  /** The call's whole chain is over (its request settled too, after a timeout). */
  closed(): void {
    if (++this.done === this.n) this.#onAllSettled?.();
  }

  /** Resolves when every call's chain ended, or after `limitMs` (then returns false). */
  whenSettled(limitMs: number): Promise<boolean> {
    if (this.done === this.n) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), limitMs);
      this.#onAllSettled = () => {
        clearTimeout(timer);
        resolve(true);
      };
    });
  }

  abortAll(reason: string): void {
    for (const controller of this.controllers) controller?.abort(new Error(reason));
  }
}

/** The call's deadline: the caller gives up now (the request is aborted if still running). */
function onCallTimeout(run: Run, i: number): void {
  run.timers[i] = undefined;
  run.timedOut[i] = 1;
  const controller = run.controllers[i];
  run.finish(i, TIMEOUT);
  // A TimeoutError, as AbortSignal.timeout gives: adaptive gates count it as a drop.
  controller?.abort(new DOMException('call timeout', 'TimeoutError'));
}

function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: string }).code;
    const cause = error.cause instanceof Error ? `; cause: ${error.cause.message}` : '';
    return `${error.name}${code ? ` ${code}` : ''}: ${error.message}${cause}`;
  }
  return String(error);
}

// --- dispatch clock -------------------------------------------------------------------------

let currentRun: Run | undefined;

diagnostics.subscribe('undici:client:sendHeaders', (message) => {
  const run = currentRun;
  if (run === undefined) return;
  const path = (message as { request: { path: string } }).request.path;
  const at = path.indexOf('?i=');
  if (at < 0) return;
  run.onSent(Number(path.slice(at + 3)));
});

// --- contenders -----------------------------------------------------------------------------

export interface Contender {
  kind: ContenderKind;
  permits: number;
  dispatcher: Dispatcher;
  /** Runs `fn` under the limiter (p-limit) or directly (the dispatcher limits). */
  submit<T>(fn: () => Promise<T>): Promise<T>;
  /** Waiters as the limiter itself counts them. */
  queued(): number;
  /** Invariant problems visible right now (empty when all is well). */
  checkNow(): string[];
  /** Invariant problems once the run settled: nothing held, nothing queued. */
  checkIdle(): string[];
  gate: Semaphore | undefined;
  close(): Promise<void>;
}

export interface ContenderOptions {
  origin: string;
  /** hostgate, bounded: wait deadline (real ms). */
  deadlineMs: number;
  /** hostgate, bounded: queue bound; default hostgate's own (10 × permits). */
  maxQueue?: number | undefined;
  /** hostgate, unbounded: a queue big enough for every caller of the run. */
  unboundedQueue: number;
}

const AGENT_DEFAULTS = { keepAliveTimeout: 10_000, keepAliveMaxTimeout: 10_000 } as const;

export function makeContender(
  kind: ContenderKind,
  permits: number,
  options: ContenderOptions,
): Contender {
  const direct = <T>(fn: () => Promise<T>) => fn();
  switch (kind) {
    case 'p-limit': {
      const agent = new Agent(AGENT_DEFAULTS);
      const limit = pLimit(permits);
      return {
        kind,
        permits,
        dispatcher: agent,
        submit: (fn) => limit(fn),
        queued: () => limit.pendingCount,
        checkNow: () =>
          limit.activeCount > permits ? [`p-limit active ${limit.activeCount} > ${permits}`] : [],
        checkIdle: () =>
          limit.activeCount !== 0 || limit.pendingCount !== 0
            ? [`p-limit not idle: active ${limit.activeCount}, pending ${limit.pendingCount}`]
            : [],
        gate: undefined,
        close: () => closeAgent(agent, limit.clearQueue),
      };
    }
    case 'undici': {
      const agent = new Agent({ ...AGENT_DEFAULTS, connections: permits });
      const pool = () =>
        Object.values(agent.stats)[0] as
          | { running: number; pending: number; size: number }
          | undefined;
      return {
        kind,
        permits,
        dispatcher: agent,
        submit: direct,
        queued: () => pool()?.pending ?? 0,
        checkNow: () => {
          const s = pool();
          return s !== undefined && s.running > permits
            ? [`undici pool running ${s.running} > ${permits}`]
            : [];
        },
        checkIdle: () => {
          const s = pool();
          return s !== undefined && (s.running !== 0 || s.size !== 0)
            ? [`undici pool not idle: running ${s.running}, size ${s.size}`]
            : [];
        },
        gate: undefined,
        close: () => closeAgent(agent),
      };
    }
    case 'hostgate':
    case 'hostgate-bounded': {
      const bounded = kind === 'hostgate-bounded';
      const limiter = new HostLimiter({
        partners: [
          {
            name: 'partner',
            hosts: [options.origin],
            limit: permits,
            ...(bounded
              ? { queueTimeout: options.deadlineMs, maxQueue: options.maxQueue }
              : { queueTimeout: 600_000, maxQueue: options.unboundedQueue }),
          },
        ],
        unknownHosts: 'reject',
      });
      const gate = limiter.gate('partner')!;
      const agent = new Agent(AGENT_DEFAULTS);
      return {
        kind,
        permits,
        dispatcher: agent.compose(limitHosts(limiter)),
        submit: direct,
        queued: () => gate.queued,
        checkNow: () => gateProblems(gate, false),
        checkIdle: () => gateProblems(gate, true),
        gate,
        close: () => closeAgent(agent),
      };
    }
  }
}

/** The invariant, from the outside: held + available === limit while held <= limit. */
function gateProblems(gate: Semaphore, idle: boolean): string[] {
  const s = gate.stats();
  const problems: string[] = [];
  if (s.held > s.limit) problems.push(`held ${s.held} > limit ${s.limit}`);
  if (s.held + s.available !== s.limit) {
    problems.push(`held ${s.held} + available ${s.available} !== limit ${s.limit}`);
  }
  if (s.queued > s.maxQueue) problems.push(`queued ${s.queued} > maxQueue ${s.maxQueue}`);
  if (s.held !== s.acquired - s.released) {
    problems.push(`held ${s.held} !== acquired ${s.acquired} - released ${s.released}`);
  }
  if (s.doubleReleases !== 0) problems.push(`${s.doubleReleases} double releases`);
  if (idle) {
    if (s.held !== 0 || s.queued !== 0 || s.available !== s.limit) {
      problems.push(`gate not idle: held ${s.held}, queued ${s.queued}, available ${s.available}`);
    }
    if (s.holdTimeouts !== 0) problems.push(`${s.holdTimeouts} permits taken back after maxHold`);
  }
  return problems;
}

async function closeAgent(agent: Agent, clear?: () => void): Promise<void> {
  clear?.();
  const closed = agent.close().catch(() => undefined);
  const late = new Promise<void>((resolve) => setTimeout(resolve, 2_000).unref());
  await Promise.race([closed, late]);
  await agent.destroy().catch(() => undefined);
}

// --- one call -------------------------------------------------------------------------------

function startCall(run: Run, contender: Contender, origin: string, i: number): Promise<void> {
  const controller = run.began(i);
  const url = `${origin}${run.path}?i=${i}`;
  const dispatcher = contender.dispatcher;
  // The limiter covers dispatch → response end (hostgate's permit, undici's connection,
  // p-limit's slot); the simulated client-side work after it does not hold one.
  return contender
    .submit(async (): Promise<Outcome> => {
      try {
        const { statusCode, body } = await request(url, { dispatcher, signal: controller.signal });
        await body.text();
        return statusCode === 200 ? [OK] : [ERROR, `HTTP ${statusCode}`];
      } catch (error) {
        if (run.timedOut[i] === 1) return [TIMEOUT];
        const shed = findShedError(error);
        if (shed instanceof QueueFullError) return [SHED_FULL];
        if (shed instanceof QueueTimeoutError) return [SHED_TIMEOUT];
        return [ERROR, error];
      }
    })
    .then(async ([outcome, error]) => {
      if (outcome === OK && run.clientWorkMs > 0) await simulatedWork(run.clientWorkMs);
      run.finish(i, outcome, error);
      run.closed();
    });
}

type Outcome = [outcome: number, error?: unknown];

/** Client-side work after the response (parsing, mapping), simulated; see `dither` in partner.ts. */
function simulatedWork(ms: number): Promise<void> {
  const whole = Math.floor(ms);
  const delay = Math.random() < ms - whole ? whole + 1 : whole;
  return new Promise((resolve) => {
    if (delay === 0) setImmediate(resolve);
    else setTimeout(resolve, delay);
  });
}

// --- runs -----------------------------------------------------------------------------------

/** What every call does besides the partner's work (real ms). */
export interface CallModel {
  /** The call's timeout, armed at dispatch; 0 for none. */
  timeoutMs: number;
  /** Simulated client-side work after the response, inside the call, outside the permit. */
  clientWorkMs: number;
}

export interface RunResult {
  kind: ContenderKind;
  permits: number;
  run: Run;
  /** First call to last settlement, real ms. */
  wallMs: number;
  complete: boolean;
  partner: PartnerStats;
  peakLimiterQueued: number;
  /** heapUsed high-water mark minus heapUsed after a GC just before the run (open loop only). */
  peakHeapDelta: number | undefined;
  /** First to last arrival, real ms. */
  arrivalMs: number;
  /** The client's event-loop utilization (0..1) and CPU time per wall time over the run. */
  clientElu: number;
  clientCpu: number;
  problems: string[];
}

interface Sampler {
  stop(): void;
  peakQueued: number;
  peakHeap: number;
  elu: ReturnType<typeof performance.eventLoopUtilization>;
  cpu: NodeJS.CpuUsage;
  t0: number;
}

function sample(contender: Contender, problems: string[], heap: boolean, everyMs = 5): Sampler {
  const state: Sampler = {
    peakQueued: 0,
    peakHeap: 0,
    stop: () => clearInterval(timer),
    elu: performance.eventLoopUtilization(),
    cpu: process.cpuUsage(),
    t0: now(),
  };
  const tick = () => {
    const q = contender.queued();
    if (q > state.peakQueued) state.peakQueued = q;
    if (heap) {
      const h = process.memoryUsage().heapUsed;
      if (h > state.peakHeap) state.peakHeap = h;
    }
    if (problems.length < 10) problems.push(...contender.checkNow());
  };
  const timer = setInterval(tick, everyMs);
  return state;
}

async function finishRun(
  contender: Contender,
  partner: PartnerProcess,
  run: Run,
  sampler: Sampler,
  problems: string[],
  settleLimitMs: number,
  heapBase: number | undefined,
): Promise<RunResult> {
  const complete = await run.whenSettled(settleLimitMs);
  sampler.stop();
  const clientElu = performance.eventLoopUtilization(sampler.elu).utilization;
  const cpu = process.cpuUsage(sampler.cpu);
  const clientCpu = (cpu.user + cpu.system) / 1000 / (now() - sampler.t0);
  if (!complete) {
    problems.push(`run did not settle within ${settleLimitMs} ms: ${run.n - run.done} open`);
    run.abortAll('benchmark run over its time limit');
  }
  currentRun = undefined;
  let first = Number.POSITIVE_INFINITY;
  let lastStart = 0;
  let last = 0;
  for (let i = 0; i < run.n; i++) {
    if (run.start[i]! < first) first = run.start[i]!;
    if (run.start[i]! > lastStart) lastStart = run.start[i]!;
    if (run.end[i]! > last) last = run.end[i]!;
  }
  await settleMacrotasks();
  problems.push(...contender.checkIdle());
  const partnerStats = await partner.stats();
  await contender.close();
  await partner.drain();
  return {
    kind: contender.kind,
    permits: contender.permits,
    run,
    wallMs: last - first,
    arrivalMs: lastStart - first,
    complete,
    partner: partnerStats,
    peakLimiterQueued: sampler.peakQueued,
    peakHeapDelta: heapBase === undefined ? undefined : Math.max(0, sampler.peakHeap - heapBase),
    clientElu,
    clientCpu,
    problems,
  };
}

async function settleMacrotasks(rounds = 3): Promise<void> {
  for (let i = 0; i < rounds; i++) await nextMacrotask();
}

/**
 * `tasks` callers arrive at once: as fast as this process can issue them, in chunks of
 * `BURST_CHUNK` per macrotask, so that (as with real inbound requests, each its own I/O
 * event) responses and timers are processed while the burst is still arriving. One
 * synchronous loop of 10,000 would instead freeze the client for the whole loop, which the
 * time scale would magnify into the model.
 */
export async function runBurst(
  contender: Contender,
  partner: PartnerProcess,
  origin: string,
  tasks: number,
  model: CallModel,
  settleLimitMs: number,
): Promise<RunResult> {
  await partner.reset();
  const run = new Run(tasks, model.timeoutMs, '/work', model.clientWorkMs);
  const problems: string[] = [];
  currentRun = run;
  const sampler = sample(contender, problems, false);
  await new Promise<void>((resolve) => {
    let i = 0;
    const step = () => {
      const end = Math.min(tasks, i + BURST_CHUNK);
      for (; i < end; i++) void startCall(run, contender, origin, i);
      if (i < tasks) setImmediate(step);
      else resolve();
    };
    step();
  });
  return finishRun(contender, partner, run, sampler, problems, settleLimitMs, undefined);
}

const BURST_CHUNK = 50;

/** Callers arrive at `ratePerSec` (real) for `durationMs`, whatever happens to earlier ones. */
export async function runOpenLoop(
  contender: Contender,
  partner: PartnerProcess,
  origin: string,
  ratePerSec: number,
  durationMs: number,
  model: CallModel,
  settleLimitMs: number,
): Promise<RunResult> {
  await partner.reset();
  const total = Math.ceil((ratePerSec * durationMs) / 1000);
  const run = new Run(total, model.timeoutMs, '/work', model.clientWorkMs);
  const problems: string[] = [];
  const heapBase = heapAfterGc();
  currentRun = run;
  const sampler = sample(contender, problems, true, 2);
  const t0 = now();
  let issued = 0;
  await new Promise<void>((resolve) => {
    const arrive = () => {
      const due = Math.min(total, Math.floor(((now() - t0) * ratePerSec) / 1000));
      while (issued < due) void startCall(run, contender, origin, issued++);
      if (issued >= total || now() - t0 > durationMs * 3) {
        clearInterval(timer);
        resolve();
      }
    };
    const timer = setInterval(arrive, 1);
  });
  if (issued < total) problems.push(`only ${issued} of ${total} arrivals issued`);
  return finishRun(contender, partner, run, sampler, problems, settleLimitMs, heapBase);
}

/**
 * Time to shed, as the caller sees it: with every permit held and the queue full, `probes`
 * callers call `request()` one after another, each awaited, and each is refused.
 */
export async function measureShed(
  partner: PartnerProcess,
  origin: string,
  permits: number,
  maxQueue: number,
  probes: number,
): Promise<{ times: Float64Array; shed: number; problems: string[] }> {
  const contender = makeContender('hostgate-bounded', permits, {
    origin,
    deadlineMs: 60_000,
    maxQueue,
    unboundedQueue: 0,
  });
  const fill = new Run(permits + maxQueue, 0, '/hang');
  const problems: string[] = [];
  for (let i = 0; i < fill.n; i++) void startCall(fill, contender, origin, i);
  await waitFor(() => contender.gate!.queued === maxQueue && contender.gate!.held === permits);
  const times = new Float64Array(probes);
  let shed = 0;
  const url = `${origin}/hang?probe`;
  for (let k = 0; k < probes; k++) {
    const t0 = now();
    try {
      const { body } = await request(url, { dispatcher: contender.dispatcher });
      await body.text();
    } catch (error) {
      if (findShedError(error) instanceof QueueFullError) shed++;
    }
    times[k] = now() - t0;
  }
  problems.push(...contender.checkNow());
  fill.abortAll('probe finished');
  await fill.whenSettled(5_000);
  await settleMacrotasks();
  problems.push(...contender.checkIdle());
  await contender.close();
  await partner.drain();
  return { times, shed, problems };
}

/**
 * Heap held per waiting caller: with every permit held (requests parked on `/hang`), `k` more
 * callers are submitted; heapUsed after a full GC, before and after, divided by `k`. Counts
 * everything a waiting caller costs as this driver submits it (its pending promise and
 * AbortController, plus whatever the limiter keeps), the same for every contender.
 */
export async function measureBytesPerWaiter(
  kind: ContenderKind,
  partner: PartnerProcess,
  origin: string,
  permits: number,
  k: number,
): Promise<number> {
  const contender = makeContender(kind, permits, {
    origin,
    deadlineMs: 600_000,
    maxQueue: k + permits,
    unboundedQueue: k + permits,
  });
  const run = new Run(permits + k, 0, '/hang');
  currentRun = run;
  for (let i = 0; i < permits; i++) void startCall(run, contender, origin, i);
  await waitFor(() => run.sentCount === permits);
  await settleMacrotasks();
  const before = heapAfterGc();
  for (let i = permits; i < permits + k; i++) void startCall(run, contender, origin, i);
  await settleMacrotasks();
  const after = heapAfterGc();
  currentRun = undefined;
  run.abortAll('measured');
  await contender.close();
  await partner.drain();
  return (after - before) / k;
}

async function waitFor(condition: () => boolean, limitMs = 10_000): Promise<void> {
  const until = now() + limitMs;
  while (!condition()) {
    if (now() > until) throw new Error('timed out waiting for the benchmark setup');
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

let gcFn: (() => void) | undefined;

/** heapUsed after a full GC (exposes `gc` at run time when node was not started with it). */
export function heapAfterGc(): number {
  if (gcFn === undefined) {
    const existing = (globalThis as { gc?: () => void }).gc;
    if (existing !== undefined) gcFn = existing;
    else {
      v8.setFlagsFromString('--expose-gc');
      gcFn = vm.runInNewContext('gc') as () => void;
    }
  }
  gcFn();
  gcFn();
  return process.memoryUsage().heapUsed;
}

/** Sequential calls with one permit: the machine's own overhead on top of the service time. */
export async function measureCallOverhead(
  partner: PartnerProcess,
  origin: string,
  calls: number,
  serviceMs: number,
  clientWorkMs: number,
): Promise<{ meanMs: number; p50Ms: number }> {
  const contender = makeContender('p-limit', 1, { origin, deadlineMs: 1, unboundedQueue: 0 });
  const run = new Run(calls, 0, '/work', clientWorkMs);
  currentRun = run;
  for (let i = 0; i < calls; i++) await startCall(run, contender, origin, i);
  currentRun = undefined;
  await contender.close();
  await partner.drain();
  const calls_: number[] = [];
  for (let i = 0; i < calls; i++) {
    if (run.outcome[i] === OK) calls_.push(run.end[i]! - run.sent[i]! - serviceMs);
  }
  calls_.sort((a, b) => a - b);
  const meanMs = calls_.reduce((a, b) => a + b, 0) / Math.max(1, calls_.length);
  return { meanMs, p50Ms: calls_[calls_.length >> 1] ?? Number.NaN };
}
