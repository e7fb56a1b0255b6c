import { type HostgateErrorCode, ShedError } from '../errors.js';

// Not yet in errors.ts's code union; the brand and `retryAfterMs` make it a shed error all the same.
const CODE = 'HOSTGATE_PARTNER_COOLDOWN' as HostgateErrorCode;

/**
 * A partner answered 429/503 with `Retry-After` and its cooldown has not ended: the call was
 * shed before dispatch, so that the partner is not hit by every caller at once. A shed error
 * (`isShedError`), so an HTTP layer answers 503 with this `retryAfterMs`.
 */
export class PartnerCooldownError extends ShedError {
  static readonly CODE = CODE;
  constructor(partner: string, retryAfterMs: number) {
    const s =
      retryAfterMs < 1000
        ? `${Math.ceil(retryAfterMs)} ms`
        : `${(retryAfterMs / 1000).toFixed(1)} s`;
    super(
      CODE,
      `${partner} asked callers to back off (Retry-After); retry after ${s}`,
      partner,
      retryAfterMs,
    );
  }
}
