/**
 * Timeouts on the hot paths as Node timers. `Effect.timeout` races the effect against a sleep in two forked fibers:
 * measured here, 55–65 µs of CPU around an already-resolved promise, against 6–7 µs for one `setTimeout` and
 * `clearTimeout` (a one-off script, 20,000 calls each way, two runs). A poll pays several: its breaker's two Redis
 * steps, its quota slot, the Start that wakes its entity. On any other Clock (the TestClock) each helper is the
 * plain Effect form, so tests move these timeouts as they move everything else.
 */
import { Cause, Clock, Duration, Effect, type Exit, Fiber } from "effect"

/** The live clock's `sleep` (every live Clock shares its class's): its timers are Node's own. */
const wallClockSleep = Clock.make().sleep

/** Whether `clock` is the live one, whose sleeps a Node timer may stand for. */
export const isWallClock = (clock: Clock.Clock): boolean => clock.sleep === wallClockSleep

/** Node's longest timer: a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** `ms` as a Node timer can wait it: not below 0, not beyond the longest timer. */
export const timerMs = (ms: number) => Math.max(0, Math.min(ms, MAX_TIMER_MS))

/**
 * The promise `call()` makes, failing with `onError` when it rejects (or `call` throws) and with `onTimeout` when it
 * has not settled within `timeout`. As with `Effect.tryPromise`, the promise itself runs on after a timeout or an
 * interruption (a Redis command cannot be taken back); its late outcome is dropped.
 */
export const promiseWithin = <A, E>(
  call: () => Promise<A>,
  options: {
    readonly timeout: Duration.Duration
    readonly onError: (error: unknown) => E
    readonly onTimeout: () => E
  }
): Effect.Effect<A, E> =>
  Effect.clockWith((clock) =>
    isWallClock(clock)
      ? Effect.async<A, E>((resume) => {
        let settled = false
        const settle = (outcome: Effect.Effect<A, E>) => {
          if (settled) return
          settled = true
          clearTimeout(timer)
          resume(outcome)
        }
        const timer = setTimeout(
          () => settle(Effect.fail(options.onTimeout())),
          timerMs(Duration.toMillis(options.timeout))
        )
        try {
          call().then((a) => settle(Effect.succeed(a)), (e) => settle(Effect.fail(options.onError(e))))
        } catch (e) {
          settle(Effect.fail(options.onError(e)))
        }
        return Effect.sync(() => {
          settled = true
          clearTimeout(timer)
        })
      })
      : Effect.tryPromise({ try: call, catch: options.onError }).pipe(
        Effect.timeoutFail({ duration: options.timeout, onTimeout: options.onTimeout })
      )
  )

/**
 * Waits for `fiber` at most `timeout` (then a TimeoutException); the fiber runs on either way. Unlike `Fiber.join`,
 * the waiter does not take on the fiber's FiberRefs (log annotations and the like): for a fiber forked to outlive
 * its caller, whose result is all the caller wants.
 */
export const awaitWithin = <A, E>(
  fiber: Fiber.RuntimeFiber<A, E>,
  timeout: Duration.Duration
): Effect.Effect<A, E | Cause.TimeoutException> =>
  Effect.clockWith((clock) =>
    isWallClock(clock)
      ? Effect.async<A, E | Cause.TimeoutException>((resume) => {
        const observer = (exit: Exit.Exit<A, E>) => {
          clearTimeout(timer)
          resume(exit)
        }
        const timer = setTimeout(() => {
          fiber.removeObserver(observer)
          resume(Effect.fail(new Cause.TimeoutException(`no answer within ${Duration.format(timeout)}`)))
        }, timerMs(Duration.toMillis(timeout)))
        fiber.addObserver(observer)
        return Effect.sync(() => {
          clearTimeout(timer)
          fiber.removeObserver(observer)
        })
      })
      : Effect.flatten(Effect.timeout(Fiber.await(fiber), timeout))
  )
