/** `Retry-After` parsing (RFC 9110 §10.2.3): delta-seconds or an HTTP-date. */

const DELTA_SECONDS = /^\d+$/;
/** asctime() form, `Sun Nov  6 08:49:37 1994`: GMT by definition, local time to Date.parse. */
const ASCTIME = /^[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d\d:\d\d:\d\d \d{4}$/;

/**
 * The delay, in ms, a `Retry-After` value asks for; `undefined` when absent or unparseable.
 * A date in the past means "now" (0). `nowMs` is wall-clock epoch ms, the clock HTTP-dates
 * are written in.
 *
 * @example
 * parseRetryAfter('3', Date.now());                              // 3000
 * parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', Date.now()); // 0 (long past)
 */
export function parseRetryAfter(
  value: string | null | undefined,
  nowMs: number,
): number | undefined {
  if (value == null) return undefined;
  const text = value.trim();
  if (text === '') return undefined;
  if (DELTA_SECONDS.test(text)) {
    const ms = Number(text) * 1000;
    return Number.isFinite(ms) ? ms : undefined;
  }
  // Date.parse reads IMF-fixdate and the two obsolete HTTP-date forms. It also reads other
  // shapes; a bare number with a sign or a fraction is not a valid Retry-After, so refuse it.
  if (/^[+-]?[\d.]+$/.test(text)) return undefined;
  const at = Date.parse(ASCTIME.test(text) ? `${text} GMT` : text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - nowMs);
}
