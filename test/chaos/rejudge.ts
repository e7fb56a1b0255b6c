/**
 * Judges recorded runs again (`CHAOS_RECORD=file npm run chaos` records them): an oracle change
 * needs no rerun. `npx tsx test/chaos/rejudge.ts file... [--seed N --mode m --known-open F]` prints each
 * schedule's verdict and the table (the first record of each seed and mode: later ones are the
 * shrinker's reruns).
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { excusedBy, readKnown } from './known.js';
import { judge, type Run } from './oracle.js';
import { Table } from './report.js';
import { settleRecorded } from './sets.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { seed: { type: 'string' }, mode: { type: 'string' }, 'known-open': { type: 'string' } },
});
if (positionals.length === 0)
  throw new Error('usage: rejudge.ts <runs.jsonl>... [--seed N --mode m]');
const known = readKnown(values['known-open']);
const table = new Table();
const seen = new Set<string>();
for (const file of positionals) {
  for (const line of readFileSync(file, 'utf8').trim().split('\n')) {
    const run = JSON.parse(line) as Run;
    const s = run.schedule;
    if (values.seed !== undefined && String(s.seed) !== values.seed) continue;
    if (values.mode !== undefined && s.mode !== values.mode) continue;
    // Sets overlapping a later one, as the fleet records them since stop 52 (sets.ts).
    const sets = (kind: string) => run.applied.filter((a) => a.step.kind === kind);
    settleRecorded(run.rates as [number, unknown][], sets('set-rate'));
    settleRecorded(run.caps as [number, unknown][], sets('set-limit'));
    const verdict = judge(run);
    const key = `${s.seed} ${s.mode}`;
    const first = !seen.has(key);
    seen.add(key);
    const isKnown = (v: (typeof verdict.violations)[number]) =>
      excusedBy(known, s, v) !== undefined;
    if (first) table.add(s, verdict, isKnown);
    const what = s.steps.map((x) => x.kind).join('+') || 'no fault';
    const open = verdict.violations.filter((v) => !isKnown(v));
    const status =
      verdict.violations.length === 0 ? 'ok' : open.length === 0 ? 'FAIL (known)' : 'FAIL';
    console.log(`seed ${s.seed} ${s.mode} [${what}]${first ? '' : ' (rerun)'} ${status}`);
    for (const v of verdict.violations) {
      console.log(
        `  ${v.oracle}${isKnown(v) ? ' (known)' : ''} @${Math.round(v.at)}: ${v.detail} [${v.kinds}]`,
      );
    }
  }
}
console.log(`\n${seen.size} schedules\n\n${table.markdown()}\n\n${table.overAdmission()}`);
