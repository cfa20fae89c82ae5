// Formats (or with --check, verifies) every TypeScript file with dprint's TypeScript plugin, using the Effect
// repository's settings: 2 spaces, 120 columns, no semicolons, double quotes, no trailing commas.
import { createFromBuffer } from "@dprint/formatter"
import { getPath } from "@dprint/typescript"
import { execFileSync } from "node:child_process"
import * as fs from "node:fs"

const formatter = createFromBuffer(fs.readFileSync(getPath()))
formatter.setConfig({ lineWidth: 120, indentWidth: 2, useTabs: false, newLineKind: "lf" }, {
  semiColons: "asi",
  quoteStyle: "alwaysDouble",
  trailingCommas: "never",
  operatorPosition: "maintain",
  "arrowFunction.useParentheses": "force"
})

const check = process.argv.includes("--check")
const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "*.ts"], { encoding: "utf8" })
  .split("\n")
  .filter((f) => f.length > 0 && fs.existsSync(f))
const unformatted = []
for (const file of files) {
  const text = fs.readFileSync(file, "utf8")
  const formatted = formatter.formatText({ filePath: file, fileText: text })
  if (formatted !== text) {
    unformatted.push(file)
    if (!check) fs.writeFileSync(file, formatted)
  }
}
if (check && unformatted.length > 0) {
  console.error(`not formatted (run npm run format):\n  ${unformatted.join("\n  ")}`)
  process.exit(1)
}
console.log(check ? `${files.length} files formatted` : `formatted ${unformatted.length} of ${files.length} files`)
