/**
 * The Semaphore benchmark's steady (or burst) case counted in instructions rather than timed:
 * a reading that other work on a shared machine does not move, for comparing changes and
 * libraries when the load average is high.
 *
 *   npx tsx bench/semaphore-instructions.ts                      hostgate, its acquire shape, async-sema
 *   npx tsx bench/semaphore-instructions.ts --only hostgate,p-limit --kind burst
 *
 * Each library runs the case runner (bench/semaphore-case.ts, the same adapters and sizes as
 * `npm run bench`) under `valgrind --tool=callgrind`, with `node --single-threaded` so that
 * compilation and GC run on the main thread and the count does not depend on how threads were
 * scheduled: once with 1 measured round and once with 3, both after the same warm-up. The
 * difference over 2 rounds' operations is the instructions per operation of a warm round, start-up
 * and warm-up cancelled out. The young generation is pinned at the 16 MB per semi-space it grows
 * to in these cases anyway, and the memory reducer is off: left to their heuristics, which read
 * the clock (and valgrind slows it 50-fold), the same code counted 5,165 and 7,958 per cycle in
 * two runs; pinned, two runs agree within 0.1%. Every library runs with the same flags. Needs
 * valgrind; takes a few minutes per library.
 */
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { CaseKind, CaseParams } from './semaphore-libs.js';

const CASE_SCRIPT = fileURLToPath(new URL('./semaphore-case.ts', import.meta.url));
const TSX_LOADER = import.meta.resolve('tsx');
/** A garbage collector that does not steer by the clock (see above). */
const GC_FLAGS = ['--min-semi-space-size=16', '--max-semi-space-size=16', '--no-memory-reducer'];

function instructions(params: CaseParams): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'valgrind',
      [
        '--tool=callgrind',
        '--callgrind-out-file=/dev/null',
        process.execPath,
        '--expose-gc',
        '--single-threaded',
        ...GC_FLAGS,
        '--import',
        TSX_LOADER,
        CASE_SCRIPT,
        JSON.stringify(params),
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      const match = /Collected : (\d+)/.exec(stderr);
      if (code !== 0 || match === null) {
        reject(new Error(`${params.lib}: exit code ${code}\n${stderr.slice(-2000)}`));
      } else resolve(Number(match[1]));
    });
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      only: { type: 'string', default: 'hostgate,hostgate-acquire,async-sema' },
      kind: { type: 'string', default: 'steady' },
    },
  });
  const kind: CaseKind = values.kind === 'burst' ? 'burst' : 'steady';
  const base =
    kind === 'steady'
      ? { kind, permits: 20, n: 1000, cycles: 100 }
      : { kind, permits: 20, n: 100_000, cycles: 0 };
  const ops = kind === 'steady' ? base.n * base.cycles : base.n;
  console.log(
    `${kind}: instructions per operation of a warm round (callgrind, node --single-threaded)`,
  );
  for (const lib of values.only.split(',').map((s) => s.trim())) {
    const run = (rounds: number) =>
      instructions({ ...base, lib, warmup: true, rounds, exactRounds: true });
    const one = await run(1);
    const three = await run(3);
    console.log(
      `${lib.padEnd(20)} ${Math.round((three - one) / (2 * ops)).toLocaleString('en-US')}`,
    );
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exitCode = 1;
});
