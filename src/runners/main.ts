import { NodeRuntime } from "@effect/platform-node"
import { Layer } from "effect"
import { RunnerLive } from "./Runner.js"

Layer.launch(RunnerLive).pipe(NodeRuntime.runMain)
