import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import * as fc from "fast-check"
import { classifyAddress, fetchableFrom } from "../../src/output/addressClass.js"
import { hostAllowed, hostPatternList, parseHostPattern } from "../../src/output/hostPatterns.js"

const v4Arb = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255))
const dotted = ([a, b, c, d]: readonly [number, number, number, number]) => `${a}.${b}.${c}.${d}`
const hex = ([a, b, c, d]: readonly [number, number, number, number]) =>
  `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`

describe("classifyAddress", () => {
  it("names every range an output must not come from", () => {
    const cases: ReadonlyArray<readonly [string, string]> = [
      ["127.0.0.1", "loopback"],
      ["127.255.0.9", "loopback"],
      ["::1", "loopback"],
      ["[::1]", "loopback"],
      ["10.0.0.1", "private"],
      ["172.16.0.1", "private"],
      ["172.31.255.255", "private"],
      ["192.168.1.1", "private"],
      ["100.64.0.1", "private"], // CGNAT
      ["100.127.255.254", "private"],
      ["fd12:3456::1", "private"], // ULA
      ["fc00::1", "private"],
      ["fec0::1", "private"], // site-local
      ["64:ff9b:1::1", "private"], // NAT64 local use
      ["169.254.1.1", "link_local"],
      ["fe80::1", "link_local"],
      ["fe80::1%eth0", "link_local"],
      ["169.254.169.254", "metadata"],
      ["fd00:ec2::254", "metadata"],
      ["100.100.100.200", "metadata"],
      ["0.0.0.0", "unspecified"],
      ["0.1.2.3", "unspecified"],
      ["::", "unspecified"],
      ["224.0.0.1", "reserved"],
      ["255.255.255.255", "reserved"],
      ["192.0.0.192", "reserved"],
      ["192.0.2.10", "reserved"],
      ["198.18.0.1", "reserved"],
      ["ff02::1", "reserved"],
      ["2001:db8::1", "reserved"],
      ["2001:0:4136:e378::1", "reserved"], // Teredo
      ["100::1", "reserved"],
      ["localhost", "reserved"], // not an address at all
      ["", "reserved"],
      ["8.8.8.8", "public"],
      ["93.184.216.34", "public"],
      ["172.32.0.1", "public"],
      ["100.128.0.1", "public"],
      ["2606:4700::1111", "public"],
      ["2a00:1450:4001::200e", "public"]
    ]
    expect(cases.map(([a]) => [a, classifyAddress(a)])).toEqual(cases)
  })

  it("sees IPv4 addresses inside IPv6 ones (mapped, compatible, NAT64, 6to4)", () => {
    expect(classifyAddress("::ffff:127.0.0.1")).toBe("loopback")
    expect(classifyAddress("::ffff:7f00:1")).toBe("loopback")
    expect(classifyAddress("::ffff:169.254.169.254")).toBe("metadata")
    expect(classifyAddress("::10.0.0.1")).toBe("private")
    expect(classifyAddress("64:ff9b::192.168.0.1")).toBe("private")
    expect(classifyAddress("2002:7f00:1::")).toBe("loopback")
    expect(classifyAddress("2002:0808:0808::1")).toBe("public")
  })

  it.prop("an IPv4 address and its IPv6-mapped forms are one class", [v4Arb], ([v4]) => {
    const cls = classifyAddress(dotted(v4))
    expect(classifyAddress(`::ffff:${dotted(v4)}`)).toBe(cls)
    expect(classifyAddress(`::ffff:${hex(v4)}`)).toBe(cls)
    expect(classifyAddress(`64:ff9b::${dotted(v4)}`)).toBe(cls)
  })

  it.prop("all of 127/8, 10/8 and 169.254/16 are refused", [v4Arb], ([[, b, c, d]]) => {
    for (const a of [`127.${b}.${c}.${d}`, `10.${b}.${c}.${d}`, `169.254.${c}.${d}`]) {
      expect(fetchableFrom(classifyAddress(a), false)).toBe(false)
    }
  })

  it("OUTPUT_PRIVATE_HOSTS opens loopback and private, never metadata, link-local, unspecified or reserved", () => {
    const classes = ["127.0.0.1", "10.0.0.1", "169.254.169.254", "169.254.1.1", "0.0.0.0", "224.0.0.1", "8.8.8.8"]
      .map(classifyAddress)
    expect(classes.map((c) => fetchableFrom(c, true))).toEqual([true, true, false, false, false, false, true])
    expect(classes.map((c) => fetchableFrom(c, false))).toEqual([false, false, false, false, false, false, true])
  })
})

