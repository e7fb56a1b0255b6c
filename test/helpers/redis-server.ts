import { describe } from 'vitest';
import { redisMissing } from '../../bench/lib/redis-server.js';

/**
 * Private redis-server processes for the shared-gate tests (the manager lives in bench/lib so
 * the benchmark and the demo use the same one). Call `stopAllRedis` in `afterAll`.
 */
export * from '../../bench/lib/redis-server.js';
export * from '../../bench/lib/resp.js';

/**
 * Why Redis tests skip here, or undefined when they run. Under `CI` they never skip: a missing
 * `redis-server` (which `.ci/run` installs) makes them fail instead.
 */
export const redisSkipReason: string | undefined =
  redisMissing !== undefined && !process.env.CI
    ? `${redisMissing} (apt-get install redis-server to run them)`
    : undefined;

/** `describe` for suites that need a private redis-server: skipped with a one-line reason. */
export function describeRedis(name: string, body: () => void): void {
  const title = redisSkipReason === undefined ? name : `${name} [skipped: ${redisSkipReason}]`;
  describe.skipIf(redisSkipReason !== undefined)(title, body);
}
