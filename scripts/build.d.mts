/** scripts/build.mjs: the runner as plain JavaScript in dist/ (see there). */
export declare const buildDist: () => Promise<{ readonly files: number; readonly ms: number }>
export declare const RUNNER_PROGRAM: string
