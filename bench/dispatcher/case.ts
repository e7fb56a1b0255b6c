/**
 * One case of bench/dispatcher.ts, in a fresh process: `case.ts <case> <port> [dist|src] [smoke]`.
 * Throughput cases send a fixed number of requests with a fixed number in flight.
 *
 * hostgate comes from the built package (`dist/`, what `npm i hostgate` installs: tsc's output)
 * unless `src` is asked for: tsx runs the sources through esbuild, whose `keepNames` adds code
 * a user's process never runs.
 */
import Bottleneck from 'bottleneck';
import { bulkhead } from 'cockatiel';
import pLimit from 'p-limit';
import { Agent, type Dispatcher, request } from 'undici';
import { heapAfterGc, sendResult, stealMs, stolenPercent } from '../lib/child.js';
import { BareGate, PassThroughDispatcher } from './bare-gate.js';

const [name, portText, from = 'dist', size] = process.argv.slice(2);
const entry = new URL(
  from === 'src' ? '../../src/index.ts' : '../../dist/src/index.js',
  import.meta.url,
).href;
const { HostLimiter, LimitedAgent, limitHosts } = (await import(
  entry
)) as typeof import('../../src/index.js');
const origin = `http://127.0.0.1:${portText}`;
// The smoke run (`npm test`) checks that every case runs, not its speed: a few thousand requests.
// The warm-up covers the JIT's ramp: measured in chunks of 2,000 requests on loopback, throughput
// climbs for the first 8,000 to 10,000 (every case; a wrapper has more code to compile, so it
// climbs later), so a shorter warm-up measures compilation, not the steady state a service
// runs in. The measured stretch is long enough to span several young-generation GCs.
const WARMUP = size === 'smoke' ? 200 : 12_000;
const REQUESTS = size === 'smoke' ? 2_000 : 40_000;
/** A partner answering after 5 ms: 8,000 requests (about two seconds at the cap of 20). */
const PARTNER_5MS = { path: '/slow?ms=5', requests: 8_000, warmup: 4_000 };

function limiterOf(limit: number, maxQueue: number): InstanceType<typeof HostLimiter> {
  return new HostLimiter({
    partners: [{ name: 'bench', hosts: [origin], limit, maxQueue, queueTimeout: 60_000 }],
  });
}

/** limitHosts through `compose`. */
function limited(limit: number, maxQueue: number, connections?: number): Dispatcher {
  const agent = new Agent(connections ? { connections } : {});
  return agent.compose(limitHosts(limiterOf(limit, maxQueue)));
}

/** The same limiter as a wrapping dispatcher. */
function wrapped(limit: number, maxQueue: number, connections?: number): Dispatcher {
  const agent = new Agent(connections ? { connections } : {});
  return new LimitedAgent(agent, limiterOf(limit, maxQueue));
}

/** One request, its body read to the end: what every case's callers do. */
type Send = (url: string) => Promise<void>;

function via(dispatcher: Dispatcher): Send {
  return async (url) => {
    const res = await request(url, { dispatcher });
    await res.body.dump();
  };
}

/**
 * The peers: a general-purpose limiter wrapped around `undici.request`, the slot held until the
 * body has been read (as a permit is), over the same Agent as the hostgate case beside it.
 */
const peers = {
  'p-limit': (limit: number, _maxQueue: number, send: Send): Send => {
    const run = pLimit(limit);
    return (url) => run(send, url);
  },
  cockatiel: (limit: number, maxQueue: number, send: Send): Send => {
    const policy = bulkhead(limit, maxQueue);
    return (url) => policy.execute(() => send(url));
  },
  bottleneck: (limit: number, _maxQueue: number, send: Send): Send => {
    const scheduler = new Bottleneck({ maxConcurrent: limit });
    return (url) => scheduler.schedule(send, url);
  },
};

function peer(
  kind: keyof typeof peers,
  limit: number,
  maxQueue: number,
  connections?: number,
): Send {
  return peers[kind](limit, maxQueue, via(new Agent(connections ? { connections } : {})));
}

/**
 * Bottleneck starts every job from a timer (about one a millisecond, bench/semaphore-libs.ts), so
 * its cases send fewer requests: client CPU per request is still comparable; throughput is not.
 */
const BOTTLENECK = size === 'smoke' ? {} : { requests: 8_000, warmup: 4_000 };

/** Requests per second with `inFlight` callers looping until `total` requests are done. */
async function throughput(
  send: Send,
  inFlight: number,
  total: number,
  path = '/',
): Promise<number> {
  let started = 0;
  const url = `${origin}${path}`;
  const worker = async () => {
    while (started < total) {
      started++;
      await send(url);
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: inFlight }, worker));
  return (total / (performance.now() - t0)) * 1000;
}

/**
 * Requests per second, and the client's CPU time per request (user + system): on a machine
 * busy with other work, wall-clock throughput swings with the neighbours' load, while the CPU
 * each request costs the client moves far less.
 */
