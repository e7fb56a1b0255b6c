import { describe, expect, it } from 'vitest';
import { parseRetryAfter } from '../../src/index.js';

const NOW = Date.UTC(2030, 0, 15, 12, 0, 0); // a whole second, as HTTP-dates are

describe('parseRetryAfter', () => {
  it('reads delta-seconds as milliseconds', () => {
    expect(parseRetryAfter('0', NOW)).toBe(0);
    expect(parseRetryAfter('3', NOW)).toBe(3000);
    expect(parseRetryAfter(' 120 ', NOW)).toBe(120_000);
  });

  it('reads an IMF-fixdate as the time left until it', () => {
    expect(parseRetryAfter(new Date(NOW + 5000).toUTCString(), NOW)).toBe(5000);
    expect(parseRetryAfter('Tue, 15 Jan 2030 12:01:00 GMT', NOW)).toBe(60_000);
  });

  it('reads the obsolete RFC 850 and asctime date forms too', () => {
    expect(parseRetryAfter('Tuesday, 15-Jan-30 12:00:10 GMT', NOW)).toBe(10_000);
    expect(parseRetryAfter('Tue Jan 15 12:00:20 2030', NOW)).toBe(20_000); // GMT, whatever TZ says
  });

  it('treats a date in the past as "now"', () => {
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', NOW)).toBe(0);
  });

  it('ignores what is not a Retry-After value', () => {
    for (const value of [null, undefined, '', '   ', '-1', '1.5', '+3', 'soon', '1e3']) {
      expect(parseRetryAfter(value, NOW), String(value)).toBeUndefined();
    }
  });
});
