/**
 * Runs a child process for the doc-tests and the pack-test: resolves with its exit code, its
 * output (stdout and stderr together) and whether it was killed at `timeoutMs` (0: no bound).
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
