/**
 * The fault campaign (issue 32): `npm run chaos -- [flags]`. Seeded schedules of faults on a
 * fleet of 2–8 replicas sharing one gate, each judged at a partner in this process
 * (test/chaos/oracle.ts); a failure prints its seed and a shrunk schedule that replays.
 *
 * Flags:
 *   --mode fifo|leased|both   modes to run (default both)
 *   --budget N                schedules per mode (default 20; 1 with --seed and no --budget)
 *   --seed N                  first seed (default: from the clock, printed); schedule k of a
 *                             run has seed N + k, and `--seed S --budget 1` replays seed S
 *   --faults a,b              draw only these fault kinds (test/chaos/plan.ts FAULT_KINDS);
 *                             -a,-b: all but these (-replica-partition,-replica-slow: a seed
 *                             as drawn before those kinds were added, stop 50)
 *   --keep 0,2                with --seed: only these steps of the seed's schedule (a shrunk replay)
 *   --schedule '<json>'       run this schedule (as printed on a failure) instead of drawing one
 *   --no-shrink               do not shrink failures
 *   --shrink N                shrink at most N failures (default 4; each costs a few reruns)
 *   --known-open FILE         excuse the violations listed there (exit 0 if only those)
 *   --json                    the table as JSON on stdout (progress on stderr)
 */
