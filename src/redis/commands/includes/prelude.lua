--[[
  What every script of a FIFO shared gate runs first, in this order: the gate's keys, arguments,
  clock and meta (refusing another layout), time that passed unobserved, a lost state's recovery
  window, the rate, the holders' count, then the functions the scripts share. The keys and what
  each holds: src/redis/scripts.ts.

  KEYS: H holders, Q tickets, S arrival sequence, P processes, M meta (all in one hash slot).
  ARGV[1] cap (the caller's, used only if Redis has none)
  ARGV[2] leaseMs
  ARGV[3] liveMs, a process's liveness window
  ARGV[4] wakePrefix, the gate's wake-up channels
  ARGV[5] known, 1 when this process used the gate before
  ARGV[6] firstUseWaitMs
  ARGV[7] claimMs
  ARGV[8] rate, `limit:per:burst` of the caller's (used only if Redis has none), '' for none
  ARGV[9..] the script's own.

  Held and queued counts are in units of the cap. Every reply ends with the rate's state
  (`withRate`): `hint` (`<ticket>@<ms>`: the head whose permit is free gets its slot in ms; ''
  if none), `nextSlotMs`, `backlog` (cost units queued) and the rate Redis holds.

  Counts are kept in Lua variables rather than asked again: every call inside a script is Redis
  work that all processes wait behind. Lists of ids go to Redis in one variadic call (ZMSCORE,
  ZADD), in chunks that Lua's unpack() takes: a heartbeat's cost does not grow in calls with
  the number of leases and tickets it carries.
]]
--- @include "gate"
--- @include "rebaseGap"
--- @include "recovery"
--- @include "rate"
--- @include "holders"
--- @include "queue"
--- @include "fill"
--- @include "reply"
