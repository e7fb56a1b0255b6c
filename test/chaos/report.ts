/**
 * The campaign's table: schedules run per mode and fault kind, violations by oracle, worst
 * capacity lost (the longest stretch the partner saw 0 in flight while replicas wanted to call)
 * and worst partner excess past the documented bound (units of the cap / of the rate).
 */
import type { OracleKind, Verdict, Violation } from './oracle.js';
import type { FaultKind, Mode, Schedule } from './plan.js';

interface Row {
  mode: Mode;
  kind: FaultKind | 'none';
  schedules: number;
  violations: Partial<Record<OracleKind, number>>;
  excused: number;
  worstGapMs: number;
  worstCapExcess: number;
  worstRateExcess: number;
  /** Over the plain promise, no allowance (the over-admission table). */
  worstCapOver: number;
  worstRateOver: number;
}

export class Table {
  readonly #rows = new Map<string, Row>();

  #row(mode: Mode, kind: FaultKind | 'none'): Row {
    const key = `${mode} ${kind}`;
    let r = this.#rows.get(key);
    if (r === undefined) {
      r = {
        mode,
        kind,
        schedules: 0,
        violations: {},
        excused: 0,
        worstGapMs: 0,
        worstCapExcess: Number.NEGATIVE_INFINITY,
        worstRateExcess: Number.NEGATIVE_INFINITY,
        worstCapOver: Number.NEGATIVE_INFINITY,
        worstRateOver: Number.NEGATIVE_INFINITY,
      };
      this.#rows.set(key, r);
    }
    return r;
  }

  /** One schedule's verdict; `known` says whether a violation is excused (known-open). */
  add(schedule: Schedule, verdict: Verdict, known: (v: Violation) => boolean = () => false): void {
    const mode = schedule.mode;
    const kinds: (FaultKind | 'none')[] =
      schedule.steps.length === 0 ? ['none'] : [...new Set(schedule.steps.map((s) => s.kind))];
    for (const kind of kinds) this.#row(mode, kind).schedules++;
    for (const [kind, gap] of Object.entries(verdict.gaps)) {
      const r = this.#row(mode, kind as FaultKind);
      r.worstGapMs = Math.max(r.worstGapMs, gap);
    }
    for (const [kind, v] of Object.entries(verdict.capExcess)) {
      const r = this.#row(mode, kind as FaultKind);
      r.worstCapExcess = Math.max(r.worstCapExcess, v);
    }
    for (const [kind, v] of Object.entries(verdict.rateExcess)) {
      const r = this.#row(mode, kind as FaultKind);
      r.worstRateExcess = Math.max(r.worstRateExcess, v);
    }
    for (const [kind, v] of Object.entries(verdict.capOver ?? {})) {
      const r = this.#row(mode, kind as FaultKind);
      r.worstCapOver = Math.max(r.worstCapOver, v);
    }
    for (const [kind, v] of Object.entries(verdict.rateOver ?? {})) {
      const r = this.#row(mode, kind as FaultKind);
      r.worstRateOver = Math.max(r.worstRateOver, v);
    }
    for (const v of verdict.violations) {
      for (const kind of v.kinds) {
        const r = this.#row(mode, kind);
        r.violations[v.oracle] = (r.violations[v.oracle] ?? 0) + 1;
        if (known(v)) r.excused++;
      }
    }
  }

  #sorted(): Row[] {
    return [...this.#rows.values()].sort((a, b) =>
      a.mode === b.mode ? a.kind.localeCompare(b.kind) : a.mode.localeCompare(b.mode),
    );
  }

  json() {
    return this.#sorted().map((r) => ({
      ...r,
      worstCapExcess: Number.isFinite(r.worstCapExcess) ? r.worstCapExcess : null,
      worstRateExcess: Number.isFinite(r.worstRateExcess) ? r.worstRateExcess : null,
      worstCapOver: Number.isFinite(r.worstCapOver) ? r.worstCapOver : null,
      worstRateOver: Number.isFinite(r.worstRateOver) ? r.worstRateOver : null,
    }));
  }

  /**
   * Over-admission per fault kind, both modes side by side: the most units the partner saw
   * over the cap, and over `limit + burst` in a window, with no allowance (documented excess
   * included; '≤ 0' never over, '—' no sample), over the schedules that had the kind.
   */
  overAdmission(): string {
    const cell = (n: number) => (!Number.isFinite(n) ? '—' : n <= 0 ? '≤ 0' : `+${n}`);
    const kinds = [...new Set(this.#sorted().map((r) => r.kind))].sort();
    const lines = [
      '| fault | FIFO schedules | FIFO cap | FIFO rate | leased schedules | leased cap | leased rate |',
      '|---|---:|---:|---:|---:|---:|---:|',
    ];
    for (const kind of kinds) {
      const f = this.#rows.get(`fifo ${kind}`);
      const l = this.#rows.get(`leased ${kind}`);
      const part = (r: Row | undefined) =>
        r === undefined
          ? '0 | — | —'
          : `${r.schedules} | ${cell(r.worstCapOver)} | ${cell(r.worstRateOver)}`;
      lines.push(`| ${kind} | ${part(f)} | ${part(l)} |`);
    }
    return lines.join('\n');
  }

  markdown(): string {
    const excess = (n: number) => (Number.isFinite(n) ? String(Math.max(0, n)) : '—');
    const lines = [
      '| mode | fault | schedules | violations (by oracle) | worst capacity lost (ms at 0 with demand) | worst partner excess past the bound (cap / rate units) |',
      '|---|---|---:|---|---:|---|',
    ];
    for (const r of this.#sorted()) {
      const v =
        Object.entries(r.violations)
          .map(([k, n]) => `${k} ${n}`)
          .join(', ') || '0';
      const known = r.excused > 0 ? ` (${r.excused} known open)` : '';
      lines.push(
        `| ${r.mode} | ${r.kind} | ${r.schedules} | ${v}${known} | ${Math.round(r.worstGapMs)} | ${excess(r.worstCapExcess)} / ${excess(r.worstRateExcess)} |`,
      );
    }
    return lines.join('\n');
  }
}
