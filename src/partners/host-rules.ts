/**
 * The partner rules' host patterns, looked up by origin: which partner's gate an origin belongs
 * to, and, for an origin no rule matched, whether a rule was most likely meant to (a near miss).
 */

import type { Semaphore } from '../gate/semaphore.js';
import { aliasFamily, type HostPattern, parseHostPattern } from './origin.js';

/** Bound on the origins warned about (HOSTGATE_RULE_NEAR_MISS): a warning each, no more. */
const MAX_NEAR_MISS_WARNINGS = 64;

/** Host patterns to partner gates, most specific first; built once by the limiter. */
export class HostRules {
  readonly #origins = new Map<string, Semaphore>();
  readonly #hosts = new Map<string, Semaphore>();
  readonly #wildcards: { suffix: string; gate: Semaphore }[] = [];
  /** Which partner claimed each pattern (by {@link patternKey}): a pattern belongs to one. */
  readonly #claimed = new Map<string, string>();
  /** Rule hostnames by origin rules (`http://h:1`), and loopback families: near-miss checks. */
  readonly #ruleHosts = new Map<string, string>();
  readonly #ruleFamilies = new Map<string, string>();
  readonly #nearMissWarned = new Set<string>();

  /** Adds a partner's hosts (origins, hostnames, wildcards); a host another rule claimed throws. */
  add(where: string, partner: string, hosts: string[], gate: Semaphore): void {
    for (const text of hosts) {
      const pattern = parseHostPattern(where, text);
      const key = patternKey(pattern);
      const other = this.#claimed.get(key);
      if (other !== undefined) {
        throw new TypeError(
          `${where}: host ${JSON.stringify(pattern.text)} is already claimed by partner ${JSON.stringify(other)}`,
        );
      }
      this.#claimed.set(key, partner);
      if (pattern.kind === 'origin') {
        this.#origins.set(pattern.key, gate);
        if (!this.#ruleHosts.has(pattern.host)) this.#ruleHosts.set(pattern.host, partner);
      } else if (pattern.kind === 'host') this.#hosts.set(pattern.host, gate);
      else {
        this.#wildcards.push({ suffix: pattern.suffix, gate });
        // Longest suffix first (a stable sort: equal lengths keep the rules' order).
        this.#wildcards.sort((a, b) => b.suffix.length - a.suffix.length);
      }
      const family = pattern.kind === 'wildcard' ? undefined : aliasFamily(pattern.host);
      if (family !== undefined && !this.#ruleFamilies.has(family)) {
        this.#ruleFamilies.set(family, partner);
      }
    }
  }

  /** Most specific first: exact origin, then hostname, then the longest wildcard suffix. */
  match(key: string, host: string): Semaphore | undefined {
    const byOrigin = this.#origins.get(key);
    if (byOrigin !== undefined) return byOrigin;
    const byHost = this.#hosts.get(host);
    if (byHost !== undefined) return byHost;
    for (const { suffix, gate } of this.#wildcards) {
      if (host.endsWith(suffix)) return gate;
    }
    return undefined;
  }

  /**
   * An origin no rule matched, although a rule names its host on another scheme or port, or a
   * loopback alias of it: most likely a rule that was meant to cap it (issue 33). Warned once
   * per origin (a bounded number of origins), or an error when `strict` (`strictOrigins`).
   */
  nearMiss(key: string, host: string, strict: boolean): void {
    if (this.#ruleHosts.size === 0 && this.#ruleFamilies.size === 0) return;
    let rule = this.#ruleHosts.get(host);
    let why = 'names its host with another scheme or port';
    if (rule === undefined && !this.#hosts.has(host)) {
      const family = aliasFamily(host);
      rule = family === undefined ? undefined : this.#ruleFamilies.get(family);
      why = 'names a loopback alias of it (names are not resolved: list this host too)';
    }
    if (rule === undefined) return;
    const message = `${key} matches no partner rule, but partner ${JSON.stringify(rule)} ${why}: it is not capped by that rule`;
    if (strict) {
      throw new TypeError(
        `${message}. Fix the rule's hosts (scheme, port, or add this host), or set strictOrigins: false to let it through under the unknown-host gate`,
      );
    }
    if (this.#nearMissWarned.has(key) || this.#nearMissWarned.size >= MAX_NEAR_MISS_WARNINGS) {
      return;
    }
    this.#nearMissWarned.add(key);
    process.emitWarning(
      `${message}; it runs under the unknown-host gate. Fix the rule's hosts, or set strictOrigins: true while setting up to make this an error`,
      { code: 'HOSTGATE_RULE_NEAR_MISS' },
    );
  }
}

/** One key per pattern, whatever its kind: two rules may not claim the same. */
function patternKey(pattern: HostPattern): string {
  if (pattern.kind === 'origin') return pattern.key;
  if (pattern.kind === 'host') return pattern.host;
  return `*${pattern.suffix}`;
}
