/**
 * The soak's chart (drills/soak.svg): tasks admitted per 10 s and commit → client latency p99 per 10 s over time, with
 * a line at every kill and restart. Plain SVG: no dependency, opens in any browser.
 */
import { percentile } from "../bench/support.js"

export interface SoakSeries {
  readonly durationMs: number
  /** When each task was admitted (ms from the start). */
  readonly created: ReadonlyArray<number>
  /** Per delivered event: when it was committed (ms from the start) and how long it took to reach the client. */
  readonly latencies: ReadonlyArray<{ readonly at: number; readonly ms: number }>
  readonly marks: ReadonlyArray<{ readonly at: number; readonly what: string }>
}

const BUCKET = 10_000
const W = 1000
const H = 220
const PAD = 50

const path = (values: ReadonlyArray<number>, max: number, top: number) =>
  values.map((v, i) =>
    `${i === 0 ? "M" : "L"}${(PAD + (i / Math.max(1, values.length - 1)) * (W - 2 * PAD)).toFixed(1)},${
      (top + H - (Math.min(v, max) / max) * H).toFixed(1)
    }`
  ).join(" ")

export const soakChart = (s: SoakSeries): string => {
  const buckets = Math.max(1, Math.ceil(s.durationMs / BUCKET))
  const admitted = Array.from(
    { length: buckets },
    (_, b) => s.created.filter((t) => Math.floor(t / BUCKET) === b).length / 10
  )
  const p99 = Array.from({ length: buckets }, (_, b) => {
    const xs = s.latencies.filter((l) => Math.floor(l.at / BUCKET) === b).map((l) => l.ms)
    return xs.length === 0 ? 0 : percentile(xs, 99)
  })
  const maxRate = Math.max(0.1, ...admitted) * 1.2
  const maxLatency = Math.max(100, ...p99) * 1.1
  const x = (at: number) => PAD + (at / s.durationMs) * (W - 2 * PAD)
  const top2 = H + 2 * PAD
  const lines = s.marks.map((m) =>
    `<line x1="${x(m.at).toFixed(1)}" x2="${x(m.at).toFixed(1)}" y1="${PAD}" y2="${top2 + H}" stroke="${
      m.what.startsWith("SIGKILL") ? "#d33" : m.what.startsWith("restart") ? "#e90" : "#ccc"
    }" stroke-width="1" opacity="0.6"><title>${m.what}</title></line>`
  )
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${
    top2 + H + PAD
  }" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="${PAD}" y="${PAD - 10}">tasks admitted per second (10 s buckets), max ${maxRate.toFixed(1)}</text>
<text x="${PAD}" y="${top2 - 10}">commit → client p99 (ms, 10 s buckets by commit time), max ${
    maxLatency.toFixed(0)
  }; red: runner SIGKILL, orange: service restart</text>
<rect x="${PAD}" y="${PAD}" width="${W - 2 * PAD}" height="${H}" fill="none" stroke="#999"/>
<rect x="${PAD}" y="${top2}" width="${W - 2 * PAD}" height="${H}" fill="none" stroke="#999"/>
${lines.join("\n")}
<path d="${path(admitted, maxRate, PAD)}" fill="none" stroke="#26c" stroke-width="2"/>
<path d="${path(p99, maxLatency, top2)}" fill="none" stroke="#2a2" stroke-width="2"/>
<text x="${PAD}" y="${top2 + H + 20}">0 s</text><text x="${W - PAD - 40}" y="${top2 + H + 20}">${
    (s.durationMs / 1000).toFixed(0)
  } s</text>
</svg>
`
}
