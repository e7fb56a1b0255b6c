/**
 * What observability costs on the hot path (issue 7): a gate's tryAcquire/release, and one
 * request through the limitHosts interceptor over an in-process dispatcher that answers at once
 * (headers, four body chunks, end), so the limiter's own work is all that is measured.
 *
 *   npx tsx bench/metrics.ts                   ns per operation, median of 7 rounds
 *   npx tsx bench/metrics.ts --smoke           tiny sizes, 1 round (exit code ≠ 0 on any error)
 *   npx tsx bench/metrics.ts --against DIR     also the unobserved cost of the hostgate in DIR,
 *                                              e.g. a worktree of the commit before issue 7:
 *     git worktree add /tmp/before e3d3b4b && ln -s "$PWD/node_modules" /tmp/before/
 *
 * Every (configuration, round) runs in a fresh process, rounds interleaved across
 * configurations, so neither JIT state nor machine drift favours one. Configurations:
 *   unobserved        nothing subscribed, no detector: the price every user pays
 *   metrics           registerMetrics() on a registry that is never scraped: must equal the above
 *   channels          a no-op subscriber on hostgate:acquire and hostgate:release
 *   leak detector     detectLeaks(): a stack captured per acquire
 *   …, stacks: false  detectLeaks({ stacks: false }): suspects without their stacks
 * and, apart, the cost of one scrape (registry.metrics()) of 40 gates.
 */
import { execFileSync } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { Registry } from 'prom-client';
import * as current from '../src/index.js';
import { registerMetrics } from '../src/observe/prometheus.js';
import { answerAtOnce, readsNothing } from './lib/answer-at-once.js';

type Hostgate = Pick<typeof current, 'HostLimiter' | 'limitHosts'>;

const { values: args } = parseArgs({
  options: {
    smoke: { type: 'boolean', default: false },
    against: { type: 'string' },
    rounds: { type: 'string' },
    child: { type: 'string' },
  },
});
const ROUNDS = args.smoke ? 1 : Number(args.rounds ?? 7);
const GATE_OPS = args.smoke ? 20_000 : 2_000_000;
const DISPATCH_OPS = args.smoke ? 5_000 : 300_000;
const SCRAPES = args.smoke ? 3 : 50;

const ORIGIN = 'http://partner.example:80';
const RAW_HEADERS = [Buffer.from('content-type'), Buffer.from('text/plain')];
const noop = () => {};
const answer = answerAtOnce(RAW_HEADERS);

interface Setup {
  name: string;
  lib: Hostgate;
  observe?: (limiter: current.HostLimiter) => () => void;
}

function makeLimiter(lib: Hostgate) {
  return new lib.HostLimiter({
    partners: [{ name: 'partner', hosts: ['partner.example'], limit: 64, maxQueue: 64 }],
  });
}

function timeGate(setup: Setup): number {
  const limiter = makeLimiter(setup.lib);
  const stop = setup.observe?.(limiter as current.HostLimiter) ?? noop;
  const gate = limiter.gateFor(ORIGIN)!;
  const start = process.hrtime.bigint();
  for (let i = 0; i < GATE_OPS; i++) gate.tryAcquire()!.release();
  const ns = Number(process.hrtime.bigint() - start) / GATE_OPS;
  stop();
  return ns;
}

function timeDispatch(setup: Setup): number {
  const limiter = makeLimiter(setup.lib);
  const stop = setup.observe?.(limiter as current.HostLimiter) ?? noop;
  const dispatch = setup.lib.limitHosts(limiter as current.HostLimiter)(answer);
  const opts = { origin: ORIGIN, path: '/items?page=1', method: 'GET' } as const;
  const start = process.hrtime.bigint();
  for (let i = 0; i < DISPATCH_OPS; i++) dispatch(opts, readsNothing);
  const ns = Number(process.hrtime.bigint() - start) / DISPATCH_OPS;
  stop();
  if (limiter.gateFor(ORIGIN)!.held !== 0) throw new Error('a permit was not returned');
  return ns;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)]!;
}