describe("host patterns", () => {
  const allowed = (entries: ReadonlyArray<string>, url: string) =>
    hostAllowed(entries.map((e) => Either.getOrThrow(parseHostPattern(e))), new URL(url))

  it("a name is itself, *.name its subdomains, :port that port only", () => {
    const cases: ReadonlyArray<readonly [string, string, boolean]> = [
      ["storage.cdn-luma.com", "https://storage.cdn-luma.com/a.mp4", true],
      ["storage.cdn-luma.com", "https://STORAGE.cdn-luma.com./a.mp4", false], // the trailing dot: not the same name
      ["storage.cdn-luma.com", "https://evil.storage.cdn-luma.com/a.mp4", false],
      ["storage.cdn-luma.com", "https://storage.cdn-luma.com.evil.example/a.mp4", false],
      ["*.fal.media", "https://v3.fal.media/files/x.mp4", true],
      ["*.fal.media", "https://fal.media/files/x.mp4", false],
      ["*.fal.media", "https://evilfal.media/x.mp4", false],
      ["127.0.0.1:4010", "http://127.0.0.1:4010/_sim/output/luma/x.mp4", true],
      ["127.0.0.1:4010", "http://127.0.0.1:6379/", false],
      ["api.openai.com:443", "https://api.openai.com/v1/videos/x/content", true],
      ["api.openai.com:443", "http://api.openai.com/v1/videos/x/content", false],
      ["[::1]:4010", "http://[0:0::1]:4010/", true],
      // URLs normalize what they name: the decimal and hex spellings of 127.0.0.1 are 127.0.0.1
      ["cdn.example", "http://2130706433/", false],
      ["127.0.0.1", "http://0x7f.1/", true]
    ]
    expect(cases.map(([entry, url]) => [entry, url, allowed([entry], url)])).toEqual(cases)
  })

  it("refuses entries that are not hosts, and wildcards where only exact hosts may be", () => {
    for (const bad of ["", "https://x.example", "x.example/path", "user@x.example", "*.10.0.0.1", "x:99999", "*"]) {
      expect([bad, Either.isLeft(parseHostPattern(bad))]).toEqual([bad, true])
    }
    expect(Either.isLeft(parseHostPattern("*.example", { subdomains: false }))).toBe(true)
  })

  it.effect("as a setting: the list's default, the environment's list, or an error naming the bad entry", () =>
    Effect.gen(function*() {
      const setting = hostPatternList("X_OUTPUT_HOSTS", "test", ["a.example", "*.b.example"])
      const read = (env: Record<string, string>) =>
        Effect.either(Effect.withConfigProvider(setting.config, ConfigProvider.fromMap(new Map(Object.entries(env)))))
      expect(yield* read({})).toEqual(Either.right([
        { host: "a.example", subdomains: false, port: null },
        { host: "b.example", subdomains: true, port: null }
      ]))
      expect(yield* read({ X_OUTPUT_HOSTS: "127.0.0.1:4010, cdn.example" })).toEqual(Either.right([
        { host: "127.0.0.1", subdomains: false, port: 4010 },
        { host: "cdn.example", subdomains: false, port: null }
      ]))
      const bad = yield* read({ X_OUTPUT_HOSTS: "ok.example,https://nope" })
      expect(Either.isLeft(bad) && bad.left.toString()).toContain("X_OUTPUT_HOSTS: \"https://nope\" is not a host")
    }))
})
