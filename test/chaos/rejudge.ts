/**
 * Judges recorded runs again (`CHAOS_RECORD=file npm run chaos` records them): an oracle change
 * needs no rerun. `npx tsx test/chaos/rejudge.ts file [seed mode]`.
 */
import { readFileSync } from 'node:fs';
import { judge, type Run } from './oracle.js';

const [file, seed, mode] = process.argv.slice(2);
if (file === undefined) throw new Error('usage: rejudge.ts <runs.jsonl> [seed mode]');
for (const line of readFileSync(file, 'utf8').trim().split('\n')) {
  const run = JSON.parse(line) as Run;
  const s = run.schedule;
  if (seed !== undefined && String(s.seed) !== seed) continue;
  if (mode !== undefined && s.mode !== mode) continue;
  const { violations } = judge(run);
  const what = s.steps.map((x) => x.kind).join('+') || 'no fault';
  console.log(`seed ${s.seed} ${s.mode} [${what}] ${violations.length === 0 ? 'ok' : 'FAIL'}`);
  for (const v of violations)
    console.log(`  ${v.oracle} @${Math.round(v.at)}: ${v.detail} [${v.kinds}]`);
}
