import { makeFal } from "./providers/fal.js"
import { luma } from "./providers/luma.js"
import { openai } from "./providers/openai.js"
import { replicate } from "./providers/replicate.js"
import { runway } from "./providers/runway.js"
import { veo } from "./providers/veo.js"
import type { SimulatedProvider } from "./SimulatedProvider.js"

/** Every provider the simulator speaks, each under its own path prefix: the simulator's one list. */
export const simulatedProviders = (falPublicJwk: object): ReadonlyArray<SimulatedProvider> => [
  openai,
  replicate,
  makeFal(falPublicJwk),
  runway,
  luma,
  veo
]
