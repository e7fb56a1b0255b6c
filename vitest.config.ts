import { defineConfig } from 'vitest/config';

/**
 * `HOSTGATE_UNDICI=8` runs the suite against undici 8 (the `undici8` devDependency, which needs
 * Node >= 22.19): every `import ... from 'undici'` in src, middleware and test resolves to it.
 * Unset, the suite runs against undici 7 (the `undici` devDependency).
 */
const undiciMajor = process.env.HOSTGATE_UNDICI ?? '7';
if (undiciMajor !== '7' && undiciMajor !== '8') {
  throw new TypeError(`HOSTGATE_UNDICI must be 7 or 8, got ${JSON.stringify(undiciMajor)}`);
}

export default defineConfig({
  resolve: {
    alias: undiciMajor === '8' ? [{ find: /^undici$/, replacement: 'undici8' }] : [],
  },
  test: {
    include: ['test/**/*.test.ts'],
    // hostgate requires undici lazily (src/http/undici.ts), past vite's alias: a resolve hook.
    setupFiles: [
      ...(undiciMajor === '8' ? ['test/helpers/undici8-require.ts'] : []),
      'test/helpers/shared-process.ts',
    ],
    // Each file in a fresh process (vitest's default), for now. Shared processes (isolate: false)
    // cut vitest's CPU by a third (2026-12-02: 301 s isolated, 192 s shared, load 8-13) and
    // passed two CI runs, but in a third weights.test.ts hung 20 s on both clients after sharing
    // a worker with other files (it passes alone and with every Redis file together): the cause
    // is not found. test/helpers/shared-process.ts still fails a file that leaves fake timers or
    // a gate-event subscriber behind, ready for when files share processes again.
    isolate: true,
    // Type tests (test/types/*.test-d.ts, expectTypeOf) are checked by `npm run typecheck`:
    // tsc covers test/ already, and vitest's typecheck mode would run it a second time (~30 s).
    // Three workers on a 2-core machine: most files wait on sockets, timers and child
    // processes, so the default (one worker on two cores) left half the machine idle, and two
    // still left a third of it (quiet, 2026-12-01: 92 s with two, 68 s with three). Four paid
    // off only with shared processes (2026-12-02: 121.5 s with three, 96.9 s with four).
    maxWorkers: 3,
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
