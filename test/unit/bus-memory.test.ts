import { describe } from "@effect/vitest"
import { Effect } from "effect"
import * as Bus from "../../src/bus/NotificationBus.js"
import { buildBus, sharedBusTests } from "../support/busCases.js"

// the in-process bus (npm start on a bare machine) passes the same tests as the Redis one (integration tier)
describe("NotificationBus (memory)", () => {
  sharedBusTests(buildBus(Bus.layerMemory).pipe(Effect.map((bus) => [bus, bus] as const)), "memory")
})
