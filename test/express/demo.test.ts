import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, test } from 'vitest';
import { replicasAct } from '../../examples/replicas-act.js';
import {
  freePort,
  type RedisServer,
  redisSkipReason,
  startRedis,
} from '../helpers/redis-server.js';

const root = fileURLToPath(new URL('../..', import.meta.url));

let redis: RedisServer | undefined;
afterAll(() => redis?.close());

/**
 * `npm run demo` as the README's quick start runs it: `tsx examples/demo.ts`, exit code 0. With
 * redis-server on the PATH the test starts one and hands it over as `REDIS_URL`, as a user with
 * a Redis of their own would: the replicas act must use that one (its own counters show it).
 */
test('the demo runs and reports that every invariant held', async () => {
  if (redisSkipReason === undefined) redis = await startRedis();
  // 300 clients, not the 1,000 of `npm run demo`: the burst of 1,000 with disconnects is
  // express/load's own test; here the demo's wiring and its report are what is checked, and
  // 1,000 clients beside the rest of the suite made this the suite's longest file (77 s).
  const env: NodeJS.ProcessEnv = { ...process.env, FORCE_COLOR: '0', DEMO_CLIENTS: '300' };
  delete env.REDIS_URL;
  if (redis !== undefined) env.REDIS_URL = redis.url;
  const child = spawn(process.execPath, ['node_modules/tsx/dist/cli.mjs', 'examples/demo.ts'], {
    cwd: root,
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (c: Buffer) => {
    out += c;
  });
  child.stderr.on('data', (c: Buffer) => {
    err += c;
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  expect({ code, err }, out).toEqual({ code: 0, err: '' });
  expect(out).toContain('300/300 done');
  expect(out).toMatch(/billing\s+20\s+(\d+)/);
  expect(out).toContain('EVERY INVARIANT HELD');
  for (const [, cap, peak] of out.matchAll(
    /^\s+(?:billing|inventory|shipping)\s+(\d+)\s+(\d+)/gm,
  )) {
    expect(Number(peak)).toBeLessThanOrEqual(Number(cap));
  }
  if (redis !== undefined) {
    expect(out).toContain(`using your Redis at REDIS_URL (${redis.url})`);
    // The shared gates' scripts ran on this Redis (calls counted by Redis itself).
    const stats = String(await redis.command('INFO', 'commandstats'));
    expect(stats).toMatch(/cmdstat_(evalsha|eval):calls=[1-9]/);
  }
}, 90_000);

test('the replicas act reports a REDIS_URL that does not answer in one line, starting nothing', async () => {
  const port = await freePort(); // nothing listens there
  const previous = process.env.REDIS_URL;
  process.env.REDIS_URL = `redis://user:secret@127.0.0.1:${port}`;
  const lines: string[] = [];
  try {
    const failures = await replicasAct((line) => lines.push(line));
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatch(
      new RegExp(
        `^replicas: REDIS_URL \\(redis://\\*\\*\\*:\\*\\*\\*@127\\.0\\.0\\.1:${port}\\) did not answer`,
      ),
    );
    expect(lines.join('\n') + failures.join('\n')).not.toContain('secret');
  } finally {
    if (previous === undefined) delete process.env.REDIS_URL;
    else process.env.REDIS_URL = previous;
  }
});