async function measureThroughput(
  dispatcher: Dispatcher | Send,
  inFlight: number,
  { path = '/', requests = REQUESTS, warmup = WARMUP } = {},
) {
  const send = typeof dispatcher === 'function' ? dispatcher : via(dispatcher);
  // Two warm-up rounds, not one: each round starts from an empty queue and ends by draining it,
  // and a measured run that starts as a warm-up round never did finds code optimized for the
  // binding steady state only (a gate's grant without a queue, the deadline timer armed afresh):
  // V8 deoptimizes and recompiles those functions inside the measured stretch. By --trace-opt,
  // after one round of 12,000 LimitedAgent's measured run recompiled about 20 of hostgate's
  // functions (wait, #grant, granted, newWaiter, #dequeue, …); after two rounds of 6,000, none.
  for (let round = 0; round < 2; round++) {
    await throughput(send, inFlight, Math.ceil(warmup / 2), path);
  }
  // One turn of the loop: undici hands a socket back to its pool from an immediate after the
  // response, so the measured run starts with the warm-up's sockets free. Without it, an Agent
  // without a connection cap (LimitedAgent's) opened up to 19 new ones at the start.
  await new Promise((resolve) => setImmediate(resolve));
  const cpu = process.cpuUsage();
  const steal = stealMs();
  const t0 = performance.now();
  const reqPerSec = await throughput(send, inFlight, requests, path);
  const stolen = stolenPercent(steal, performance.now() - t0);
  const used = process.cpuUsage(cpu);
  return { reqPerSec, cpuUsPerRequest: (used.user + used.system) / requests, stolen };
}

/**
 * 10,000 callers against 20 slow in-flight requests: what the waiting costs in heap, how fast
 * overflow is shed, and how long the abort of a queued request takes to reach its caller.
 */
async function overload(dispatcher: Dispatcher) {
  const before = heapAfterGc();
  const slow = () =>
    request(`${origin}/slow?ms=1500`, { dispatcher }).then((res) => res.body.dump());
  const pending: Promise<unknown>[] = Array.from({ length: 20 }, slow);
  // The probe waits at the head of the queue; it is aborted once everything is parked.
  const ac = new AbortController();
  const probe = request(`${origin}/`, { dispatcher, signal: ac.signal }).catch(() =>
    performance.now(),
  );
  let shed = 0;
  for (let i = 0; i < 10_000; i++) {
    pending.push(
      slow().catch(() => {
        shed++;
      }),
    );
  }
  await new Promise((resolve) => setTimeout(resolve, 200));
  const heapBytes = heapAfterGc() - before;
  // Time to shed: one caller at a time against the full queue, from call to rejection.
  let shedMs: number | undefined;
  if (shed > 0) {
    const t0 = performance.now();
    for (let i = 0; i < 1000; i++) await slow().catch(() => undefined);
    shedMs = (performance.now() - t0) / 1000;
  }
  const abortAt = performance.now();
  ac.abort();
  const rejectedAt = (await probe) as number;
  // The parked callers are left behind: the process exits once the result is sent.
  return {
    heapBytes,
    waited: 10_000 - shed,
    shed,
    meanTimeToShedMs: shedMs,
    abortToRejectMs: rejectedAt - abortAt,
  };
}

const cases: Record<string, () => Promise<unknown>> = {
  'raw-free': () => measureThroughput(new Agent({ connections: 64 }), 64),
  'hostgate-free': () => measureThroughput(limited(10_000, 100, 64), 64),
  // What any interceptor costs: undici converts headers between its two handler APIs.
  'noop-free': () =>
    measureThroughput(
      new Agent({ connections: 64 }).compose(
        (dispatch) => (opts, handler) => dispatch(opts, handler),
      ),
      64,
    ),
  'wrapper-free': () => measureThroughput(wrapped(10_000, 100, 64), 64),
  // The floors of a wrapping dispatcher, limit not binding: one that passes every request
  // straight on, and the bare gate (its handler wrapped, a counter, never a wait).
  'pass-free': () =>
    measureThroughput(new PassThroughDispatcher(new Agent({ connections: 64 })), 64),
  'bare-free': () => measureThroughput(new BareGate(new Agent({ connections: 64 }), 10_000), 64),
  'raw-bound': () => measureThroughput(new Agent({ connections: 20 }), 200),
  'hostgate-bound': () => measureThroughput(limited(20, 1_000), 200),
  'wrapper-bound': () => measureThroughput(wrapped(20, 1_000), 200),
  // The floor: the barest gate a wrapping dispatcher can be (bare-gate.ts), same Agent, same cap.
  'bare-bound': () => measureThroughput(new BareGate(new Agent(), 20), 200),
  // The same cap with a partner that takes 5 ms a request: the cap, not the client's CPU, bounds
  // the throughput (20 / 5 ms = 4,000 a second), as it does with partners that set caps.
  'raw-bound-5ms': () => measureThroughput(new Agent({ connections: 20 }), 200, PARTNER_5MS),
  'hostgate-bound-5ms': () => measureThroughput(limited(20, 1_000), 200, PARTNER_5MS),
  'wrapper-bound-5ms': () => measureThroughput(wrapped(20, 1_000), 200, PARTNER_5MS),
  // The peers, the same caps: not binding (64 in flight, 64 connections), binding (20 of 200).
  'plimit-free': () => measureThroughput(peer('p-limit', 10_000, 100, 64), 64),
  'cockatiel-free': () => measureThroughput(peer('cockatiel', 10_000, 100, 64), 64),
  'bottleneck-free': () => measureThroughput(peer('bottleneck', 10_000, 100, 64), 64, BOTTLENECK),
  'plimit-bound': () => measureThroughput(peer('p-limit', 20, 1_000), 200),
  'cockatiel-bound': () => measureThroughput(peer('cockatiel', 20, 1_000), 200),
  'bottleneck-bound': () => measureThroughput(peer('bottleneck', 20, 1_000), 200, BOTTLENECK),
  'raw-overload': () => overload(new Agent({ connections: 20 })),
  'hostgate-overload-unbounded': () => overload(limited(20, 20_000)),
  'hostgate-overload': () => overload(limited(20, 200)),
};

const run = cases[name ?? ''];
if (run === undefined)
  throw new Error(`unknown case ${name}; one of ${Object.keys(cases).join(', ')}`);
await sendResult(await run());
process.exit(0);
