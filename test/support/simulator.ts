import { Effect, Layer } from "effect"
import { layerHttp } from "../../src/runners/Runner.js"
import { layerTestSimulator } from "../../src/testing/Simulator.js"
import { runnerConfig } from "./runner.js"

export { Sim } from "../../src/testing/Simulator.js"

/** The simulator on `simPort`, signing with the development secrets, OpenAI callbacks to `platform` (the kit's). */
export const layerSim = layerTestSimulator

/** The runner's HTTP API and webhook gateway on `httpPort`. */
export const layerRunnerHttp = (httpPort: number) =>
  Layer.unwrapEffect(Effect.map(runnerConfig({ HTTP_PORT: String(httpPort) }), (c) => layerHttp(c)))
