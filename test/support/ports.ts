import * as net from "node:net"
import { poolId } from "./env.js"

/**
 * Ports for the servers a test starts. Asking the kernel for port 0 and closing it again hands the same port to two
 * callers that ask at once (or to two test files), and a port from the ephemeral range can be taken meanwhile by any
 * outgoing connection. So each test process takes its ports from its own block below the ephemeral range (vitest's
 * pool id, unique among the workers running at once), in order, and checks each one by binding it before handing it
 * out (a file that ran before in the same pool may have left a port in use).
 */
const BLOCK = 400
const FIRST = 20_000
const BLOCKS = 30 // 20,000–32,000: below Linux's ephemeral range (32,768–60,999)

const block = poolId % BLOCKS
let next = FIRST + block * BLOCK

const canBind = (port: number) =>
  new Promise<boolean>((resolve) => {
    const server = net.createServer()
    server.once("error", () => resolve(false))
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)))
  })

/** A port no other caller in this process was given, free when it was handed out. */
export const allocatePort = async (): Promise<number> => {
  for (let tries = 0; tries < BLOCK * BLOCKS; tries++) {
    const port = next
    next = next + 1 >= FIRST + BLOCK * BLOCKS ? FIRST : next + 1
    if (await canBind(port)) return port
  }
  throw new Error("no free port in 20000–32000")
}
