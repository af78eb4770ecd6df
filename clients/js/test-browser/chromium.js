// The headless Chromium the browser tests and the benchmark drive: CHROMIUM names it, else
// Debian's /usr/bin/chromium. puppeteer-core downloads no browser, so a missing one is an error
// that says how to install it: the browser tests are never skipped.
import fs from "node:fs";
import puppeteer from "puppeteer-core";

export const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";

/** A headless Chromium from CHROMIUM (default /usr/bin/chromium); throws when there is none. */
export function launchChromium() {
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`no Chromium at ${CHROMIUM}: install Debian's (\`apt-get install --no-install-recommends chromium\`; ` +
      ".ci/run does) or set CHROMIUM to a Chromium or Chrome executable");
  }
  return puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
}
