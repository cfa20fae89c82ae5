const ascii = (s: string) => new TextEncoder().encode(s)

const concat = (parts: ReadonlyArray<Uint8Array>, offset = 0): Uint8Array => {
  const out = new Uint8Array(offset + parts.reduce((n, p) => n + p.length, 0))
  let at = offset
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}

const box = (type: string, ...parts: ReadonlyArray<Uint8Array>): Uint8Array => {
  const out = concat(parts, 8)
  new DataView(out.buffer).setUint32(0, out.length)
  out.set(ascii(type), 4)
  return out
}

const u32s = (...values: ReadonlyArray<number>): Uint8Array => {
  const out = new Uint8Array(values.length * 4)
  const view = new DataView(out.buffer)
  values.forEach((v, i) => view.setUint32(i * 4, v))
  return out
}

/**
 * A small MP4 that is structurally valid (ftyp, moov with a version-0 mvhd, mdat of `payloadBytes` filler bytes)
 * for the simulator to serve as a provider's output. It has no tracks, so no player would show anything: it
 * exercises the download and structure checks, not decoding.
 */
export const sampleMp4 = (durationSeconds: number, payloadBytes = 4096): Uint8Array => {
  const ftyp = box("ftyp", ascii("isom"), u32s(512), ascii("isomiso2mp41"))
  // mvhd v0 (108 bytes): version+flags, creation, modification, timescale, duration, rate 1.0, volume 1.0,
  // 10 reserved bytes, identity matrix, 6 pre_defined, next_track_ID
  const mvhd = box(
    "mvhd",
    u32s(0, 0, 0, 1000, Math.round(durationSeconds * 1000), 0x00010000),
    new Uint8Array([0x01, 0x00]),
    new Uint8Array(10),
    u32s(0x00010000, 0, 0, 0, 0x00010000, 0, 0, 0, 0x40000000),
    new Uint8Array(24),
    u32s(1)
  )
  const payload = new Uint8Array(payloadBytes)
  for (let i = 0; i < payload.length; i++) payload[i] = (i * 31 + 7) & 0xff
  return concat([ftyp, box("moov", mvhd), box("mdat", payload)])
}
