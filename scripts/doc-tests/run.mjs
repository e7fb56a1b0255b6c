/**
 * Child processes for the doc-tests and the pack-test: `run` resolves with a child's exit code,
 * its output (stdout and stderr together) and whether it was killed at `timeoutMs` (0: no
 * bound); `pooled` runs a few at once, so that on a loaded machine each one's time bound is
 * spent on its own work rather than waiting for a core behind all the others.
 */
import { spawn } from 'node:child_process';

export function run(command, argv, { cwd, env = process.env, timeoutMs = 0 } = {}) {
  return new Promise((resolve) => {
    const child = spawn(command, argv, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let timedOut = false;
    const append = (chunk) => {
      output += chunk;
    };
    child.stdout.setEncoding('utf8').on('data', append);
    child.stderr.setEncoding('utf8').on('data', append);
    const timer =
      timeoutMs > 0
        ? setTimeout(() => {
            timedOut = true;
            output += `\n(killed after ${timeoutMs} ms)\n`;
            child.kill('SIGKILL');
          }, timeoutMs)
        : undefined;
    child.on('error', (error) => {
      clearTimeout(timer);
      resolve({ code: 1, output: `${output}${error}\n`, timedOut });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? (signal ? 1 : 0), output, timedOut });
    });
  });
}

/** At most `limit` of `tasks` (functions returning promises) at once, results in order. */
export async function pooled(tasks, limit) {
  const results = new Array(tasks.length);
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await tasks[i]();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, worker));
  return results;
}
