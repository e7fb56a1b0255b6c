/**
 * The report service from the seed text, as a user would write it with hostgate: every
 * report fans out to three partner APIs whose concurrency caps are real and known.
 *
 * In your own code the imports are `from 'hostgate'` and `from 'hostgate/express'`; here they
 * point at the sources so the example runs straight from a clone (`npm run demo`).
 *
 *   GET /reports/:customer  ->  billing (required) + inventory (required) + shipping (optional)
 */
import express from 'express';
import { admit, findClientDisconnected, outbound, shed } from '../middleware/index.js';
import { findShedError, HostLimiter } from '../src/index.js';

/**
 * The partners' real caps, copied from their contracts — not tuned. Six replicas of this
 * service would need a sixth each (hostgate's gates are per process).
 */
export const PARTNER_CAPS = {
  /** Billing's API contract: 20 concurrent requests. */
  billing: 20,
  /** Inventory runs on a pool of 10 database connections. */
  inventory: 10,
  /** Shipping's legacy gateway handles 5 at a time. */
  shipping: 5,
} as const;

export type PartnerName = keyof typeof PARTNER_CAPS;
export type PartnerUrls = Record<PartnerName, string>;

/** What the service saw of each partner, from its side of the wire. */
export interface CallCounts {
  /** Answered and used. */
  ok: number;
  /** Refused by hostgate without reaching the partner (queue full or wait deadline). */
  shed: number;
  /** Cancelled because the inbound client went away (waiting or in flight). */
  clientLeft: number;
  /** Cancelled because a required sibling call failed, so its answer was no longer needed. */
  siblingFailed: number;
  /** Any other failure (an error status from the partner, a network error). */
  failed: number;
}

/** A partner answered with an error status. */
class PartnerError extends Error {
  constructor(
    readonly partner: PartnerName,
    readonly status: number,
  ) {
    super(`${partner} answered ${status}`);
  }
}

export interface ReportService {
  app: express.Express;
  limiter: HostLimiter;
  /** The inbound gate (`admission.gate.stats()`). */
  admission: ReturnType<typeof admit>;
  calls: Record<PartnerName, CallCounts>;
  /** Closes the outbound connection pool. */
  close(): Promise<void>;
}

export function buildReportService(partners: PartnerUrls): ReportService {
  const limiter = new HostLimiter({
    partners: [
      // queueTimeout 250 ms: a report is worth a short wait, not a timeout storm.
      {
        name: 'billing',
        hosts: [partners.billing],
        limit: PARTNER_CAPS.billing,
        maxQueue: 200,
        queueTimeout: 250,
      },
      {
        name: 'inventory',
        hosts: [partners.inventory],
        limit: PARTNER_CAPS.inventory,
        maxQueue: 100,
        queueTimeout: 250,
      },
      {
        name: 'shipping',
        hosts: [partners.shipping],
        limit: PARTNER_CAPS.shipping,
        maxQueue: 25,
        queueTimeout: 150,
      },
    ],
    unknownHosts: 'reject', // every partner this service may call is named above
  });

  // At most 100 reports in progress (inventory, the slowest required partner, serves ~180/s);
  // 200 more may wait up to 0.5 s; the rest get 503 at once.
  const admission = admit({ limit: 100, maxQueue: 200, queueTimeout: 500, name: 'reports' });
  // perRequest 2: one report never has more than two partner calls in flight.
  const client = outbound({ limiter, perRequest: 2 });

  const calls = {} as Record<PartnerName, CallCounts>;
  for (const name of Object.keys(PARTNER_CAPS) as PartnerName[]) {
    calls[name] = { ok: 0, shed: 0, clientLeft: 0, siblingFailed: 0, failed: 0 };
  }

  async function callPartner(
    req: express.Request,
    partner: PartnerName,
    path: string,
    signal: AbortSignal,
  ): Promise<unknown> {
    try {
      // req.outbound.fetch: limited per partner, cancelled if the client leaves; `signal`
      // (the siblings' controller) is combined with the client's, not replacing it.
      const response = await req.outbound.fetch(`${partners[partner]}${path}`, { signal });
      if (!response.ok) {
        await response.body?.cancel();
        throw new PartnerError(partner, response.status);
      }
      const data = await response.json();
      calls[partner].ok++;
      return data;
    } catch (error) {
      const counts = calls[partner];
      if (findClientDisconnected(error)) counts.clientLeft++;
      else if (signal.aborted)
        counts.siblingFailed++; // checked first: the reason is the sibling's error
      else if (findShedError(error)) counts.shed++;
      else counts.failed++;
      throw error;
    }
  }

  const app = express();
  app.disable('x-powered-by');
  app.use(admission);
  app.use(client);

  app.get('/reports/:customer', async (req, res) => {
    const customer = encodeURIComponent(req.params.customer);
    const siblings = new AbortController();
    const required = Promise.all([
      callPartner(req, 'billing', `/invoices?customer=${customer}`, siblings.signal),
      callPartner(req, 'inventory', `/stock?customer=${customer}`, siblings.signal),
    ]);
    // Shipping is optional: when its gate sheds, the report degrades instead of failing.
    const shipping = callPartner(
      req,
      'shipping',
      `/shipments?customer=${customer}`,
      siblings.signal,
    ).catch((error: unknown) => {
      if (findShedError(error) && !findClientDisconnected(error)) return null;
      throw error;
    });
    try {
      const [[invoices, stock], shipments] = await Promise.all([required, shipping]);
      res.json({
        customer: req.params.customer,
        invoices,
        stock,
        shipments,
        partial: shipments === null,
      });
    } catch (error) {
      siblings.abort(error); // the report failed: stop the calls whose answers are now useless
      throw error; // Express 5 passes it to the error handlers below
    }
  });

  // Shed errors -> 503 + Retry-After + problem+json; a client that left -> nothing written.
  app.use(shed());
  app.use(
    (err: unknown, _req: express.Request, res: express.Response, next: express.NextFunction) => {
      if (!(err instanceof PartnerError) || res.headersSent) return next(err);
      res.status(502).json({ error: err.message });
    },
  );

  return { app, limiter, admission, calls, close: () => client.close() };
}
