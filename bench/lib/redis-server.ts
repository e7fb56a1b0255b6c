import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type RespValue, respCommand } from './resp.js';

/**
 * Private `redis-server` processes for tests, benchmarks and the demo: they must kill, pause,
 * restart or fail over the Redis they talk to, or count its commands. Each one
 * listens on a free loopback port, keeps nothing on disk, and is SIGKILLed in teardown
 * (`stopAllRedis()`, and on process exit as a last resort).
 */

const BINARY = 'redis-server';

function probe(): string | undefined {
  const result = spawnSync(BINARY, ['--version'], { encoding: 'utf8' });
  if (result.error !== undefined || result.status !== 0) return `${BINARY} is not on the PATH`;
  return undefined;
}

const missing = probe();

/** True when `redis-server` can be started here; otherwise `redisMissing` says why. */
export const redisAvailable = missing === undefined;

/** Why `redis-server` cannot be started here (one line), or undefined when it can. */
export const redisMissing: string | undefined = missing;

export interface RedisServer {
  readonly port: number;
  /** `redis://127.0.0.1:port`. */
  readonly url: string;
  /** Pid of the current process (changes after `restart()`). */
  readonly pid: number | undefined;
  /** Whether a process is running (paused counts as running). */
  readonly running: boolean;
  /** One command on a fresh connection. */
  command(...args: (string | number)[]): Promise<RespValue>;
  /** SIGTERM, and waits for the exit. */
  stop(): Promise<void>;
  /** SIGKILL, and waits for the exit. */
  kill(): Promise<void>;
  /** SIGSTOP: the socket stays open, nothing answers. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** Starts a fresh (empty) server on the same port; stops the running one first. */
  restart(): Promise<void>;
  /** Starts a replica of this server on another free port and waits until it has synced. */
  startReplica(): Promise<RedisServer>;
  /** `REPLICAOF NO ONE`: this replica becomes a primary. */
  promote(): Promise<void>;
  /** Kills the process for good (SIGCONT first so a paused one dies too). */
  close(): Promise<void>;
}

const live = new Set<ChildProcess>();

process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** Kills every server this process started. Call it in `afterAll` / `afterEach`. */
export async function stopAllRedis(): Promise<void> {
  await Promise.all([...live].map((child) => killChild(child)));
}

async function killChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGCONT');
  child.kill('SIGKILL');
  await exited;
}

/** A port that was free a moment ago (the kernel's choice for port 0). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

const READY = 'Ready to accept connections';
const SYNCED = 'MASTER <-> REPLICA sync: Finished with success';

/**
 * Spawns redis-server and resolves once its log says `until` (an event, not a poll), or rejects
 * when it exits first or `timeoutMs` passes. Then PING confirms it answers.
 */
async function spawnServer(
  port: number,
  extra: readonly string[],
  until: string,
  timeoutMs: number,
): Promise<ChildProcess> {
  if (missing !== undefined) throw new Error(`cannot start Redis: ${missing}`);
  // Its own directory: a replica's full sync writes an RDB file there, which a later server
  // started in the same directory would load.
  const dir = mkdtempSync(join(tmpdir(), 'hostgate-redis-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'];
  // A replica syncs at once instead of after the default 5 s batching delay.
  args.push('--repl-diskless-sync-delay', '0');
  const child = spawn(BINARY, [...args, '--dir', dir, ...extra], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  live.add(child);
  child.on('exit', () => {
    live.delete(child);
    rmSync(dir, { recursive: true, force: true });
  });
  let log = '';
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`redis-server :${port} not ready after ${timeoutMs} ms\n${log}`));
      }, timeoutMs);
      const onData = (chunk: string) => {
        log += chunk;
        if (log.includes(until)) {
          clearTimeout(timer);
          resolve();
        }
      };
      child.stdout?.setEncoding('utf8').on('data', onData);
      child.stderr?.setEncoding('utf8').on('data', onData);
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`redis-server :${port} exited (${signal ?? code}) before ready\n${log}`));
      });
      child.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
    });
    const pong = await respCommand(port, 'PING');
    if (pong !== 'PONG') throw new Error(`redis-server :${port} answered PING with ${pong}`);
  } catch (error) {
    await killChild(child);
    throw error;
  }
  // Keep draining the log so a chatty server never blocks on a full pipe.
  child.stdout?.resume();
  child.stderr?.resume();
  return child;
}

