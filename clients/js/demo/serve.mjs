// A static file server on 127.0.0.1 (node:http, nothing else): `npm run demo` serves the package
// and a bundle with it, so that demo/index.html can load the bundle over HTTP; the browser tests
// and the benchmark serve their pages with the same function.
//
//   node demo/serve.mjs [BUNDLE_DIR] [--port N]     (default: ROUTER_BUNDLE, else artifacts/js/bundle)
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const PACKAGE = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const TYPES = { ".html": "text/html; charset=utf-8", ".js": "text/javascript", ".mjs": "text/javascript",
  ".wasm": "application/wasm", ".json": "application/json", ".css": "text/css", ".png": "image/png" };
const BUNDLE_FILE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/**
 * Serve on 127.0.0.1: `handle(request, response, url)` first (true when it answered), then the
 * file `fileFor(urlPath)` names (a decoded path such as "/src/web.js"; null or a missing file: 404),
 * with `headers` added to every file. Resolves to the listening server (port 0: any free port, see
 * server.address().port).
 */
export function serveStatic(fileFor, { port = 0, handle = null, headers = {} } = {}) {
  const server = http.createServer((request, response) => {
    const url = new URL(request.url, "http://127.0.0.1");
    if (handle && handle(request, response, url)) return;
    let file = null;
    try {
      file = fileFor(decodeURIComponent(url.pathname));
    } catch {
      // a malformed %-escape names no file
    }
    if (request.method !== "GET" && request.method !== "HEAD") {
      response.writeHead(405).end();
      return;
    }
    let stat = null;
    try {
      stat = file && fs.statSync(file, { throwIfNoEntry: false });
    } catch {
      // a name the file system refuses (a NUL byte) is no file
    }
    if (!stat || !stat.isFile()) {
      response.writeHead(404).end();
      return;
    }
    response.writeHead(200, { ...headers, "content-type": TYPES[path.extname(file)] || "application/octet-stream",
      "content-length": stat.size, "cache-control": "no-store" });
    if (request.method === "HEAD") response.end();
    else fs.createReadStream(file).pipe(response);
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => resolve(server));
  });
}

/** A file under `root` for a URL path relative to it, or null when the path would leave it. */
export function fileUnder(root, relative) {
  const file = path.resolve(root, `.${path.posix.normalize(`/${relative}`)}`);
  return file === root || file.startsWith(root + path.sep) ? file : null;
}

/** The demo's layout: the bundle's files at /bundle/NAME, the package at / (so /demo/ is the page). */
export function demoFiles(bundleDir, packageDir = PACKAGE) {
  return (urlPath) => {
    if (urlPath === "/") return null;
    if (urlPath.startsWith("/bundle/")) {
      const name = urlPath.slice("/bundle/".length);
      return BUNDLE_FILE.test(name) ? path.join(bundleDir, name) : null;
    }
    const file = fileUnder(packageDir, urlPath);
    return file && urlPath.endsWith("/") ? path.join(file, "index.html") : file;
  };
}

/** The bundle folder to serve: an argument, ROUTER_BUNDLE, or what `make test-js` trains. */
export function defaultBundle() {
  return process.env.ROUTER_BUNDLE || path.resolve(PACKAGE, "../../artifacts/js/bundle");
}

async function main(argv) {
  let bundle = defaultBundle(), port = 8080;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--port") port = Number(argv[++i]);
    else if (argv[i] === "--help" || argv[i] === "-h") {
      console.log("usage: node demo/serve.mjs [BUNDLE_DIR] [--port N]");
      return;
    } else bundle = path.resolve(argv[i]);
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new RangeError(`--port must be 0-65535, got ${port}`);
  if (!fs.existsSync(path.join(bundle, "manifest.json"))) {
    throw new Error(`no bundle at ${bundle} (no manifest.json): pass a bundle folder, set ROUTER_BUNDLE, ` +
      "or run `make test-js` (or `make train`) from the repository root");
  }
  if (!fs.existsSync(path.join(PACKAGE, "node_modules/onnxruntime-web"))) {
    throw new Error("onnxruntime-web is not installed: run `npm ci --ignore-scripts` in clients/js");
  }
  const toDemo = (request, response, url) => url.pathname === "/" && !!response.writeHead(302, { location: "/demo/" }).end();
  const server = await serveStatic(demoFiles(bundle), { port, handle: toDemo });
  console.log(`serving ${bundle}: open http://127.0.0.1:${server.address().port}/demo/ (Ctrl-C stops)`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main(process.argv.slice(2)).catch((error) => {
    console.error(`demo: ${error.message}`);
    process.exit(1);
  });
}
