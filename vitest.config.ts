import { existsSync } from 'node:fs';
import { configDefaults, defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * `HOSTGATE_UNDICI=8` runs the suite against undici 8 (the `undici8` devDependency, which needs
 * Node >= 22.19): every `import ... from 'undici'` in src, middleware and test resolves to it.
 * Unset, the suite runs against undici 7 (the `undici` devDependency).
 */
const undiciMajor = process.env.HOSTGATE_UNDICI ?? '7';
if (undiciMajor !== '7' && undiciMajor !== '8') {
  throw new TypeError(`HOSTGATE_UNDICI must be 7 or 8, got ${JSON.stringify(undiciMajor)}`);
}

/**
 * The heavy lane: files that start a redis-server, a child process or a browser, and the
 * in-process files that cost the most CPU (thousands of requests or random schedules; measured
 * per file, docs/development.md). `npm run test:fast` (HOSTGATE_TEST_LANE=fast)
 * runs everything else, the contributor's inner loop (docs/development.md); `npm test` runs every
 * file but the fault lane below (HOSTGATE_TEST_LANE=suite), and CI runs both (.ci/run).
 */
const lane = process.env.HOSTGATE_TEST_LANE ?? 'all';
if (lane !== 'all' && lane !== 'suite' && lane !== 'fast' && lane !== 'faults') {
  throw new TypeError(
    `HOSTGATE_TEST_LANE must be 'suite', 'fast', 'faults' or unset, got ${JSON.stringify(lane)}`,
  );
}
/**
 * The fault lane (`npm run test:faults`, HOSTGATE_TEST_LANE=faults): the fault reproductions
 * that fork replica fleets and pause, kill, restart or step the clock of private redis-servers
 * for seconds each (issue 32's regression tests among them), the benchmark smokes and the demo:
 * about half the suite's CPU (107 s of 213 s measured 2026-12-06). `npm test` runs the rest in
 * ≤ 90 s on the 2-core machines; CI runs both lanes on each Node (.ci/run), as it runs the
 * fault campaign. Run the fault files you touch by name, or the lane before a shared-gate change.
 */
const FAULTS = [
  'test/redis/fifo-*.test.ts', // FIFO fleets through outages, restarts, clock steps, kills
  'test/redis/rolling.test.ts', // both modes' fleets through rolling restarts
  'test/redis/leased-{lost-state,restart,stale-dump,clock-step,kill,churn,schedule,faults,partition}.test.ts',
  'test/redis/leased-on-change.test.ts', // a fleet at its cap for seconds, Redis's calls counted
  // Fleets of stores in one process held to time (turns, handoffs, rates): the suite's two
  // longest files, and their bounds failed in full parallel runs of npm test (2026-12-07).
  'test/redis/leased-{small-cap,cost}.test.ts',
  'test/redis/scripts/leased-walk.test.ts', // 5,001-entry fleets walked slice by slice: CPU
  'test/redis/multiprocess-{cap,faults}.test.ts', // replicas, Redis paused, killed, failed over
  'test/redis/over-admission.test.ts', // each documented way over the cap, measured
  'test/redis/store-faults.test.ts', // stalls, outages and restarts under one store
  'test/chaos/replay.test.ts', // campaign schedules that found a fault, replayed (fleets)
  'test/bench-smoke.test.ts', // benchmarks in child processes (CI runs them again: bench:smoke)
  'test/express/demo.test.ts', // the demo's own processes, with Redis
];
const HEAVY = [
  'test/redis/**/*.test.ts', // private redis-server processes, forked replicas
  'test/chaos/replay.test.ts', // the campaign's fleet and redis-server
  'test/partners/rate.test.ts', // a store on the Redis at 127.0.0.1:6379
  'test/bench-smoke.test.ts', // benchmarks in child processes (the fleet's with Redis)
  'test/docs/doc-tests.test.ts', // builds the package, runs tsc and node
  'test/express/demo.test.ts', // the demo's own processes, with Redis
  'test/adaptive/capacity.test.ts', // a partner in a child process
  'test/http/undici-loading.test.ts', // fresh Node processes without undici
  'test/node-http/clients.test.ts', // a child process per client library
  'test/check-imports.test.ts', // the import checker as a child process
  'test/observe/status-page.browser.test.ts', // headless chromium
  'test/express/load.test.ts', // 1,000 clients through Express
  'test/http/soak.test.ts', // a soak of every entry point
  'test/http/limit-hosts.test.ts', // 1,000 calls through each client shape: 5.4 s of CPU
  'test/http/fetch.test.ts', // 1,000 concurrent fetches: 5.0 s of CPU
  'test/gate/semaphore.property.test.ts', // 100 random schedules: 4.1 s of CPU
  'test/gate/semaphore-weighted.property.test.ts', // 200 random schedules: 3.9 s of CPU
  'test/adaptive/refusals.test.ts', // 40 closed-loop callers against a partner, 4 s a test
  'test/hostile/cooldown-spill.test.ts', // 257 attacker origins, three times
];

/**
 * The files that take 8 s or more (a fresh clone's CI run of npm test, 2026-12-07), started
 * first. vitest orders files by the durations it cached on the last run, and with no cache (a
 * fresh clone: every CI run) by file size, larger first: the doc-tests' file (2.5 kB, 16 s)
 * started at 71 s of 87 and ended the run alone. `npm test` ≤ 90 s wants its long poles first.
 */
const LONG_FIRST = [
  'test/docs/doc-tests.test.ts',
  'test/redis/store-setup.test.ts',
  'test/http/limit-hosts.test.ts',
  'test/http/fetch.test.ts',
  'test/redis/leased-rate.test.ts',
  'test/adaptive/capacity.test.ts',
  'test/redis/leased-ops.test.ts',
  'test/http/soak.test.ts',
  'test/adaptive/refusals.test.ts',
  'test/gate/semaphore.property.test.ts',
  'test/redis/shared-gate-shedding.test.ts',
  'test/express/deadline.test.ts',
];

// A renamed or removed file would lose its place without a word: say so.
for (const file of LONG_FIRST) {
  if (!existsSync(new URL(file, import.meta.url))) {
    throw new Error(`vitest.config.ts: LONG_FIRST names ${file}, which does not exist`);
  }
}

/** vitest's order (cached durations, else size), with LONG_FIRST's files ahead of every other. */
class LongFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (spec: TestSpecification) => {
      const at = LONG_FIRST.findIndex((file) => spec.moduleId.endsWith(`/${file}`));
      return at < 0 ? LONG_FIRST.length : at;
    };
    // Array.prototype.sort is stable: the rest keep vitest's order.
    return sorted.sort((a, b) => rank(a) - rank(b));
  }
}

