import * as net from "node:net"

/**
 * A TCP proxy in front of a real service, to cut it off from a runner and bring it back ("PostgreSQL
 * stopped / restarted", `pause`) or to make the link silent ("a firewall or NAT that forgot the connections",
 * `blackhole`) without touching the service other test files share.
 */
export const startTcpProxy = async (targetPort: number, targetHost = "127.0.0.1") => {
  let mode: "open" | "paused" | "blackhole" = "open"
  let refused = 0
  const sockets = new Set<net.Socket>()
  /** Forwarded connections: each client socket with its upstream. */
  const live = new Map<net.Socket, net.Socket>()
  /** Connections the blackhole swallowed: each client socket with its upstream, if it had one. */
  const lost = new Map<net.Socket, net.Socket | undefined>()
  const swallow = (client: net.Socket, upstream: net.Socket | undefined) => {
    live.delete(client)
    client.unpipe()
    upstream?.unpipe()
    // flowing with no reader: whatever either side sends from now on is dropped
    client.resume()
    upstream?.resume()
    lost.set(client, upstream)
  }
  const server = net.createServer((client) => {
    if (mode === "paused") {
      refused++
      return client.destroy()
    }
    sockets.add(client)
    if (mode === "blackhole") {
      // accepted, and nothing is ever forwarded: a handshake that never gets an answer
      const forget = () => {
        sockets.delete(client)
        lost.delete(client)
        client.destroy()
      }
      client.on("error", forget).on("close", forget)
      return swallow(client, undefined)
    }
    const upstream = net.connect(targetPort, targetHost)
    sockets.add(upstream)
    live.set(client, upstream)
    const closeBoth = () => {
      live.delete(client)
      lost.delete(client)
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    // while the link is silent, a swallowed connection's ends close alone: neither hears of the other
    const closeAlone = (socket: net.Socket) => () => {
      if (!lost.has(client) || mode !== "blackhole") return closeBoth()
      sockets.delete(socket)
      socket.destroy()
    }
    client.on("error", closeAlone(client)).on("close", closeAlone(client))
    upstream.on("error", closeAlone(upstream)).on("close", closeAlone(upstream))
    client.pipe(upstream).pipe(client)
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    port: (server.address() as net.AddressInfo).port,
    /** Drops every open connection and refuses new ones. */
    pause: () => {
      mode = "paused"
      for (const s of sockets) s.destroy()
      sockets.clear()
      live.clear()
      lost.clear()
    },
    /**
     * The link goes silent: open connections stay open but no byte flows either way, ever again (what is sent is
     * lost, as through a NAT that forgot them); new connections are accepted and hear nothing. Nobody is told.
     */
    blackhole: () => {
      mode = "blackhole"
      for (const [client, upstream] of [...live]) swallow(client, upstream)
    },
    /** Connections refused while paused: a client that noticed the outage and tried to come back. */
    refused: () => refused,
    /**
     * Ends a pause or a blackhole: new connections are forwarded again. Swallowed connections stay silent, but a
     * close reaches the other end again: a side whose peer has gone learns it (its next packet meets a reset), and
     * a side that closes from now on is heard.
     */
    resume: () => {
      mode = "open"
      for (const [client, upstream] of [...lost]) {
        if (!client.destroyed && upstream?.destroyed !== true) continue
        lost.delete(client)
        client.destroy()
        upstream?.destroy()
        sockets.delete(client)
        if (upstream !== undefined) sockets.delete(upstream)
      }
    },
    close: () => {
      for (const upstream of lost.values()) upstream?.destroy()
      for (const client of lost.keys()) client.destroy()
      lost.clear()
      return new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}
