/**
 * bench/outcomes.ts counted in instructions rather than timed: a reading other work on a shared
 * machine does not move. One request through `limitHosts` over a dispatcher that answers at once,
 * for one partner rule, run under `valgrind --tool=callgrind` with `node --single-threaded` and a
 * pinned young generation (as bench/semaphore-instructions.ts), once with 10,000 and once with
 * 30,000 requests after the same warm-up: the difference over 20,000 is a warm request's count.
 * Runs a built tree (plain JavaScript: tsx under valgrind would dwarf the loop):
 *
 *   npx tsc -p tsconfig.build.json --outDir /tmp/after          (and the same in the other tree)
 *   node bench/outcomes-instructions.mjs /tmp/after guard        rules: none | guard | adaptive
 */
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const [dist, rule = 'guard', count] = process.argv.slice(2);
const RULES = {
  none: { rateLimitHeaders: false },
  guard: {},
  adaptive: { adaptive: { min: 1, initial: 64 } },
};
if (dist === undefined || !(rule in RULES)) {
  throw new TypeError('usage: node bench/outcomes-instructions.mjs DIST [none|guard|adaptive]');
}

if (count !== undefined) {
  // The measured process: warm up, then `count` requests.
  const lib = await import(`${dist}/src/index.js`);
  const noop = () => {};
  const chunk = Buffer.alloc(16_384);
  const raw = ['content-type', 'application/json', 'date', 'Sat, 05 Dec 2026 03:00:00 GMT'];
  const rawHeaders = raw.map((s) => Buffer.from(s));
  const answer = (_opts, h) => {
    h.onConnect(noop, {});
    h.onHeaders(200, rawHeaders, noop, 'OK');
    for (let i = 0; i < 4; i++) h.onData(chunk);
    h.onComplete(null);
    return true;
  };
  const caller = {
    onConnect: noop,
    onHeaders: () => true,
    onData: () => true,
    onComplete: noop,
    onError(error) {
      throw error;
    },
  };
  const limiter = new lib.HostLimiter({
    partners: [{ name: 'p', hosts: ['p.example'], limit: 64, maxQueue: 64, ...RULES[rule] }],
  });
  const dispatch = lib.limitHosts(limiter)(answer);
  const opts = { origin: 'http://p.example:80', path: '/items?page=1', method: 'GET' };
  for (let i = 0; i < 20_000 + Number(count); i++) dispatch(opts, caller);
} else {
  const instructions = (n) => {
    // valgrind reports its count on stderr.
    const { stderr } = spawnSync(
      'valgrind',
      [
        '--tool=callgrind',
        '--callgrind-out-file=/dev/null',
        process.execPath,
        '--single-threaded',
        '--min-semi-space-size=16',
        '--max-semi-space-size=16',
        '--no-memory-reducer',
        fileURLToPath(import.meta.url),
        dist,
        rule,
        String(n),
      ],
      { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'] },
    );
    return Number(/Collected : (\d+)/.exec(stderr)?.[1]);
  };
  const few = instructions(10_000);
  const many = instructions(30_000);
  console.log(`${dist} ${rule}: ${((many - few) / 20_000).toFixed(1)} instructions per request`);
}
