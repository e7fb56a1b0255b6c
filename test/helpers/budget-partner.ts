import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A partner with a budget of `quota` calls: the call that spends it is answered with its
 * headers saying remaining 0 and when the budget comes back; a call before then is answered
 * 429 (with the same headers). It logs what it received and answered, by its own clock, and
 * counts its own concurrent requests: the oracle.
 */
export interface BudgetPartner {
  origin: string;
  log: { at: number; status: number }[];
  /** When the partner sent its first "remaining 0" (its clock, ms). */
  firstSpentAt: number | undefined;
  /** The most requests it saw at once. */
  readonly peak: number;
  close(): Promise<void>;
}

export type HeaderStyle = (
  remaining: number,
  resetMs: number,
  resetAt: number,
) => Record<string, string>;

/** The IETF draft's `RateLimit` and `RateLimit-Policy` (a quota of 3 a second). */
export const ietf: HeaderStyle = (r, ms) => ({
  ratelimit: `"default";r=${r};t=${Math.ceil(ms / 1000)}`,
  'ratelimit-policy': '"default";q=3;w=1',
});

export async function startBudgetPartner(
  quota: number,
  resetMs: number,
  style: HeaderStyle,
): Promise<BudgetPartner> {
  const log: { at: number; status: number }[] = [];
  let used = 0;
  let resetAt = 0;
  let active = 0;
  let peak = 0;
  const partner: BudgetPartner = {
    origin: '',
    log,
    firstSpentAt: undefined,
    get peak() {
      return peak;
    },
    close: async () => {},
  };
  const server = http.createServer((req, res) => {
    active++;
    peak = Math.max(peak, active);
    res.on('close', () => active--);
    req.resume();
    const at = Date.now();
    if (at < resetAt) {
      log.push({ at, status: 429 });
      res.writeHead(429, style(0, resetAt - at, resetAt)).end('early');
      return;
    }
    if (resetAt !== 0) {
      used = 0;
      resetAt = 0;
    }
    used++;
    const remaining = quota - used;
    let headers = style(remaining, 0, 0);
    if (remaining === 0) {
      resetAt = at + resetMs;
      headers = style(0, resetMs, resetAt);
      partner.firstSpentAt ??= at;
    }
    log.push({ at, status: 200 });
    res.writeHead(200, headers).end('ok');
  });
  server.keepAliveTimeout = 10_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  partner.origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  partner.close = () =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return partner;
}
