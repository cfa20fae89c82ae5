import { Context, Layer } from "effect"
import { processEnv } from "./env.js"
import { spawnMarked } from "./processes.js"
import { type SentinelSet, startSentinelSetWith } from "./sentinelSet.js"

export { hasSentinel, MASTER_NAME, type SentinelSet } from "./sentinelSet.js"

/** A SentinelSet of the test's own: its processes marked, so the suite's teardown kills them if the worker dies. */
export const startSentinelSet = startSentinelSetWith((command, args) => spawnMarked(command, args, processEnv({})))

/** A SentinelSet for a whole file (`layer(...)`), shared by the layers that connect to it. */
export class Sentinels extends Context.Tag("test/Sentinels")<Sentinels, SentinelSet>() {}
export const layerSentinels = Layer.scoped(Sentinels, startSentinelSet)
