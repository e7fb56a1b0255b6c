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
    // Test files share their worker processes: a fresh process per file cost each file vitest's
    // start and the import of hostgate, undici, Express and Redis clients again (2026-12-02, the
    // machine shared at load 8-13: `vitest run` 301 s of CPU isolated, 192 s shared). A file
    // must leave no fake timers and no gate-event subscriber behind (test/helpers/shared-process.ts
    // checks), nor assume that no other file subscribed to a channel.
    isolate: false,
    // Type tests (test/types/*.test-d.ts, expectTypeOf) are checked by `npm run typecheck`:
    // tsc covers test/ already, and vitest's typecheck mode would run it a second time (~30 s).
    // Four workers on a 2-core machine: most files wait on sockets, timers and child
    // processes, so the default (one worker on two cores) left half the machine idle, and two
    // still left a third of it (quiet, 2026-12-01: 92 s with two, 68 s with three). With files
    // sharing their workers (isolate: false) a worker costs less CPU: quiet, 2026-12-02, vitest
    // run took 121.5 s with three and 96.9 s with four.
    maxWorkers: 4,
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
