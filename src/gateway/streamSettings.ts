import * as S from "../config/Settings.js"

/**
 * Browser event streams: the gateway behind SSE and WebSocket (ProjectFeeds, EventGateway, ConnectionLimits) and
 * the two transports (EventsSse, EventsSocket), which share SSE_WRITE_DEADLINE.
 */
export const StreamSettings = S.area("Event streams", "SSE and WebSocket delivery to browsers, per runner", {
  connectionBuffer: S.integer(
    "GATEWAY_CONNECTION_BUFFER",
    "events buffered per connection; a client that falls further behind is disconnected and resumes by cursor",
    128,
    { min: 1 }
  ),
  holeWait: S.duration(
    "GATEWAY_HOLE_WAIT",
    "how long a feed waits for a missing sequence number from the bus before reading it from PostgreSQL",
    "150 millis"
  ),
  tailInterval: S.duration(
    "GATEWAY_TAIL_INTERVAL",
    "how often a feed checks its stream's head in PostgreSQL (events the bus lost)",
    "1 second"
  ),
  // Counted per runner: a load balancer spreads a user's connections, so the cluster-wide bound is this times the
  // number of gateways.
  streamsPerUser: S.positiveNumber("STREAMS_PER_USER", "open streams per user on this runner", 16),
  streamsPerTenant: S.positiveNumber("STREAMS_PER_TENANT", "open streams per tenant on this runner", 20_000),
  opensPerSecond: S.positiveNumber("STREAM_OPENS_PER_SECOND", "new streams per second per user (token bucket)", 5),
  opensBurst: S.positiveNumber("STREAM_OPENS_BURST", "burst of new streams per user (token bucket)", 20),
  sseHeartbeat: S.duration(
    "SSE_HEARTBEAT",
    "heartbeat on an SSE stream; load balancer idle timeouts must be longer",
    "15 seconds"
  ),
  sseRetryMs: S.integer("SSE_RETRY_MS", "reconnect delay the SSE client is told (milliseconds)", 3000, { min: 0 }),
  writeDeadline: S.duration(
    "SSE_WRITE_DEADLINE",
    "an SSE or WebSocket client whose writes stay backed up this long is cut off (it resumes by cursor)",
    "10 seconds"
  ),
  wsMaxFrame: S.integer("WS_MAX_FRAME", "largest WebSocket message accepted from a client (bytes)", 4096, { min: 1 }),
  wsPingInterval: S.duration("WS_PING_INTERVAL", "WebSocket ping; a client that misses one is closed", "15 seconds"),
  wsSendBuffer: S.integer(
    "WS_SEND_BUFFER",
    "bytes queued on a WebSocket before it counts as backed up",
    64 * 1024,
    { min: 1 }
  )
})
