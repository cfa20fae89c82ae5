/** scripts/runBuilt.mjs: a TypeScript program of ours bundled as plain JavaScript (see there). */
export declare const bundle: (entry: string) => Promise<string>
