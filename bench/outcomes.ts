/**
 * What one request through the limitHosts interceptor costs with nobody listening on the
 * diagnostics channels (issue 34 item 1), before and after partner guards and adaptive
 * controllers were called directly instead of subscribing to `hostgate:response`,
 * `hostgate:request-error` and `hostgate:hold-timeout`. The inner dispatcher answers every
 * request at once (headers, four body chunks, end), so the limiter's own work is all that is
 * measured.
 *
 *   npx tsx bench/outcomes.ts --against DIR    this tree beside the hostgate in DIR, e.g. the
 *                                              commit before the change:
 *     mkdir /tmp/before && git archive 1116df4 | tar -x -C /tmp/before
 *     ln -s "$PWD/node_modules" /tmp/before/
 *   npx tsx bench/outcomes.ts                  this tree alone
 *   npx tsx bench/outcomes.ts --smoke          tiny sizes, 1 round (exit code ≠ 0 on any error)
 *
 * Every (tree, configuration, round) runs in a fresh process, rounds interleaved (each tree
 * first in every other round), so neither JIT state nor machine drift favours one, and one
 * tree's subscriptions (channels are global by name) never reach the other's. Each measures its
 * CPU time per request, which other processes' load inflates less than wall time. Run it
 * against the same tree too (`--against .`): the spread of that A/A ratio is the noise.
 * Configurations, one partner rule each:
 *   no guard          `rateLimitHeaders: false`: nothing to tell (the control)
 *   guard             the default rule: `rateLimitHeaders` on, so a guard reads each response
 *   guard + adaptive  and an adaptive limit (AIMD) samples each response
 */
import { execFileSync } from 'node:child_process';
import { channel } from 'node:diagnostics_channel';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import type * as current from '../src/index.js';
import { answerAtOnce, readsNothing } from './lib/answer-at-once.js';

type Hostgate = Pick<typeof current, 'HostLimiter' | 'limitHosts'>;

const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    against: { type: 'string' },
    rounds: { type: 'string' },
    child: { type: 'string' },
    tree: { type: 'string' },
  },
});
const ROUNDS = args.smoke ? 1 : Number(args.rounds ?? 7);
const OPS = args.smoke ? 5_000 : 300_000;

const ORIGIN = 'http://partner.example:80';
const RAW_HEADERS = [
  Buffer.from('content-type'),
  Buffer.from('application/json'),
  Buffer.from('date'),
  Buffer.from('Sat, 05 Dec 2026 03:00:00 GMT'),
];
const answer = answerAtOnce(RAW_HEADERS);

const CONFIGS = [
  { name: 'no guard', rule: { rateLimitHeaders: false } },
  { name: 'guard (default rule)', rule: {} },
  { name: 'guard + adaptive', rule: { adaptive: { min: 1, initial: 64 } } },
] as const;

const OUTCOME_CHANNELS = ['hostgate:response', 'hostgate:request-error', 'hostgate:hold-timeout'];

/** ns per request through the interceptor, and the outcome channels subscribed meanwhile. */
function timeDispatch(lib: Hostgate, config: (typeof CONFIGS)[number]): [number, number] {
  const limiter = new lib.HostLimiter({
    partners: [
      { name: 'partner', hosts: ['partner.example'], limit: 64, maxQueue: 64, ...config.rule },
    ],
  });
  const dispatch = lib.limitHosts(limiter as current.HostLimiter)(answer);
  const opts = { origin: ORIGIN, path: '/items?page=1', method: 'GET' } as const;
  // CPU time, not wall time: on a shared machine a process descheduled mid-loop would count
  // another's work as its own (an A/A run at load 10-18 differed by up to 1.8x by wall time).
  const start = process.cpuUsage();
  for (let i = 0; i < OPS; i++) dispatch(opts, readsNothing);
  const used = process.cpuUsage(start);
  const ns = ((used.user + used.system) * 1000) / OPS;
  if (limiter.gateFor(ORIGIN)!.held !== 0) throw new Error('a permit was not returned');
  const subscribed = OUTCOME_CHANNELS.filter((name) => channel(name).hasSubscribers).length;
  return [ns, subscribed];
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function load(tree: string | undefined): Promise<Hostgate> {
  const dir = tree ?? join(new URL('.', import.meta.url).pathname, '..');
  return (await import(pathToFileURL(join(dir, 'src/index.ts')).href)) as Hostgate;
}

/** In a child: warm up, then measure one (tree, configuration); prints `ns subscribed`. */
async function child(index: number): Promise<void> {
  const lib = await load(args.tree);
  const config = CONFIGS[index]!;
  timeDispatch(lib, config);
  console.log(timeDispatch(lib, config).join(' '));
}

async function main(): Promise<void> {
  if (args.child !== undefined) return child(Number(args.child));
  const trees: { name: string; dir: string | undefined }[] = [];
  if (args.against !== undefined) trees.push({ name: 'before', dir: args.against });
  trees.push({ name: 'after', dir: undefined });
  const ns = trees.map(() => CONFIGS.map(() => [] as number[]));
  const subscribed = trees.map(() => CONFIGS.map(() => 0));
  const script = new URL(import.meta.url).pathname;
  const passOn = args.smoke ? ['--smoke'] : [];
  for (let round = 0; round < ROUNDS; round++) {
    for (let c = 0; c < CONFIGS.length; c++) {
      // ABBA: each tree goes first in every other round.
      for (const t of round % 2 === 0 ? trees.keys() : [...trees.keys()].reverse()) {
        const tree = trees[t]!.dir === undefined ? [] : ['--tree', trees[t]!.dir!];
        const out = execFileSync(
          process.execPath,
          [...process.execArgv, script, ...passOn, ...tree, '--child', String(c)],
          { encoding: 'utf8' },
        );
        const [time, channels] = out.trim().split(' ').map(Number) as [number, number];
        ns[t]![c]!.push(time);
        subscribed[t]![c] = channels;
      }
    }
  }
  console.log(
    `Node ${process.version}, ${ROUNDS} round(s) of ${OPS} requests; CPU ns per request (median)\n`,
  );
  const head = trees.map((t) => `${t.name} (outcome channels subscribed)`);
  const ratio = trees.length === 2 ? ' after / before |' : '';
  console.log(`| configuration | ${head.join(' | ')} |${ratio}`);
  console.log(`| --- |${trees.map(() => ' ---: |').join('')}${ratio === '' ? '' : ' ---: |'}`);
  CONFIGS.forEach((config, c) => {
    const cells = trees.map((_, t) => `${median(ns[t]![c]!).toFixed(0)} (${subscribed[t]![c]})`);
    const r =
      trees.length === 2 ? ` ${(median(ns[1]![c]!) / median(ns[0]![c]!)).toFixed(2)} |` : '';
    console.log(`| ${config.name} | ${cells.join(' | ')} |${r}`);
  });
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
