/**
 * `npm run demo`: a burst of 1,000 concurrent clients against the report service, a share of
 * them hanging up mid-request, with three simulated partners that refuse anything over their
 * cap. Ends with what every partner saw and whether every invariant held; exits non-zero if
 * any partner saw more than its cap or any permit leaked. Then the deadline act
 * (`deadline-act.ts`): a 300 ms budget fanning out to a slow partner; and the replicas act
 * (`replicas-act.ts`): three replicas share billing's cap through Redis: yours when `REDIS_URL`
 * is set, else a private `redis-server` from the PATH (skipped, in one line, without one).
 * Loopback only (unless your `REDIS_URL` points elsewhere), a few seconds.
 */
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { deadlineAct } from './deadline-act.js';
import { type SimulatedPartner, startSimulatedPartner } from './partners.js';
import { replicasAct } from './replicas-act.js';
import { buildReportService, PARTNER_CAPS, type PartnerName } from './report-service.js';

const CLIENTS = Number(process.env.DEMO_CLIENTS ?? 1000);
/** Share of clients that hang up mid-request, after a random 5-300 ms. */
const DISCONNECT_SHARE = 0.2;
/** The whole run is bounded: past this the demo gives up and fails. */
const DEADLINE_MS = 75_000;
/** After the last client, how long the service may take to wind down every call. */
const SETTLE_MS = 5_000;

const LATENCY: Record<PartnerName, [number, number]> = {
  billing: [20, 60],
  inventory: [30, 80],
  shipping: [40, 120],
};

type ClientOutcome = 'full' | 'partial' | 'shedInbound' | 'shedPartner' | 'left' | 'other';

interface ClientResult {
  outcome: ClientOutcome;
  status?: number;
}

const tty = process.stdout.isTTY === true;
let stdoutOpen = true;
process.stdout.on('error', () => {
  stdoutOpen = false; // e.g. piped into `head`: keep running, stop printing
});
const write = (line: string) => {
  if (stdoutOpen) process.stdout.write(`${line}\n`);
};

