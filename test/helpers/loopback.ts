import { Agent } from 'undici';
import { afterEach, beforeEach } from 'vitest';
import { type Partner, startPartner } from './partner.js';

/** What {@link useLoopback} gives each test: a fresh partner and an undici Agent. */
export interface Loopback {
  readonly partner: Partner;
  readonly agent: Agent;
}

/**
 * The shared setup of every test that crosses the wire: a counting partner on 127.0.0.1:0 and
 * an Agent, new for each test and closed after it (agent first, so no socket outlives it).
 */
export function useLoopback(agentOptions: Agent.Options = { keepAliveTimeout: 1000 }): Loopback {
  let partner: Partner | undefined;
  let agent: Agent | undefined;
  beforeEach(async () => {
    partner = await startPartner();
    agent = new Agent(agentOptions);
  });
  afterEach(async () => {
    await agent?.destroy();
    await partner?.close();
    agent = undefined;
    partner = undefined;
  });
  return {
    get partner() {
      if (partner === undefined) throw new Error('useLoopback: no test is running');
      return partner;
    },
    get agent() {
      if (agent === undefined) throw new Error('useLoopback: no test is running');
      return agent;
    },
  };
}
