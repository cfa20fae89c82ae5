/** The kit's builders (src/testing/builders.ts): the project's tests build tasks and observations as users do. */
export { admitTask, observation, uuid } from "../../src/testing/builders.js"
