/**
 * LimitedHttpAgent vs a plain `http.Agent({ keepAlive, maxSockets })` with the same cap, on
 * loopback, side by side in one run: each case in a fresh process, the partner in another
 * (bench/dispatcher/server.ts). `npm run bench:node-agent [-- --runs 5] [-- --smoke] [-- --src]`.
 *
 * maxSockets caps sockets, and its queue has no bound and no deadline; the gate caps requests
 * per partner with a bounded queue. With the cap binding both hold 20 requests at the partner;
 * the ratio is what the gate costs (or saves) on top of node:http's own work.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { once } from 'node:events';
import os from 'node:os';
import { buildDist } from './lib/build.js';
import { canPin, pin, runChild } from './lib/child.js';
import { formatOps, formatRatio, median } from './lib/stats.js';

const args = process.argv.slice(2);
const smoke = args.includes('--smoke');
const runsIndex = args.indexOf('--runs');
const runs = smoke ? 1 : runsIndex >= 0 ? Number(args[runsIndex + 1]) : 3;
if (!Number.isSafeInteger(runs) || runs < 1 || runs > 20) {
  throw new TypeError(`--runs must be an integer from 1 to 20, got ${args[runsIndex + 1]}`);
}
const from = smoke || args.includes('--src') ? 'src' : 'dist';
if (from === 'dist') buildDist();
const caseScript = new URL('./node-agent/case.ts', import.meta.url);
const server: ChildProcess = fork(new URL('./dispatcher/server.ts', import.meta.url), [], {
  execArgv: ['--import', import.meta.resolve('tsx')],
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
});
const [{ port }] = (await once(server, 'message')) as [{ port: number }];
pin(server, '0');
const CLIENT_CPU = canPin ? '1' : undefined;

const groups = smoke
  ? [['plain-bound', 'gated-bound']]
  : [
      ['plain-free', 'gated-free'],
      ['plain-bound', 'gated-bound'],
      ['plain-bound-5ms', 'gated-bound-5ms'],
    ];
try {
  console.log(
    `# LimitedHttpAgent vs http.Agent({ maxSockets }) — Node ${process.version}, ${os.cpus()[0]?.model}, ${os.cpus().length} cores, median of ${runs}, hostgate from ${from === 'dist' ? 'dist/ (built)' : 'src/ (tsx)'}, load average ${os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}\n`,
  );
  const reqPerSec: Record<string, number[]> = {};
  const cpu: Record<string, number[]> = {};
  for (let i = 0; i < runs; i++) {
    for (const group of groups) {
      // Every other round in reverse: no case always runs first.
      for (const name of i % 2 === 0 ? group : [...group].reverse()) {
        const result = await runChild<{ reqPerSec: number; cpuUsPerRequest: number }>(
          caseScript,
          [name, String(port), from, ...(smoke ? ['smoke'] : [])],
          { cpus: CLIENT_CPU, timeoutMs: 120_000 },
        );
        reqPerSec[name] = [...(reqPerSec[name] ?? []), result.reqPerSec];
        cpu[name] = [...(cpu[name] ?? []), result.cpuUsPerRequest];
      }
    }
  }
  // Each ratio: the median of the rounds' own ratios (gated against the plain run of its round).
  const ratio = (samples: Record<string, number[]>, a: string, b: string, invert: boolean) =>
    median(
      (samples[b] ?? []).map((mine, i) => {
        const base = samples[a]?.[i] ?? Number.NaN;
        return invert ? base / mine : mine / base;
      }),
    );
  console.log(
    '| case | http.Agent({ maxSockets }) | LimitedHttpAgent | ratio, wall clock | ratio, client CPU per request |',
  );
  console.log('|---|--:|--:|--:|--:|');
  const labels: Record<string, string> = {
    free: 'cap not binding (64 callers, cap 64)',
    bound: 'cap binding (200 callers, cap 20)',
    'bound-5ms': 'cap binding, partner answers in 5 ms (200 callers, cap 20)',
  };
  for (const [plain, gated] of groups as [string, string][]) {
    const label = labels[plain.replace('plain-', '')] ?? plain;
    console.log(
      `| ${label} | ${formatOps(median(reqPerSec[plain] ?? []))} | ${formatOps(median(reqPerSec[gated] ?? []))} | ${formatRatio(ratio(reqPerSec, plain, gated, false))} | ${formatRatio(ratio(cpu, plain, gated, true))} |`,
    );
  }
  if (smoke) console.log('\nsmoke: OK');
} finally {
  server.disconnect();
  server.kill();
}
