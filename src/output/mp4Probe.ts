import { Either } from "effect"

export interface Mp4Info {
  readonly majorBrand: string
  /** From `moov/mvhd`; null when moov lies beyond the probed prefix or the header says "unknown". */
  readonly durationSeconds: number | null
  readonly topLevelBoxes: ReadonlyArray<string>
}

interface Box {
  readonly type: string
  readonly start: number
  readonly contentStart: number
  readonly end: number
}

const fourcc = (bytes: Uint8Array, at: number) => String.fromCharCode(...bytes.subarray(at, at + 4))

/**
 * Reads the box header at `offset`. `limit` is where the enclosing space ends (the file's size at top level),
 * `available` how much of it is in the buffer. Returns null when the header itself lies beyond the buffer.
 */
const readBox = (
  view: DataView,
  bytes: Uint8Array,
  offset: number,
  limit: number,
  available: number
): Either.Either<Box | null, string> => {
  if (offset + 8 > limit) return Either.left(`${limit - offset} trailing bytes at offset ${offset}, too few for a box`)
  if (offset + 8 > available) return Either.right(null)
  const size32 = view.getUint32(offset)
  const type = fourcc(bytes, offset + 4)
  let size: number
  let header = 8
  if (size32 === 1) {
    if (offset + 16 > limit) return Either.left(`box ${JSON.stringify(type)} at offset ${offset} cut off in its header`)
    if (offset + 16 > available) return Either.right(null)
    const large = view.getBigUint64(offset + 8)
    if (large > BigInt(Number.MAX_SAFE_INTEGER)) return Either.left(`box ${JSON.stringify(type)} is impossibly large`)
    size = Number(large)
    header = 16
  } else {
    size = size32 === 0 ? limit - offset : size32
  }
  if (size < header) return Either.left(`box ${JSON.stringify(type)} at offset ${offset} has invalid size ${size}`)
  if (offset + size > limit) {
    return Either.left(
      `box ${JSON.stringify(type)} at offset ${offset} overruns its container (${size} bytes, ${limit - offset} left)`
    )
  }
  return Either.right({ type, start: offset, contentStart: offset + header, end: offset + size })
}

const mvhdDuration = (view: DataView, box: Box): Either.Either<number | null, string> => {
  if (box.end - box.contentStart < 4) return Either.left("mvhd box too short")
  const version = view.getUint8(box.contentStart)
  const fields = box.contentStart + 4 // version and flags
  const needed = version === 1 ? 28 : 16 // creation, modification, timescale, duration
  if (version > 1) return Either.left(`unsupported mvhd version ${version}`)
  if (fields + needed > box.end) return Either.left("mvhd box too short")
  const timescale = view.getUint32(fields + (version === 1 ? 16 : 8))
  const duration = version === 1 ? view.getBigUint64(fields + 20) : BigInt(view.getUint32(fields + 12))
  const unknown = version === 1 ? 0xffffffffffffffffn : 0xffffffffn
  return Either.right(timescale === 0 || duration === unknown ? null : Number(duration) / timescale)
}

/**
 * Checks the ISO BMFF (MP4) *structure* of a file or of a prefix of it: the first box is `ftyp`, every top-level
 * box size is consistent (32-bit size, 1 = 64-bit largesize, 0 = to end of file) and fits the file, a `moov` box
 * is present, and `moov/mvhd` gives the duration when moov lies inside the buffer. It does not decode anything:
 * passing proves the container is well formed, not that the video plays.
 *
 * `totalBytes` is the file's real size when `bytes` is only its first part; the last box seen may then extend past
 * the buffer. A file whose moov comes after a large mdat (not "faststart") has no moov in a short prefix and is
 * rejected with a reason saying so: probe a longer prefix or the whole file for those.
 */
export const probeMp4 = (bytes: Uint8Array, totalBytes: number = bytes.length): Either.Either<Mp4Info, string> => {
  if (bytes.length === 0) return Either.left("not an MP4: empty")
  if (totalBytes < bytes.length) return Either.left(`totalBytes ${totalBytes} is less than the ${bytes.length} given`)
  if (bytes.length >= 8 && fourcc(bytes, 4) !== "ftyp") {
    return Either.left(`not an MP4: first box is ${JSON.stringify(fourcc(bytes, 4))}`)
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)
  const boxes: Array<Box> = []
  let offset = 0
  let stoppedAt: number | null = null
  while (offset < totalBytes) {
    const next = readBox(view, bytes, offset, totalBytes, bytes.length)
    if (Either.isLeft(next)) {
      return Either.left(boxes.length === 0 ? `not an MP4: ${next.left}` : next.left)
    }
    if (next.right === null) {
      stoppedAt = offset
      break
    }
    const box = next.right
    boxes.push(box)
    if (box.end > bytes.length) {
      stoppedAt = box.end
      break
    }
    offset = box.end
  }
  if (boxes.length === 0) return Either.left("not an MP4: no complete box header in the data")

  const ftyp = boxes[0]!
  if (ftyp.end - ftyp.contentStart < 8 || ftyp.contentStart + 4 > bytes.length) {
    return Either.left("ftyp box too short for a major brand")
  }
  const majorBrand = fourcc(bytes, ftyp.contentStart)
  const topLevelBoxes = boxes.map((b) => b.type)

  const moov = boxes.find((b) => b.type === "moov")
  if (moov === undefined) {
    return Either.left(
      stoppedAt === null
        ? "no moov box"
        : `no moov box in the first ${bytes.length} of ${totalBytes} bytes (probed up to ${stoppedAt}): ` +
          "the file may not be faststart"
    )
  }
  if (moov.end > bytes.length) return Either.right({ majorBrand, durationSeconds: null, topLevelBoxes })

  for (let child = moov.contentStart; child < moov.end;) {
    const next = readBox(view, bytes, child, moov.end, moov.end)
    if (Either.isLeft(next)) return Either.left(`in moov: ${next.left}`)
    const box = next.right!
    if (box.type === "mvhd") {
      return Either.map(mvhdDuration(view, box), (durationSeconds) => ({ majorBrand, durationSeconds, topLevelBoxes }))
    }
    child = box.end
  }
  return Either.left("moov box has no mvhd")
}