async function main(): Promise<number> {
  const started = performance.now();
  const watchdog = setTimeout(() => {
    write(`\nFAILED: the demo did not finish within ${DEADLINE_MS / 1000} s`);
    process.exit(2);
  }, DEADLINE_MS);
  watchdog.unref();

  // 1. Three partners that enforce their own caps, on 127.0.0.1.
  const partners = {} as Record<PartnerName, SimulatedPartner>;
  for (const name of Object.keys(PARTNER_CAPS) as PartnerName[]) {
    partners[name] = await startSimulatedPartner({
      name,
      cap: PARTNER_CAPS[name],
      latencyMs: LATENCY[name],
    });
  }

  // 2. The report service, exactly as examples/report-service.ts builds it.
  const service = buildReportService({
    billing: partners.billing.url,
    inventory: partners.inventory.url,
    shipping: partners.shipping.url,
  });
  const server = http.createServer(service.app);
  // A backlog for the whole burst: with Node's default (511) the kernel drops the excess
  // connection attempts and the clients retry a second later, which spreads the burst out.
  server.listen({ port: 0, host: '127.0.0.1', backlog: 2048 });
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  const base = `http://127.0.0.1:${port}`;

  write('hostgate demo: the report service from the seed text, under a burst');
  write(`  service  ${base}  (admit 100 + queue 200, perRequest 2)`);
  for (const p of Object.values(partners)) {
    write(`  partner  ${p.name.padEnd(9)} ${p.url}  cap ${p.cap}, refuses over it with 503`);
  }
  write(
    `  burst    ${CLIENTS} concurrent clients, ${Math.round(DISCONNECT_SHARE * 100)}% of them hang up mid-request\n`,
  );

  // 3. The burst: every client at once, each on its own connection from its own agent pool.
  const agent = new http.Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY });
  const results: ClientResult[] = [];
  const counts: Record<ClientOutcome, number> = {
    full: 0,
    partial: 0,
    shedInbound: 0,
    shedPartner: 0,
    left: 0,
    other: 0,
  };
  const record = (r: ClientResult) => {
    results.push(r);
    counts[r.outcome]++;
  };
  const progress = setInterval(() => printProgress(false), 250);
  const printProgress = (final: boolean) => {
    const ms = Math.round(performance.now() - started);
    const line =
      `  ${String(results.length).padStart(4)}/${CLIENTS} done  ` +
      `200 ${counts.full + counts.partial} (partial ${counts.partial})  ` +
      `503 ${counts.shedInbound + counts.shedPartner}  hung up ${counts.left}  ` +
      `[${(ms / 1000).toFixed(1)} s]`;
    if (tty && stdoutOpen) process.stdout.write(`\r${line}${final ? '\n' : ''}`);
    else write(line);
  };

  await Promise.all(
    Array.from({ length: CLIENTS }, (_, i) =>
      runClient(
        `${base}/reports/customer-${i}`,
        agent,
        Math.random() < DISCONNECT_SHARE ? 5 + Math.random() * 295 : undefined,
      ).then(record),
    ),
  );
  clearInterval(progress);
  printProgress(true);
  agent.destroy();

  // 4. Let the service wind down: cancelled calls return their permits, partners finish.
  const settleBy = performance.now() + SETTLE_MS;
  while (performance.now() < settleBy && !quiet(service, partners)) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }

  // 5. The summary, and the invariants.
  const failures: string[] = [];
  const gateStats = service.limiter.stats();
  const rows: string[][] = [
    [
      'partner',
      'cap',
      'peak seen',
      'served',
      'refused',
      'close in transit',
      'shed 503',
      'cancel: left',
      'cancel: sibling',
      'held/avail',
    ],
  ];
  for (const name of Object.keys(partners) as PartnerName[]) {
    const p = partners[name].counts();
    const g = gateStats[name]!;
    const calls = service.calls[name];
    rows.push([
      name,
      String(partners[name].cap),
      String(p.peak),
      String(p.served),
      String(p.refused),
      String(p.closeInTransit),
      String(g.shedQueueFull + g.shedQueueTimeout),
      String(calls.clientLeft),
      String(calls.siblingFailed),
      `${g.held}/${g.available}`,
    ]);
    const cap = partners[name].cap;
    if (p.peak > cap)
      failures.push(`${name} saw ${p.peak} concurrent requests, over its cap of ${cap}`);
    if (p.refused > 0) failures.push(`${name} refused ${p.refused} requests over its cap`);
    if (g.held !== 0 || g.queued !== 0 || g.available !== g.limit) {
      failures.push(
        `${name}: ${g.held} permits still held, ${g.queued} queued, ${g.available}/${g.limit} available (leak)`,
      );
    }
    if (g.acquired !== g.released + g.holdTimeouts) {
      failures.push(`${name}: ${g.acquired} permits granted but ${g.released} released`);
    }
    if (g.doubleReleases !== 0) failures.push(`${name}: ${g.doubleReleases} double releases`);
    if (p.active !== 0) failures.push(`${name} still has ${p.active} requests open`);
  }
  const a = service.admission.gate.stats();
  if (a.held !== 0 || a.queued !== 0 || a.available !== a.limit || a.acquired !== a.released) {
    failures.push(
      `inbound gate: ${a.held} held, ${a.queued} queued, ${a.acquired} granted, ${a.released} released (leak)`,
    );
  }
  if (results.length !== CLIENTS)
    failures.push(`${CLIENTS - results.length} clients unaccounted for`);
  if (counts.other > 0) failures.push(`${counts.other} clients got an unexpected answer`);

  write('');
  write(table(rows));
  write(
    '  peak seen, served, refused: counted by each partner itself; it refuses (503) anything over\n' +
      "  its cap. close in transit: one over the cap arrived while a cancelled call's close, already\n" +
      '  sent, was still on its way (it came within 20 ms): served, not counted. shed 503: turned\n' +
      '  away by hostgate before reaching the partner (queue full or waited too long). cancelled:\n' +
      '  calls stopped while waiting or in flight because the client hung up, or because a\n' +
      '  required sibling call of the same report had failed.',
  );
  write('');
  write(
    `  inbound  admitted ${a.acquired}, shed ${a.shedQueueFull + a.shedQueueTimeout} at the door, ` +
      `${a.abortedWaiting} left while queued; permits held/available at the end ${a.held}/${a.available}`,
  );
  write(
    `  clients  (their view) ${counts.full} full reports, ${counts.partial} partial (shipping shed), ` +
      `${counts.shedInbound} 503 at the door, ${counts.shedPartner} 503 from a partner gate, ` +
      `${counts.left} hung up, ${counts.other} other`,
  );
  write(`  time     ${((performance.now() - started) / 1000).toFixed(1)} s`);
  failures.push(...(await deadlineAct({ write, table })));
  server.closeAllConnections();
  server.close();
  await service.close();
  for (const p of Object.values(partners)) await p.close();

  // 6. Several replicas: one cap shared through Redis, against a limit per process.
  failures.push(...(await replicasAct(write)));
  write('');
  if (failures.length === 0) {
    write('EVERY INVARIANT HELD: no partner saw more than its cap, none refused a request,');
    write('and every permit came back (held 0, queued 0, available = cap on every gate).');
  } else {
    write('INVARIANT BROKEN:');
    for (const f of failures) write(`  - ${f}`);
  }
  clearTimeout(watchdog);
  return failures.length === 0 ? 0 : 1;
}

function quiet(
  service: ReturnType<typeof buildReportService>,
  partners: Record<PartnerName, SimulatedPartner>,
): boolean {
  if (service.admission.gate.held !== 0) return false;
  for (const gate of service.limiter.gates().values()) {
    if (gate.held !== 0 || gate.queued !== 0) return false;
  }
  return Object.values(partners).every((p) => p.counts().active === 0);
}

/** One client: GET the report; if `hangUpAfterMs` is set, hang up then unless answered. */
function runClient(
  url: string,
  agent: http.Agent,
  hangUpAfterMs: number | undefined,
): Promise<ClientResult> {
  return new Promise((resolve) => {
    let settled = false;
    const done = (r: ClientResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(r);
    };
    const req = http.get(url, { agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', () => done({ outcome: 'left' }));
      res.on('end', () => {
        const status = res.statusCode ?? 0;
        if (status === 200) {
          const body = JSON.parse(Buffer.concat(chunks).toString()) as { partial: boolean };
          done({ outcome: body.partial ? 'partial' : 'full', status });
        } else if (status === 503) {
          const body = JSON.parse(Buffer.concat(chunks).toString()) as { partner?: string };
          done({ outcome: body.partner === 'reports' ? 'shedInbound' : 'shedPartner', status });
        } else done({ outcome: 'other', status });
      });
    });
    req.on('error', () => done({ outcome: settled ? 'other' : 'left' }));
    const timer =
      hangUpAfterMs === undefined
        ? undefined
        : setTimeout(() => {
            if (settled) return;
            req.destroy();
            done({ outcome: 'left' });
          }, hangUpAfterMs);
  });
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const line = (r: string[]) =>
    `  ${r.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]!) : cell.padStart(widths[c]!))).join('  ')}`;
  const rule = `  ${widths.map((w) => '-'.repeat(w)).join('  ')}`;
  return [line(rows[0]!), rule, ...rows.slice(1).map(line)].join('\n');
}

main().then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(error);
    process.exitCode = 1;
  },
);