export interface StartRedisOptions {
  /** Port to listen on; default a free one. */
  port?: number;
  /** Extra redis-server arguments, e.g. `['--replicaof', '127.0.0.1', '6380']`. */
  args?: readonly string[];
  /** Bound on startup (and replica sync). Default 10 s. */
  timeoutMs?: number;
}

/** Starts a private redis-server on a free 127.0.0.1 port and waits until it answers PING. */
export async function startRedis(options: StartRedisOptions = {}): Promise<RedisServer> {
  const timeoutMs = options.timeoutMs ?? 10_000;
  const extra = options.args ?? [];
  const until = extra.includes('--replicaof') ? SYNCED : READY;
  let port = options.port ?? (await freePort());
  let child: ChildProcess | undefined;
  // A free port can be taken between the probe and the bind: try a few.
  for (let attempt = 0; child === undefined; attempt++) {
    try {
      child = await spawnServer(port, extra, until, timeoutMs);
    } catch (error) {
      if (options.port !== undefined || attempt >= 2) throw error;
      port = await freePort();
    }
  }
  let current: ChildProcess = child;
  const server: RedisServer = {
    port,
    url: `redis://127.0.0.1:${port}`,
    get pid() {
      return current.pid;
    },
    get running() {
      return current.exitCode === null && current.signalCode === null;
    },
    command: (...args) => respCommand(port, ...args),
    async stop() {
      if (!server.running) return;
      const exited = once(current, 'exit');
      current.kill('SIGCONT');
      current.kill('SIGTERM');
      await exited;
    },
    kill: () => killChild(current),
    pause() {
      current.kill('SIGSTOP');
    },
    resume() {
      current.kill('SIGCONT');
    },
    async restart() {
      await killChild(current);
      current = await spawnServer(port, [], READY, timeoutMs);
    },
    startReplica: () => startRedis({ args: ['--replicaof', '127.0.0.1', String(port)], timeoutMs }),
    async promote() {
      const reply = await respCommand(port, 'REPLICAOF', 'NO', 'ONE');
      if (reply !== 'OK') throw new Error(`REPLICAOF NO ONE on :${port} answered ${reply}`);
    },
    close: () => killChild(current),
  };
  return server;
}

export interface RedisCluster {
  /** The primaries, each serving a third (or so) of the 16384 hash slots. */
  readonly nodes: readonly RedisServer[];
  /** Kills every node. */
  close(): Promise<void>;
}

/**
 * Starts a Redis Cluster of `masters` primaries (no replicas) on free ports, assigns the slots
 * with `redis-cli --cluster create`, and resolves once every node reports `cluster_state:ok`.
 */
export async function startRedisCluster(masters = 3, timeoutMs = 20_000): Promise<RedisCluster> {
  const nodes: RedisServer[] = [];
  try {
    for (let i = 0; i < masters; i++) {
      // The node table lives in the server's own directory (redis-server runs there).
      nodes.push(await startRedis({ args: ['--cluster-enabled', 'yes'], timeoutMs }));
    }
    const create = spawn(
      'redis-cli',
      [
        '--cluster',
        'create',
        ...nodes.map((node) => `127.0.0.1:${node.port}`),
        '--cluster-replicas',
        '0',
        '--cluster-yes',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    create.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
    });
    create.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
    });
    const [code] = (await once(create, 'exit')) as [number | null];
    if (code !== 0) throw new Error(`redis-cli --cluster create exited ${code}\n${out}`);
    // The slots are assigned; each node turns `ok` once gossip has told it about the others.
    const deadline = performance.now() + timeoutMs;
    for (const node of nodes) {
      for (;;) {
        const info = String(await node.command('CLUSTER', 'INFO'));
        if (info.includes('cluster_state:ok')) break;
        if (performance.now() > deadline) {
          throw new Error(`cluster node :${node.port} not ok after ${timeoutMs} ms\n${info}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
  } catch (error) {
    await Promise.all(nodes.map((node) => node.close()));
    throw error;
  }
  return { nodes, close: async () => void (await Promise.all(nodes.map((n) => n.close()))) };
}
