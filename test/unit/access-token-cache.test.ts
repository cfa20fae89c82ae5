import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either, Metric, TestClock } from "effect"
import { TokenSigner } from "../../src/http/Auth.js"
import type { TenantId, UserId } from "../../src/schema/ids.js"

/** The runner's count of accepted access tokens with `cache`, from the registry (as /metrics reads it). */
const accepted = (cache: "hit" | "miss") =>
  Effect.map(Metric.snapshot, (pairs) => {
    const pair = pairs.find((p) =>
      p.metricKey.name === "auth_access_tokens_accepted" &&
      p.metricKey.tags.some((t) => t.key === "cache" && t.value === cache)
    )
    return pair === undefined ? 0 : Number((pair.metricState as unknown as { count: number }).count)
  })

describe("verified access tokens (TokenSigner.verify)", () => {
  it.effect("the same token is verified once, then taken from the cache until it expires; any other string is checked", () =>
    Effect.gen(function*() {
      const signer = yield* TokenSigner
      const token = yield* signer.sign({
        tenant_id: crypto.randomUUID() as TenantId,
        sub: crypto.randomUUID() as UserId,
        projects: "*"
      }, 60)
      const [hits, misses] = [yield* accepted("hit"), yield* accepted("miss")]
      const first = yield* signer.verify(token)
      const again = yield* signer.verify(token)
      expect(again).toEqual(first)
      expect((yield* accepted("miss")) - misses).toBe(1)
      expect((yield* accepted("hit")) - hits).toBe(1)

      // one character of the signature changed: not the cached string, so checked, and refused
      const last = token.at(-2) === "A" ? "B" : "A"
      const forged = token.slice(0, -2) + last + token.at(-1)
      expect(Either.isLeft(yield* Effect.either(signer.verify(forged)))).toBe(true)

      // past its expiry (60 s) and the clock skew (AUTH_CLOCK_SKEW, 30 s): refused, though verified before
      yield* TestClock.adjust(Duration.seconds(60 + 30 + 1))
      const late = yield* Effect.either(signer.verify(token))
      expect(Either.isLeft(late) && late.left._tag).toBe("Unauthorized")
    }).pipe(Effect.provide(TokenSigner.Default)))
})
