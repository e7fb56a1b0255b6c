/**
 * The simulated partner: a real HTTP server on 127.0.0.1:0 that serves at most `capacity`
 * requests at a time, each taking `serviceMs`, and queues what exceeds that inside itself
 * (FIFO, up to `queueMax`, then 503). It runs in its own process (forked by `forkPartner`) so
 * that, on a 2-core machine, the partner and the client under test each get a core.
 *
 * Service time is kept on a virtual clock: when a worker finishes request k at virtual time
 * T, request k+1 starts at max(T, its arrival) rather than when the (late) timer fired. So a
 * late timer delays one response by its lateness but never lowers the partner's throughput
 * below `capacity / serviceMs`: the partner is the machine the model describes, not a copy
 * of our event loop's jitter.
 *
 * Like most real servers, the partner by default still does the work of a request whose
 * client has gone (timed out and closed the socket): the work was already queued. That is
 * what turns too many permits into a collapse: the partner stays busy serving the dead.
 *
 * Routes: `/work?i=<id>` (the modelled call), `/hang` (never answers until the client
 * closes; for calibrations, outside capacity accounting).
 */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

export interface PartnerConfig {
  /** Requests served at once (the partner's real limit). */
  capacity: number;
  /** Service time of one request, ms. */
  serviceMs: number;
  /** Simulated network/client overhead added to every response, ms (holds no worker). */
  extraMs: number;
  /** Requests the partner queues inside itself before answering 503. */
  queueMax: number;
  /** Serve requests whose client already left (true, like most servers) or skip them. */
  serveAbandoned: boolean;
}

export interface PartnerStats {
  arrived: number;
  /** Responses written to a client still waiting. */
  served: number;
  /** Work done for clients that had already gone (timed out): wasted capacity. */
  servedAbandoned: number;
  skippedAbandoned: number;
  rejectedFull: number;
  /** Requests arrived and not yet answered (in service, queued, or in the overhead delay). */
  open: number;
  /** The most requests the partner held at once (in service + queued inside it). */
  peakOpen: number;
  /** The longest its internal queue got. */
  peakQueue: number;
  /** The most requests in service at once (never above capacity, by construction). */
  peakBusy: number;
  /** TCP connections accepted. */
  connections: number;
  /** The most TCP connections open at once. */
  peakConnections: number;
}

interface Entry {
  res: http.ServerResponse;
  arrivedAt: number;
  start: number;
  gone: boolean;
}

/**
 * Node's timers have 1 ms resolution (a fractional delay is effectively truncated or rounded
 * up by up to a millisecond) and fire a little late on average. Rounding at random in
 * proportion to the fraction keeps the *mean* delay exact, so a sub-millisecond duration is
 * simulated without bias; each response still carries up to ~1 ms of jitter, as a network
 * would. `lateness` is the running mean of how late our timers fired, subtracted up front.
 */
function dither(ms: number): number {
  if (!(ms > 0)) return 0;
  const whole = Math.floor(ms);
  return Math.random() < ms - whole ? whole + 1 : whole;
}

type Command =
  | { cmd: 'configure'; config: PartnerConfig }
  | { cmd: 'reset' }
  | { cmd: 'stats' }
  | { cmd: 'drain'; timeoutMs: number };