async function setups(): Promise<Setup[]> {
  const list: Setup[] = [];
  if (args.against !== undefined) {
    const url = pathToFileURL(join(args.against, 'src/index.ts')).href;
    list.push({ name: `unobserved (${args.against})`, lib: (await import(url)) as Hostgate });
  }
  list.push(
    { name: 'unobserved', lib: current },
    {
      name: 'metrics (never scraped)',
      lib: current,
      observe: (limiter) => {
        const metrics = registerMetrics(limiter, { registry: new Registry() });
        return metrics.unregister;
      },
    },
    {
      name: 'channels (no-op subscriber)',
      lib: current,
      observe: () => {
        subscribe('hostgate:acquire', noop);
        subscribe('hostgate:release', noop);
        return () => {
          unsubscribe('hostgate:acquire', noop);
          unsubscribe('hostgate:release', noop);
        };
      },
    },
    {
      name: 'leak detector',
      lib: current,
      observe: (limiter) => {
        const detector = current.detectLeaks(limiter, { sweepEvery: 60_000 });
        return () => detector.close();
      },
    },
    {
      name: 'leak detector, stacks: false',
      lib: current,
      observe: (limiter) => {
        const detector = current.detectLeaks(limiter, { sweepEvery: 60_000, stacks: false });
        return () => detector.close();
      },
    },
  );
  return list;
}

/** In a child: warm up, then measure one configuration; prints `gateNs dispatchNs`. */
async function child(index: number): Promise<void> {
  const setup = (await setups())[index]!;
  timeGate(setup);
  timeDispatch(setup);
  console.log(`${timeGate(setup)} ${timeDispatch(setup)}`);
}

async function main(): Promise<void> {
  if (args.child !== undefined) return child(Number(args.child));
  const list = await setups();
  const results = list.map(() => ({ gate: [] as number[], dispatch: [] as number[] }));
  const script = new URL(import.meta.url).pathname;
  const passOn = args.smoke ? ['--smoke'] : [];
  if (args.against !== undefined) passOn.push('--against', args.against);
  for (let round = 0; round < ROUNDS; round++) {
    for (let index = 0; index < list.length; index++) {
      const out = execFileSync(
        process.execPath,
        [...process.execArgv, script, ...passOn, '--child', String(index)],
        { encoding: 'utf8' },
      );
      const [gate, dispatch] = out.trim().split(' ').map(Number) as [number, number];
      results[index]!.gate.push(gate);
      results[index]!.dispatch.push(dispatch);
    }
  }

  const base = results[list.findIndex((s) => s.name === 'unobserved')]!;
  const rel = (ns: number, of: number) =>
    `${ns >= of ? '+' : ''}${(((ns - of) / of) * 100).toFixed(1)}%`;
  console.log(`Node ${process.version}, ${ROUNDS} round(s); ns per operation (median)\n`);
  console.log(
    '| configuration | tryAcquire + release | vs unobserved | one request (interceptor) | vs unobserved |',
  );
  console.log('| --- | ---: | ---: | ---: | ---: |');
  list.forEach((setup, index) => {
    const r = results[index]!;
    const gate = median(r.gate);
    const dispatch = median(r.dispatch);
    console.log(
      `| ${setup.name} | ${gate.toFixed(1)} | ${rel(gate, median(base.gate))} | ${dispatch.toFixed(0)} | ${rel(dispatch, median(base.dispatch))} |`,
    );
  });

  // A scrape: 20 partners and 20 per-origin gates, each with traffic behind it.
  const limiter = new current.HostLimiter({
    partners: Array.from({ length: 20 }, (_, i) => ({
      name: `partner-${i}`,
      hosts: [`p${i}.example`],
      limit: 20,
    })),
  });
  for (let i = 0; i < 20; i++) {
    for (const origin of [`https://p${i}.example`, `https://o${i}.example`]) {
      const gate = limiter.gateFor(origin)!;
      for (let j = 0; j < 100; j++) gate.tryAcquire()!.release();
    }
  }
  const registry = new Registry();
  registerMetrics(limiter, { registry });
  const times: number[] = [];
  let bytes = 0;
  for (let i = 0; i < SCRAPES; i++) {
    const start = process.hrtime.bigint();
    bytes = (await registry.metrics()).length;
    times.push(Number(process.hrtime.bigint() - start) / 1e6);
  }
  console.log(
    `\nOne scrape of 40 gates: ${median(times).toFixed(2)} ms (median of ${SCRAPES}), ${bytes} bytes of text.`,
  );
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
