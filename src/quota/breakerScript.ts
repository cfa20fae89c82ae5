import { Schema } from "effect"

/**
 * The Redis twin of src/domain/breaker.ts: the same steps, run atomically on the state every runner shares (one
 * JSON value per provider and model). Kept line by line beside the TypeScript; test/integration/breaker.test.ts
 * runs random sequences of steps through both and compares every result.
 *
 * The time is the caller's (ARGV[2]), not Redis' TIME: the steps are then deterministic (the twin test, TestClock
 * tests), and runners' clock skew (milliseconds) only shifts a cool-down of seconds by as much.
 *
 * KEYS[1] the state; ARGV: op (peek | admit | record), now, errorRate, minCalls, windowMs, openForMs, openMaxMs,
 * probes, probeTimeoutMs, provider, model, fault (1/0), probe (1/0), buckets.
 * Returns {admitted 1/0, probe 1/0, waitMs, state, from ("" if unchanged), the state's JSON}.
 */
export const BREAKER_STEP = `
local op, now = ARGV[1], tonumber(ARGV[2])
local rate, minCalls, windowMs = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local openFor, openMax, probes, probeTimeout = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local fault, probe, buckets = ARGV[12] == "1", ARGV[13] == "1", tonumber(ARGV[14])
local raw = redis.call("GET", KEYS[1])
local st
if raw then st = cjson.decode(raw) else
  st = {p = ARGV[10], m = ARGV[11], s = "closed", ["until"] = 0, trips = 0, probes = 0, ok = 0, since = now, b = {}}
end
local from, admitted, isProbe, wait, dirty = "", 1, 0, 0, false

local function open()
  st.trips = st.trips + 1
  st.s, st["until"] = "open", now + math.min(openMax, openFor * 2 ^ (st.trips - 1))
  st.probes, st.ok, st.since, st.b = 0, 0, now, {}
end

if op == "record" then
  dirty = true
  if st.s == "half_open" then
    if probe then
      if fault then open() from = "half_open"
      else
        st.ok = st.ok + 1
        if st.ok >= probes then
          st = {p = st.p, m = st.m, s = "closed", ["until"] = 0, trips = 0, probes = 0, ok = 0, since = now, b = {}}
          from = "half_open"
        end
      end
    end
  elseif st.s == "closed" then
    local size = windowMs / buckets
    local current = math.floor(now / size)
    local b, calls, faults = {}, 0, 0
    for key, v in pairs(st.b) do
      if tonumber(key) > current - buckets then
        b[key] = v
        calls, faults = calls + v[1], faults + v[2]
      end
    end
    local k = tostring(current)
    local cell = b[k] or {0, 0}
    local f = fault and 1 or 0
    b[k] = {cell[1] + 1, cell[2] + f}
    calls, faults = calls + 1, faults + f
    st.b = b
    if calls >= minCalls and faults >= rate * calls then open() from = "closed" end
  end
else
  if st.s == "open" then
    if now < st["until"] then
      admitted, wait = 0, st["until"] - now
    else
      from, dirty = "open", true
      st.s, st.probes, st.ok, st["until"], st.since = "half_open", 0, 0, now + probeTimeout, now
    end
  end
  if admitted == 1 and st.s == "half_open" then
    if now >= st["until"] then st.probes, st["until"], dirty = 0, now + probeTimeout, true end
    if st.probes >= probes then
      admitted, wait = 0, math.min(st["until"] - now, math.max(1, openFor / 4))
    else
      isProbe = 1
      if op == "admit" then st.probes, dirty = st.probes + 1, true end
    end
  end
end

local json = cjson.encode(st)
if dirty then
  local keep = math.max(0, st["until"] - now) + windowMs + openMax
  redis.call("SET", KEYS[1], json, "PX", math.ceil(keep))
end
return {admitted, isProbe, string.format("%.3f", wait), st.s, from, json}
`

/** The JSON the script stores (src/domain/breaker.ts BreakerState), decoded wherever it is read back. */
const StoredState = Schema.Struct({
  p: Schema.String,
  m: Schema.String,
  s: Schema.Literal("closed", "open", "half_open"),
  until: Schema.Number,
  trips: Schema.Number,
  probes: Schema.Number,
  ok: Schema.Number,
  since: Schema.Number,
  b: Schema.Record({ key: Schema.String, value: Schema.Tuple(Schema.Number, Schema.Number) })
})
export const decodeState = Schema.decodeUnknownOption(Schema.parseJson(StoredState))
