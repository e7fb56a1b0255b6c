/**
 * Several worker processes that act together: forked TypeScript (through the tsx loader, like
 * `runChild`), each configured by one JSON argument and driven by IPC messages. The parent
 * waits on messages (events, each with a bounded deadline), never on sleeps. Used by the
 * shared-gate benchmark, the multi-process tests and the demo's replicas act.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

const TSX_LOADER = import.meta.resolve('tsx');

/** Every message has a `type`; the rest is up to the script. */
export interface FleetMessage {
  type: string;
  [key: string]: unknown;
}

export interface Worker {
  readonly child: ChildProcess;
  readonly pid: number | undefined;
  /** Everything the worker wrote to stderr so far. */
  readonly stderr: string;
  send(message: FleetMessage): void;
  /**
   * The first message of `type` not yet taken by an earlier `next` (messages are kept until
   * asked for); rejects when the worker exits first or after `timeoutMs` (default 30 s).
   */
  next<M = FleetMessage>(type: string, timeoutMs?: number): Promise<M>;
  /** Resolves once the process has exited. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Sends a signal; a no-op once it has exited. */
  kill(signal?: NodeJS.Signals): void;
}

const everyWorker = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of everyWorker) child.kill('SIGKILL');
});

/** Forks `script` with `config` as its one argument (JSON). */
export function forkWorker(
  script: string | URL,
  config: unknown,
  /** `execArgv`: instead of the tsx loader (a bundled script with a small heap, say). */
  options: { env?: NodeJS.ProcessEnv; execArgv?: string[] } = {},
): Worker {
  const path = typeof script === 'string' ? script : fileURLToPath(script);
  const child = fork(path, [JSON.stringify(config)], {
    execArgv: options.execArgv ?? ['--import', TSX_LOADER],
    stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
    env: options.env ?? process.env,
  });
  everyWorker.add(child);
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const inbox: FleetMessage[] = [];
  const takers: { type: string; take: (m: FleetMessage) => void }[] = [];
  child.on('message', (raw) => {
    const message = raw as FleetMessage;
    const i = takers.findIndex((t) => t.type === message.type);
    if (i >= 0) takers.splice(i, 1)[0]?.take(message);
    else inbox.push(message);
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.on('exit', (code, signal) => {
      everyWorker.delete(child);
      resolve({ code, signal });
    });
  });
  child.on('error', () => {}); // surfaced through `exited` and `next`
  return {
    child,
    get pid() {
      return child.pid;
    },
    get stderr() {
      return stderr;
    },
    send(message) {
      if (child.connected) child.send(message);
    },
    next<M>(type: string, timeoutMs = 30_000) {
      const i = inbox.findIndex((m) => m.type === type);
      if (i >= 0) return Promise.resolve(inbox.splice(i, 1)[0] as M);
      return new Promise<M>((resolve, reject) => {
        const taker = {
          type,
          take: (m: FleetMessage) => {
            clearTimeout(timer);
            resolve(m as M);
          },
        };
        const timer = setTimeout(() => {
          takers.splice(takers.indexOf(taker), 1);
          reject(new Error(`worker ${child.pid}: no '${type}' within ${timeoutMs} ms\n${stderr}`));
        }, timeoutMs);
        takers.push(taker);
        void exited.then(({ code, signal }) => {
          if (!takers.includes(taker)) return;
          takers.splice(takers.indexOf(taker), 1);
          clearTimeout(timer);
          reject(
            new Error(`worker ${child.pid} exited (${signal ?? code}) before '${type}'\n${stderr}`),
          );
        });
      });
    },
    exited,
    kill(signal = 'SIGTERM') {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    },
  };
}

/** Kills (SIGKILL) every worker still running and waits for them: for teardown. */
export async function killAllWorkers(): Promise<void> {
  const waits = [...everyWorker].map((child) => {
    const gone = once(child, 'exit');
    child.kill('SIGKILL');
    return gone;
  });
  await Promise.all(waits);
}

// --- in the worker ---------------------------------------------------------------------------

/** In a worker: its configuration (the JSON argument). */
export function workerConfig<T>(): T {
  const raw = process.argv[2];
  if (raw === undefined) throw new Error('worker started without its JSON configuration');
  return JSON.parse(raw) as T;
}

/** In a worker: sends one message to the parent (resolves once handed to the IPC channel). */
export function toParent(message: FleetMessage): Promise<void> {
  const send = process.send?.bind(process);
  if (send === undefined) {
    console.log(JSON.stringify(message));
    return Promise.resolve();
  }
  return new Promise<void>((resolve, reject) => {
    send(message, undefined, undefined, (error) => (error ? reject(error) : resolve()));
  });
}

/** In a worker: the next message of `type` from the parent. */
export function fromParent<M = FleetMessage>(type: string): Promise<M> {
  return new Promise<M>((resolve) => {
    const onMessage = (raw: unknown) => {
      const message = raw as FleetMessage;
      if (message.type !== type) return;
      process.off('message', onMessage);
      resolve(message as M);
    };
    process.on('message', onMessage);
  });
}

/** In a worker: every message of `type` from the parent, as it arrives. */
export function onParent<M = FleetMessage>(type: string, handler: (message: M) => void): void {
  process.on('message', (raw: unknown) => {
    const message = raw as FleetMessage;
    if (message.type === type) handler(message as M);
  });
}

/** In a worker: lets the parent's channel go, so the process can exit once its work is done. */
export function leaveParent(): void {
  process.disconnect?.();
}