import { appendFileSync, rmSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { bundleWorker, Partner, Pool, runSchedule } from './fleet.js';
import { excusedBy, readKnown } from './known.js';
import { judge, ORACLES, type Verdict, type Violation } from './oracle.js';
import {
  describeConfig,
  describeStep,
  FAULT_KINDS,
  type FaultKind,
  generateSchedule,
  MODES,
  type Mode,
  type Schedule,
  shrink,
  withSteps,
} from './plan.js';
import { ChaosRedis } from './redis.js';
import { Table } from './report.js';

const { values } = parseArgs({
  options: {
    mode: { type: 'string', default: 'both' },
    budget: { type: 'string' },
    seed: { type: 'string' },
    faults: { type: 'string' },
    keep: { type: 'string' },
    schedule: { type: 'string' },
    'no-shrink': { type: 'boolean', default: false },
    shrink: { type: 'string', default: '4' },
    'known-open': { type: 'string' },
    json: { type: 'boolean', default: false },
  },
});

const fail = (message: string): never => {
  console.error(`chaos: ${message}`);
  process.exit(2);
};
const modes: Mode[] =
  values.mode === 'both'
    ? [...MODES]
    : MODES.includes(values.mode as Mode)
      ? [values.mode as Mode]
      : fail(`--mode must be fifo, leased or both, got ${values.mode}`);
const named = (k: string): FaultKind =>
  FAULT_KINDS.includes(k as FaultKind)
    ? (k as FaultKind)
    : fail(`--faults: unknown kind ${k} (known: ${FAULT_KINDS.join(', ')})`);
// `--faults -a,-b`: every kind but these (`-replica-partition,-replica-slow` replays a seed as
// drawn before those kinds were added, stop 50).
const listed = values.faults?.split(',') ?? [];
const leftOut = listed.filter((k) => k.startsWith('-')).map((k) => named(k.slice(1)));
const kinds: FaultKind[] =
  values.faults === undefined
    ? [...FAULT_KINDS]
    : leftOut.length === listed.length
      ? FAULT_KINDS.filter((k) => !leftOut.includes(k))
      : leftOut.length > 0
        ? fail('--faults: either kinds to draw or, each with a leading -, kinds to leave out')
        : listed.map(named);
const seed0 = values.seed === undefined ? Date.now() % 100_000 : Number.parseInt(values.seed, 10);
if (!Number.isSafeInteger(seed0) || seed0 < 0)
  fail(`--seed must be a whole number, got ${values.seed}`);
const budget = Number.parseInt(values.budget ?? (values.seed === undefined ? '20' : '1'), 10);
if (!Number.isSafeInteger(budget) || budget < 1)
  fail(`--budget must be at least 1, got ${values.budget}`);
const shrinkMax = values['no-shrink'] ? 0 : Number.parseInt(values.shrink, 10);
const log = (line: string) => (values.json ? console.error(line) : console.log(line));

const known = readKnown(values['known-open']);
const excused = (schedule: Schedule, v: Violation) => excusedBy(known, schedule, v);

function schedulesToRun(mode: Mode): Schedule[] {
  if (values.schedule !== undefined) {
    const s = JSON.parse(values.schedule) as Schedule;
    return s.mode === mode ? [s] : [];
  }
  return Array.from({ length: budget }, (_, k) => {
    const s = generateSchedule(seed0 + k, mode, kinds);
    if (values.keep === undefined) return s;
    const keep = values.keep === '' ? [] : values.keep.split(',').map(Number);
    return withSteps(
      s,
      s.steps.filter((_, i) => keep.includes(i)),
    );
  });
}

const table = new Table();

interface Failure {
  schedule: Schedule;
  violations: Violation[];
  shrunk?: Schedule;
}
const failures: Failure[] = [];
let unexcused = 0;
let shrunkCount = 0;

const redis = await ChaosRedis.start();
const partner = new Partner();
await partner.listen();
const script = await bundleWorker();
const pool = new Pool(script);
const started = performance.now();
let count = 0;
const cleanup = async () => {
  await pool.close();
  await partner.close();
  await redis.close();
  rmSync(script, { force: true });
};
process.on('SIGINT', () => {
  void cleanup().then(() => process.exit(130));
});

async function once(
  schedule: Schedule,
): Promise<{ verdict: Verdict; errors: string[]; outcomes: string }> {
  const run = await runSchedule(schedule, redis, pool, partner);
  // Every run's raw log, for judging again offline (an oracle change needs no rerun).
  if (process.env.CHAOS_RECORD)
    appendFileSync(process.env.CHAOS_RECORD, `${JSON.stringify(run)}\n`);
  const counts = new Map<string, number>();
  for (const c of run.calls) counts.set(c.outcome, (counts.get(c.outcome) ?? 0) + 1);
  const outcomes = [...counts].map(([k, n]) => `${k} ${n}`).join(', ');
  return { verdict: judge(run), errors: run.errors, outcomes };
}

function replayCommand(s: Schedule, keep?: number[]): string {
  const base = `npm run chaos -- --mode ${s.mode} --seed ${s.seed}`;
  return keep === undefined ? base : `${base} --keep ${keep.join(',')}`;
}

try {
  log(
    `chaos: seed ${seed0}, ${budget} schedule(s) per mode (${modes.join(', ')}), Redis :${redis.port}`,
  );
  for (const mode of modes) {
    for (const schedule of schedulesToRun(mode)) {
      const t = performance.now();
      const { verdict, errors, outcomes } = await once(schedule);
      count++;
      const open = verdict.violations.filter((v) => excused(schedule, v) === undefined);
      table.add(schedule, verdict, (v) => excused(schedule, v) !== undefined);
      unexcused += open.length;
      const took = ((performance.now() - t) / 1000).toFixed(1);
      const what = schedule.steps.map((s) => s.kind).join('+') || 'no fault';
      const status =
        verdict.violations.length === 0
          ? 'ok'
          : `FAIL ${verdict.violations.map((v) => `${v.oracle}${excused(schedule, v) ? ' (known)' : ''}`).join(', ')}`;
      log(
        `seed ${schedule.seed} ${mode} [${what}] ${took}s calls: ${outcomes || 'none'}; ${status}`,
      );
      for (const e of errors) log(`  harness: ${e}`);
      if (verdict.violations.length === 0) continue;
      for (const v of verdict.violations) log(`  ${v.oracle}: ${v.detail} [${v.kinds.join(',')}]`);
      const failure: Failure = { schedule, violations: verdict.violations };
      failures.push(failure);
      // Shrunk: the first `--shrink` failures that are not all known open.
      if (open.length === 0 || schedule.steps.length === 0) continue;
      if (++shrunkCount > shrinkMax) continue;
      // Shrink: drop steps while the same oracle still fails.
      // The gravest open violation (ORACLES' order: a partner over the cap first, keys last).
      const target = open
        .map((v) => v.oracle)
        .sort((x, y) => ORACLES.indexOf(x) - ORACLES.indexOf(y))[0]!;
      const indexed = schedule.steps.map((step, i) => ({ step, i }));
      const { steps: kept, tries } = await shrink(indexed, async (candidate) => {
        const s = withSteps(
          schedule,
          candidate.map((c) => c.step),
        );
        const again = await once(s);
        return again.verdict.violations.some((v) => v.oracle === target);
      });
      failure.shrunk = withSteps(
        schedule,
        kept.map((k) => k.step),
      );
      log(
        `  shrunk (${tries} reruns) to ${kept.length} of ${schedule.steps.length} steps; replay: ${replayCommand(
          schedule,
          kept.map((k) => k.i),
        )}`,
      );
    }
  }
} finally {
  await cleanup();
}

const seconds = (performance.now() - started) / 1000;
if (values.json) {
  console.log(
    JSON.stringify(
      {
        seed: seed0,
        budget,
        modes,
        schedules: count,
        seconds: Math.round(seconds),
        rows: table.json(),
        failures: failures.map((f) => ({
          seed: f.schedule.seed,
          mode: f.schedule.mode,
          config: describeConfig(f.schedule.config),
          steps: f.schedule.steps.map(describeStep),
          violations: f.violations,
          shrunk: f.shrunk,
        })),
      },
      null,
      2,
    ),
  );
} else {
  console.log(
    `\n${count} schedules in ${seconds.toFixed(0)} s (${(seconds / Math.max(1, count)).toFixed(1)} s each, shrinking included)\n`,
  );
  console.log(table.markdown());
  console.log(`\n${table.overAdmission()}`);
  for (const f of failures.filter((x) => x.shrunk !== undefined)) {
    console.log(
      `\nseed ${f.schedule.seed} ${f.schedule.mode}: ${describeConfig(f.schedule.config)}`,
    );
    for (const s of f.shrunk!.steps) console.log(`  ${describeStep(s)}`);
    console.log(`  --schedule '${JSON.stringify(f.shrunk)}'`);
  }
}
process.exitCode = unexcused > 0 ? 1 : 0;
