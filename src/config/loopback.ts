import { BlockList, isIP } from "node:net"

const loopback = new BlockList()
loopback.addSubnet("127.0.0.0", 8, "ipv4")
loopback.addAddress("::1", "ipv6")

/**
 * Whether a configured host is this machine only: `localhost`, 127.0.0.0/8, ::1 (also IPv4-mapped). Any other name
 * counts as reachable from elsewhere: a name is not resolved here, and `0.0.0.0` / `::` listen on every interface.
 */
export const isLoopbackHost = (host: string): boolean => {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, "$1")
  if (h === "localhost") return true
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(h)
  const address = mapped === null ? h : mapped[1]!
  const family = isIP(address)
  return family !== 0 && loopback.check(address, family === 4 ? "ipv4" : "ipv6")
}

/** Whether a configured URL points at this machine (a provider simulator, a local test double). */
export const isLoopbackUrl = (url: string): boolean => {
  try {
    return isLoopbackHost(new URL(url).hostname)
  } catch {
    return false
  }
}