export default defineConfig({
  resolve: {
    alias: undiciMajor === '8' ? [{ find: /^undici$/, replacement: 'undici8' }] : [],
  },
  test: {
    include: lane === 'faults' ? FAULTS : ['test/**/*.test.ts'],
    // Unset ('all'): every file, so that `npx vitest run <file>` finds any of them. `npm test`
    // runs the 'suite' lane (every file but the fault lane), unless it is given files.
    exclude: [
      ...configDefaults.exclude,
      ...(lane === 'fast' ? HEAVY : []),
      ...(lane === 'fast' || lane === 'suite' ? FAULTS : []),
    ],
    // hostgate requires undici lazily (src/http/undici.ts), past vite's alias: a resolve hook.
    setupFiles: [
      ...(undiciMajor === '8' ? ['test/helpers/undici8-require.ts'] : []),
      'test/helpers/shared-process.ts',
    ],
    // Test files share their worker processes: a fresh process per file paid vitest's start and
    // the import of hostgate, undici, Express and the Redis clients again for every file, about
    // a second of CPU each (2026-12-06, load 3-8: 279 s of CPU isolated, 173 s shared). What a file
    // must leave behind for the next is checked after each file (test/helpers/shared-process.ts).
    // The hang of weights.test.ts in a shared worker (a CI run of 474b2b4) was a reset module
    // registry meeting Node 20's diagnostics_channel (docs/development.md, "Shared processes"):
    // that check fails the file that resets it.
    isolate: false,
    sequence: { sequencer: LongFirst },
    // Type tests (test/types/*.test-d.ts, expectTypeOf) are checked by `npm run typecheck`:
    // tsc covers test/ already, and vitest's typecheck mode would run it a second time (~30 s).
    // Four workers on a 2-core machine: most files wait on sockets, timers and child
    // processes (2026-12-06, load 3-8, shared: 182 s with three, 148 s with four).
    maxWorkers: 4,
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
