/**
 * Runs one benchmark case in a fresh Node process (TypeScript through the tsx loader, with
 * `--expose-gc`), so no JIT state, heap or timer from one case leaks into the next.
 */
import { type ChildProcess, execFileSync, fork } from 'node:child_process';
import { readFileSync } from 'node:fs';
import os from 'node:os';
import { fileURLToPath } from 'node:url';

const TSX_LOADER = import.meta.resolve('tsx');

export interface ChildOptions {
  /** Extra `node` flags; `--expose-gc` and the tsx loader are always there. */
  execArgv?: readonly string[];
  /** Kill the child (by its pid) after this many ms. Default 5 minutes. */
  timeoutMs?: number;
  /** Receives everything the child wrote to stderr, once it has exited (any outcome). */
  onStderr?: (text: string) => void;
  /** Pin the child, every thread of it, to these CPUs (`taskset -c` syntax) when it can be. */
  cpus?: string | undefined;
}

/**
 * Whether processes can be pinned to CPUs here: Linux's `taskset` and at least two CPUs.
 * Pinning a benchmark's client and its partner to CPUs of their own keeps the scheduler from
 * moving them onto each other's core mid-run, the largest source of run-to-run spread on a
 * 2-core machine.
 */
export const canPin: boolean = (() => {
  if (os.cpus().length < 2) return false;
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
})();

/**
 * Pins a running process, every thread of it, to `cpus`. Threads it starts later inherit the
 * mask. No-op where pinning is not possible (see {@link canPin}).
 */
export function pin(child: ChildProcess, cpus: string): void {
  if (!canPin || child.pid === undefined) return;
  execFileSync('taskset', ['-a', '-p', '-c', cpus, String(child.pid)], { stdio: 'ignore' });
}

/** Forks `script` with `args` and resolves with the one message it sends via `sendResult`. */
export function runChild<T>(
  script: string | URL,
  args: readonly string[],
  options: ChildOptions = {},
): Promise<T> {
  const path = typeof script === 'string' ? script : fileURLToPath(script);
  const timeoutMs = options.timeoutMs ?? 300_000;
  return new Promise<T>((resolve, reject) => {
    let result: { value: T } | undefined;
    let stderr = '';
    const child = fork(path, [...args], {
      execArgv: ['--expose-gc', '--import', TSX_LOADER, ...(options.execArgv ?? [])],
      stdio: ['ignore', 'inherit', 'pipe', 'ipc'],
    });
    // Before the child has loaded its imports: everything it measures runs pinned.
    if (options.cpus !== undefined) pin(child, options.cpus);
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${path} ${args.join(' ')}: timed out after ${timeoutMs} ms`));
    }, timeoutMs);
    child.on('message', (message) => {
      result = { value: message as T };
    });
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      options.onStderr?.(stderr);
      if (code === 0 && result !== undefined) resolve(result.value);
      else {
        const why = signal ? `signal ${signal}` : `exit code ${code}`;
        const what = result === undefined ? 'no result' : 'a result';
        reject(new Error(`${args.join(' ')}: ${why} with ${what}\n${stderr.trim()}`));
      }
    });
  });
}

/**
 * Steal time so far, per CPU, in ms (Linux's /proc/stat; `undefined` elsewhere): time a CPU of
 * this virtual machine wanted to run and the hypervisor ran another machine instead. On the
 * project's VMs it comes in bursts (seen: 2.3 s of one CPU stolen during a 9 s case, which ran
 * at half its usual speed), and it is no property of the code measured.
 */
export function stealMs(): number[] | undefined {
  let text: string;
  try {
    text = readFileSync('/proc/stat', 'utf8');
  } catch {
    return undefined;
  }
  // "cpuN user nice system idle iowait irq softirq steal ...", in USER_HZ (100 a second).
  const perCpu = text.split('\n').filter((line) => /^cpu\d+ /.test(line));
  return perCpu.map((line) => Number(line.trim().split(/\s+/)[8] ?? 0) * 10);
}

/** The largest share (%) of `elapsedMs` that the hypervisor stole from any one CPU since `before`. */
export function stolenPercent(before: number[] | undefined, elapsedMs: number): number {
  const after = stealMs();
  if (before === undefined || after === undefined || elapsedMs <= 0) return 0;
  return Math.max(0, ...after.map((ms, i) => ((ms - (before[i] ?? ms)) / elapsedMs) * 100));
}

/** In the child: hands the result to the parent (or prints it when run by hand). */
export async function sendResult(value: unknown): Promise<void> {
  const send = process.send?.bind(process);
  if (send === undefined) {
    console.log(JSON.stringify(value, null, 2));
    return;
  }
  await new Promise<void>((resolve, reject) => {
    send(value, undefined, undefined, (error) => (error ? reject(error) : resolve()));
  });
  process.disconnect?.();
}

/** In the child: a forced full GC; throws when the process was not started with `--expose-gc`. */
export function fullGc(): void {
  const gc = globalThis.gc;
  if (typeof gc !== 'function') throw new Error('run with node --expose-gc');
  // Twice: the first pass can leave garbage that only weak/finalization processing frees.
  gc();
  gc();
}

/** In the child: heap in use after a full GC, in bytes. */
export function heapAfterGc(): number {
  fullGc();
  return process.memoryUsage().heapUsed;
}
