import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { redisStatus } from "../../redis/RedisStatus.js"
import { ControlPlaneApi } from "../Api.js"
import { RedisConnectionView, RedisStatusView } from "./RedisApi.js"

export const RedisHttpLive = HttpApiBuilder.group(
  ControlPlaneApi,
  "redis",
  (handlers) =>
    handlers.handle("status", () =>
      Effect.map(redisStatus, (s) =>
        new RedisStatusView({
          mode: s.mode,
          target: s.target,
          sentinel_master: s.sentinels?.master ?? null,
          sentinel_answered_by: s.sentinels?.answeredBy ?? null,
          connections: s.connections.map((c) =>
            new RedisConnectionView({
              connection: c.connection,
              status: c.status,
              master: c.master,
              connects: c.connects,
              master_switches: c.masterSwitches
            })
          )
        })))
)
