/**
 * A repeated signal. runMain listens for the first one only; with no listener left, Node's default action would end
 * the process on the next. But a terminal's Ctrl-C reaches a program twice under npm (from the terminal to the whole
 * process group, and again from npm, which forwards it), which must not cut the graceful stop short. So a repeat
 * within a second of the first is ignored; a later one ends the process at once (exit 130), for a stop that takes
 * too long, after `force` (the cluster command kills its processes with it).
 */
export const onRepeatedSignal = (force: () => void = () => undefined) => {
  let first: number | undefined
  const handle = (signal: NodeJS.Signals) => {
    const now = Date.now()
    if (first === undefined) return void (first = now)
    if (now - first < 1_000) return
    process.stderr.write(`${signal} again: exiting without finishing the graceful stop\n`)
    force()
    process.exit(130)
  }
  process.on("SIGINT", handle)
  process.on("SIGTERM", handle)
}
