import { isIPv4, isIPv6 } from "node:net"

/**
 * What an IP address is, for deciding whether an output may be fetched from it. Only `public` is fetchable by
 * default; `loopback` and `private` only for the exact hosts of OUTPUT_PRIVATE_HOSTS (the provider simulator);
 * the others never.
 */
export type AddressClass =
  | "public"
  | "loopback"
  /** RFC 1918, CGNAT (100.64/10), IPv6 unique local (fc00::/7) and site-local, NAT64 local use. */
  | "private"
  | "link_local"
  /** Cloud instance metadata: 169.254.169.254 (AWS, GCP, Azure), fd00:ec2::254 (AWS), 100.100.100.200. */
  | "metadata"
  | "unspecified"
  /** Multicast, broadcast, documentation, benchmarking, reserved ranges, and anything that is not an address. */
  | "reserved"

const v4 = (text: string): number => text.split(".").reduce((n, part) => n * 256 + Number(part), 0)

const inV4 = (address: number, base: string, bits: number): boolean =>
  bits === 0 || (address >>> (32 - bits)) === (v4(base) >>> (32 - bits))

const classifyV4 = (a: number): AddressClass => {
  if (inV4(a, "0.0.0.0", 8)) return "unspecified"
  if (inV4(a, "127.0.0.0", 8)) return "loopback"
  if (a === v4("169.254.169.254") || a === v4("100.100.100.200")) return "metadata"
  if (inV4(a, "169.254.0.0", 16)) return "link_local"
  if (inV4(a, "10.0.0.0", 8) || inV4(a, "172.16.0.0", 12) || inV4(a, "192.168.0.0", 16)) return "private"
  if (inV4(a, "100.64.0.0", 10)) return "private"
  const reserved: ReadonlyArray<readonly [string, number]> = [
    ["192.0.0.0", 24], // IETF protocol assignments (Oracle's metadata 192.0.0.192 among them)
    ["192.0.2.0", 24],
    ["198.51.100.0", 24],
    ["203.0.113.0", 24],
    ["192.88.99.0", 24], // the retired 6to4 relay anycast
    ["198.18.0.0", 15],
    ["224.0.0.0", 4], // multicast
    ["240.0.0.0", 4] // future use and the broadcast address
  ]
  return reserved.some(([base, bits]) => inV4(a, base, bits)) ? "reserved" : "public"
}

/** The eight 16-bit groups of an IPv6 address (a zone id dropped, a dotted IPv4 tail converted). */
const groupsOf = (text: string): ReadonlyArray<number> => {
  let s = text.split("%")[0]!.toLowerCase()
  const tail = s.slice(s.lastIndexOf(":") + 1)
  if (tail.includes(".")) {
    const n = v4(tail)
    s = `${s.slice(0, s.length - tail.length)}${(n >>> 16).toString(16)}:${(n & 0xffff).toString(16)}`
  }
  const [head, rest] = s.split("::") as [string, string | undefined]
  const part = (p: string | undefined) => (p === undefined || p === "" ? [] : p.split(":").map((g) => parseInt(g, 16)))
  const left = part(head)
  const right = part(rest)
  return [...left, ...Array<number>(8 - left.length - right.length).fill(0), ...right]
}

const embeddedV4 = (high: number, low: number) => classifyV4(((high << 16) | low) >>> 0)

const classifyV6 = (g: ReadonlyArray<number>): AddressClass => {
  const zeroUpTo = (n: number) => g.slice(0, n).every((x) => x === 0)
  if (zeroUpTo(8)) return "unspecified"
  if (zeroUpTo(7) && g[7] === 1) return "loopback"
  // IPv4-mapped (::ffff:a.b.c.d) and the deprecated IPv4-compatible (::a.b.c.d) reach the IPv4 address
  if (zeroUpTo(5) && g[5] === 0xffff) return embeddedV4(g[6]!, g[7]!)
  if (zeroUpTo(6)) return embeddedV4(g[6]!, g[7]!)
  // NAT64 (64:ff9b::/96) reaches the embedded IPv4 address; its local-use prefix (64:ff9b:1::/48) stays inside
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) return embeddedV4(g[6]!, g[7]!)
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 1) return "private"
  // 6to4 (2002::/16) carries an IPv4 address in its next 32 bits
  if (g[0] === 0x2002) return embeddedV4(g[1]!, g[2]!)
  if (g[0] === 0xfd00 && g[1] === 0x0ec2 && g.slice(2, 7).every((x) => x === 0) && g[7] === 0x254) return "metadata"
  if ((g[0]! & 0xfe00) === 0xfc00) return "private"
  if ((g[0]! & 0xffc0) === 0xfe80) return "link_local"
  if ((g[0]! & 0xffc0) === 0xfec0) return "private"
  if ((g[0]! & 0xff00) === 0xff00) return "reserved"
  // documentation (2001:db8::/32), IETF protocol assignments with Teredo (2001::/23), discard (100::/64)
  if (g[0] === 0x2001 && (g[1] === 0x0db8 || g[1]! < 0x0200)) return "reserved"
  // global unicast is 2000::/3; everything else is unassigned or special
  return (g[0]! & 0xe000) === 0x2000 ? "public" : "reserved"
}

/** The class of an IP address (IPv4, or IPv6 in any notation, brackets allowed); anything else is `reserved`. */
export const classifyAddress = (address: string): AddressClass => {
  const bare = address.startsWith("[") && address.endsWith("]") ? address.slice(1, -1) : address
  if (isIPv4(bare)) return classifyV4(v4(bare))
  if (isIPv6(bare)) return classifyV6(groupsOf(bare))
  return "reserved"
}

/** Whether an output may be fetched from an address of this class (`privateAllowed`: an OUTPUT_PRIVATE_HOSTS host). */
export const fetchableFrom = (cls: AddressClass, privateAllowed: boolean): boolean =>
  cls === "public" || (privateAllowed && (cls === "loopback" || cls === "private"))