/** The server itself; used in the child process. */
export async function startPartnerServer(initial: PartnerConfig): Promise<{
  origin: string;
  handle: (command: Command) => Promise<unknown>;
  close: () => Promise<void>;
}> {
  let config = initial;
  let busy = 0;
  let queue: Entry[] = [];
  let queueHead = 0;
  const zero = (): PartnerStats => ({
    arrived: 0,
    served: 0,
    servedAbandoned: 0,
    skippedAbandoned: 0,
    rejectedFull: 0,
    open: 0,
    peakOpen: 0,
    peakQueue: 0,
    peakBusy: 0,
    connections: 0,
    peakConnections: 0,
  });
  let openConnections = 0;
  let stats = zero();
  const hanging = new Set<http.ServerResponse>();
  const now = () => performance.now();

  const queued = () => queue.length - queueHead;
  const shift = (): Entry | undefined => {
    if (queueHead >= queue.length) return undefined;
    const entry = queue[queueHead]!;
    queue[queueHead++] = undefined as unknown as Entry;
    if (queueHead > 1024 && queueHead * 2 > queue.length) {
      queue = queue.slice(queueHead);
      queueHead = 0;
    }
    return entry;
  };

  let lateness = 0;
  const startService = (entry: Entry, start: number) => {
    entry.start = start;
    const delay = dither(start + config.serviceMs + config.extraMs - now() - lateness);
    if (delay === 0) setImmediate(complete, entry);
    else setTimeout(complete, delay, entry);
  };

  const complete = (entry: Entry) => {
    const late = now() - (entry.start + config.serviceMs + config.extraMs);
    lateness += (Math.min(late, 5) - lateness) * 0.02;
    const freedAt = entry.start + config.serviceMs;
    stats.open--;
    if (entry.gone) stats.servedAbandoned++;
    else {
      stats.served++;
      entry.res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 });
      entry.res.end('ok');
    }
    // Capacity lowered mid-run (configure): this worker retires instead of taking more work.
    if (busy > config.capacity) {
      busy--;
      return;
    }
    for (let next = shift(); next !== undefined; next = shift()) {
      if (next.gone && !config.serveAbandoned) {
        stats.skippedAbandoned++;
        stats.open--;
        continue;
      }
      startService(next, Math.max(freedAt, next.arrivedAt));
      return;
    }
    busy--;
  };

  const server = http.createServer(
    { keepAliveTimeout: 30_000, requestTimeout: 0, noDelay: true },
    (req, res) => {
      req.resume();
      const url = req.url ?? '/';
      if (url.startsWith('/hang')) {
        hanging.add(res);
        res.on('close', () => hanging.delete(res));
        return;
      }
      if (!url.startsWith('/work')) {
        res.writeHead(404).end();
        return;
      }
      stats.arrived++;
      if (busy >= config.capacity && queued() >= config.queueMax) {
        stats.rejectedFull++;
        res.writeHead(503, { 'content-length': 0 }).end();
        return;
      }
      const entry: Entry = { res, arrivedAt: now(), start: 0, gone: false };
      res.on('close', () => {
        if (!res.writableFinished) entry.gone = true;
      });
      if (++stats.open > stats.peakOpen) stats.peakOpen = stats.open;
      if (busy < config.capacity) {
        if (++busy > stats.peakBusy) stats.peakBusy = busy;
        startService(entry, entry.arrivedAt);
      } else {
        queue.push(entry);
        if (queued() > stats.peakQueue) stats.peakQueue = queued();
      }
    },
  );
  server.on('connection', (socket) => {
    stats.connections++;
    if (++openConnections > stats.peakConnections) stats.peakConnections = openConnections;
    socket.on('close', () => openConnections--);
  });
  server.listen(0, '127.0.0.1', 1024);
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;

  const handle = async (command: Command): Promise<unknown> => {
    switch (command.cmd) {
      case 'configure':
        config = command.config;
        // Capacity raised mid-run: idle workers take queued requests at once.
        for (let next = busy < config.capacity ? shift() : undefined; next !== undefined; ) {
          if (next.gone && !config.serveAbandoned) {
            stats.skippedAbandoned++;
            stats.open--;
          } else {
            if (++busy > stats.peakBusy) stats.peakBusy = busy;
            startService(next, now());
          }
          next = busy < config.capacity ? shift() : undefined;
        }
        return undefined;
      case 'reset':
        stats = zero();
        stats.open = busy + queued();
        stats.peakOpen = stats.open;
        stats.peakBusy = busy;
        stats.peakConnections = openConnections;
        return undefined;
      case 'stats':
        return { ...stats, open: stats.open };
      case 'drain': {
        // Bounded: wait until abandoned work from the last run is done, then drop the rest.
        const until = now() + command.timeoutMs;
        while (busy + queued() > 0 && now() < until) {
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        const left = busy + queued();
        for (let e = shift(); e !== undefined; e = shift()) e.res.destroy();
        for (const res of hanging) res.destroy();
        return left;
      }
    }
  };

  return {
    origin: `http://127.0.0.1:${port}`,
    handle,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export interface PartnerProcess {
  origin: string;
  pid: number;
  configure(config: PartnerConfig): Promise<void>;
  reset(): Promise<void>;
  stats(): Promise<PartnerStats>;
  /** Waits (at most `timeoutMs`) for leftover work to finish; returns what was left. */
  drain(timeoutMs?: number): Promise<number>;
  close(): Promise<void>;
}

/** The partner in this process (`--partner-in-process`): no IPC, shares the event loop. */
export async function startPartnerHere(config: PartnerConfig): Promise<PartnerProcess> {
  const server = await startPartnerServer(config);
  return {
    origin: server.origin,
    pid: process.pid,
    configure: async (c) => {
      await server.handle({ cmd: 'configure', config: c });
    },
    reset: async () => {
      await server.handle({ cmd: 'reset' });
    },
    stats: () => server.handle({ cmd: 'stats' }) as Promise<PartnerStats>,
    drain: (timeoutMs = 10_000) => server.handle({ cmd: 'drain', timeoutMs }) as Promise<number>,
    close: () => server.close(),
  };
}

/** Forks the partner into its own process and talks to it over IPC. */
export async function forkPartner(config: PartnerConfig): Promise<PartnerProcess> {
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), ['--partner-child'], {
    execArgv: ['--import', import.meta.resolve('tsx')],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  let seq = 0;
  const pending = new Map<number, (value: unknown) => void>();
  let ready: (origin: string) => void;
  let failed: (error: Error) => void;
  const origin = new Promise<string>((resolve, reject) => {
    ready = resolve;
    failed = reject;
  });
  child.on('message', (message: { id?: number; origin?: string; result?: unknown }) => {
    if (message.origin !== undefined) ready(message.origin);
    else if (message.id !== undefined) {
      pending.get(message.id)?.(message.result);
      pending.delete(message.id);
    }
  });
  child.on('exit', (code) => failed(new Error(`partner process exited with code ${code}`)));
  child.send({ cmd: 'start', config });
  const timer = setTimeout(() => failed(new Error('partner did not start within 15 s')), 15_000);
  const url = await origin.finally(() => clearTimeout(timer));

  const call = <T>(command: Command): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const id = ++seq;
      pending.set(id, resolve as (value: unknown) => void);
      child.send({ id, ...command }, (error) => {
        if (error) {
          pending.delete(id);
          reject(error);
        }
      });
    });

  return {
    origin: url,
    pid: child.pid ?? -1,
    configure: (c) => call({ cmd: 'configure', config: c }),
    reset: () => call({ cmd: 'reset' }),
    stats: () => call({ cmd: 'stats' }),
    drain: (timeoutMs = 10_000) => call({ cmd: 'drain', timeoutMs }),
    close: async () => {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.disconnect();
      const kill = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(kill);
    },
  };
}

if (process.argv.includes('--partner-child')) {
  let server: Awaited<ReturnType<typeof startPartnerServer>> | undefined;
  process.on('message', async (message: { id?: number; cmd: string; config?: PartnerConfig }) => {
    if (message.cmd === 'start') {
      server = await startPartnerServer(message.config!);
      process.send?.({ origin: server.origin });
      return;
    }
    const result = await server?.handle(message as Command);
    process.send?.({ id: message.id, result });
  });
  process.on('disconnect', () => {
    void server?.close().finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 2_000).unref();
  });
}
