// What the package's tests share: a redis-server, the edgelimit gateway and `wrangler dev`, each
// started by the test on a free loopback port and stopped after, and the packed tarball installed
// where the example Worker imports it.
//
// Needs what scripts/test installs: redis-server (apt), the gateway binary (`cargo build -p
// edgelimit-gateway`, or EDGELIMIT_GATEWAY_BIN), wrangler (the root package.json) and the tarball
// scripts/build-js writes to target/npm/.

import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createServer, connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The checkout's root. */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
/** The package's folder. */
export const JS = join(ROOT, "js");
/** The token every gateway here accepts. */
export const TOKEN = "edgelimit-js-tests";

/** Whether a child process has not ended (by exiting or by a signal). */
const running = (child) => child.exitCode === null && child.signalCode === null;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Ports this process handed out: never handed out twice. */
const handedOut = new Set();

/** Whether `port` can be bound on 127.0.0.1 right now (bound and released at once). */
function bindable(port) {
  return new Promise((resolveBindable) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolveBindable(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolveBindable(true)));
  });
}

/**
 * A port nothing listens on right now, as the Rust test kit picks them (tests/support/src/net.rs):
 * below the system's ephemeral range (32768 and up), where no client connection's local port and
 * no port-0 server lands, and never handed out twice by this process. Another process naming the
 * same port at the same moment is what the launchers' retry on a taken port is for.
 */
export async function freePort() {
  for (let tries = 0; tries < 10_000; tries++) {
    const port = 10_000 + Math.floor(Math.random() * 22_768);
    if (handedOut.has(port)) continue;
    // Reserved before the check, so calls running at once never pick the same port.
    handedOut.add(port);
    if (await bindable(port)) return port;
  }
  throw new Error("no free loopback port below the ephemeral range");
}

/** Whether a server's output says its address was in use. */
const portTaken = (output) => /Address already in use|EADDRINUSE/.test(output);

/** Sends one RESP command as an inline command and resolves to the first reply line. */
function ping(port) {
  return new Promise((resolveReply) => {
    const socket = connect({ port, host: "127.0.0.1" });
    let data = "";
    const done = (value) => {
      socket.destroy();
      resolveReply(value);
    };
    socket.setTimeout(1000, () => done(null));
    socket.on("error", () => done(null));
    socket.on("connect", () => socket.write("PING\r\n"));
    socket.on("data", (chunk) => {
      data += chunk;
      if (data.includes("\r\n")) done(data.split("\r\n")[0]);
    });
  });
}

/** A redis-server on a free port, persisting nothing; `stop()` kills it (a crash, not a shutdown). */
export async function startRedis() {
  let lastError = "";
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), "edgelimit-js-redis-"));
    const child = spawn(
      "redis-server",
      ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    let output = "";
    child.stdout.on("data", (c) => (output += c));
    child.stderr.on("data", (c) => (output += c));
    const started = Date.now();
    while (Date.now() - started < 20_000 && running(child)) {
      if ((await ping(port)) === "+PONG") {
        const stop = async () => {
          if (running(child)) {
            const exited = new Promise((r) => child.once("exit", r));
            child.kill("SIGKILL");
            await exited;
          }
          rmSync(dir, { recursive: true, force: true });
        };
        const cli = (...args) =>
          execFileSync("redis-cli", ["-p", String(port), ...args], { encoding: "utf8" }).trim();
        return { port, url: `redis://127.0.0.1:${port}/`, stop, cli };
      }
      await sleep(50);
    }
    child.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
    lastError = output;
  }
  throw new Error(`redis-server did not start (is it installed? scripts/test installs it):\n${lastError}`);
}

/** The gateway binary: EDGELIMIT_GATEWAY_BIN, else the debug build in target/. */
function gatewayBinary() {
  const bin = process.env.EDGELIMIT_GATEWAY_BIN ?? join(ROOT, "target/debug/gateway");
  if (!existsSync(bin)) {
    throw new Error(`${bin} is missing: run \`cargo build -p edgelimit-gateway\` (scripts/test.d/js.sh does)`);
  }
  return bin;
}

/**
 * The edgelimit gateway in front of `redis` on a free port, its `/metrics` on; `url` is what a
 * client is given, `metrics()` the counters it keeps, `stop()` ends it.
 */
export async function startGateway(redis) {
  const child = spawn(
    gatewayBinary(),
    ["--listen", "127.0.0.1:0", "--redis-url", redis.url, "--token", TOKEN, "--metrics", "--log", "warn"],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  let output = "";
  const url = await new Promise((resolveUrl, reject) => {
    const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${output}`)), 30_000);
    const read = (chunk) => {
      output += chunk;
      const found = output.match(/listening on (http:\/\/127\.0\.0\.1:\d+)/);
      if (found) {
        clearTimeout(timer);
        resolveUrl(found[1]);
      }
    };
    child.stdout.on("data", read);
    child.stderr.on("data", read);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`the gateway exited (${code}):\n${output}`));
    });
  });
  child.removeAllListeners("exit");
  // SIGTERM, then SIGKILL if it is still draining connections after a few seconds.
  const stop = async () => {
    if (!running(child)) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 3_000);
    await exited;
    clearTimeout(timer);
  };
  return { url, stop, metrics: () => scrapeMetrics(url) };
}

/**
 * The gateway's counters that count a client's cost: `/pipeline` requests and each command Redis
 * answered, from its Prometheus page.
 */
export async function scrapeMetrics(url) {
  const page = await (await fetch(`${url}/metrics`, { headers: { Authorization: `Bearer ${TOKEN}` } })).text();
  const sum = (pattern) =>
    page
      .split("\n")
      .filter((line) => pattern.test(line))
      .reduce((total, line) => total + Number(line.trim().split(/\s+/).pop()), 0);
  const commands = {};
  for (const line of page.split("\n")) {
    const found = line.match(/^edgelimit_gateway_commands_total\{command="([^"]+)"\}\s+(\S+)/);
    if (found) commands[found[1]] = Number(found[2]);
  }
  return {
    // Every route a client's command can take (`/metrics` itself is not one).
    requests: sum(/^edgelimit_gateway_http_requests_total\{.*route="(single|pipeline|multi_exec|path)"/),
    pipelines: sum(/^edgelimit_gateway_http_requests_total\{.*route="pipeline"/),
    commands: Object.values(commands).reduce((a, b) => a + b, 0),
    byCommand: commands,
  };
}

/** The tarball scripts/build-js wrote. */
export function tarball() {
  const dir = join(ROOT, "target/npm");
  const found = existsSync(dir) ? readdirSync(dir).filter((f) => /^edgelimit-\d.*\.tgz$/.test(f)) : [];
  if (found.length === 0) throw new Error(`no edgelimit-*.tgz in ${dir}: run scripts/build-js`);
  return join(dir, found.sort().pop());
}

/**
 * Installs the packed tarball as `node_modules/edgelimit` under `project` — unpacked as npm
 * unpacks it (the package has no dependencies), then moved into place in one rename, so tests
 * running at once never see half a package.
 */
export function installTarball(project) {
  const modules = join(project, "node_modules");
  mkdirSync(modules, { recursive: true });
  const staging = mkdtempSync(join(modules, ".edgelimit-"));
  execFileSync("tar", ["-xzf", tarball(), "-C", staging]);
  const target = join(modules, "edgelimit");
  const old = `${target}.old-${process.pid}-${Date.now()}`;
  if (existsSync(target)) renameSync(target, old);
  renameSync(join(staging, "package"), target);
  rmSync(staging, { recursive: true, force: true });
  rmSync(old, { recursive: true, force: true });
  return target;
}

/**
 * `wrangler dev` on `config` (a wrangler.toml) on a free port with `vars` (through an env file,
 * so they override the file's), in its own process group; `stop()` ends the group.
 */
export async function startWrangler(config, vars) {
  // A fresh port when wrangler finds its port taken; any other failure ends at once.
  let taken = [];
  for (let attempt = 0; attempt < 8; attempt++) {
    try {
      return await startWranglerOn(await freePort(), config, vars);
    } catch (e) {
      if (!e.portTaken) throw e;
      taken.push(e.message);
    }
  }
  throw new Error(`wrangler dev found its port taken 8 times in a row:\n${taken.join("\n")}`);
}

/** `wrangler dev` on `port`; an error with `portTaken` set when it exited for want of it. */
async function startWranglerOn(port, config, vars) {
  const dir = mkdtempSync(join(tmpdir(), "edgelimit-js-wrangler-"));
  const envFile = join(dir, "vars.env");
  writeFileSync(
    envFile,
    Object.entries(vars)
      .map(([k, v]) => `${k}='${v}'`)
      .join("\n") + "\n",
  );
  const bin = join(ROOT, "node_modules/.bin");
  const child = spawn(
    join(bin, "wrangler"),
    [
      "dev", "--config", config, "--env-file", envFile, "--ip", "127.0.0.1", "--port", String(port),
      "--inspector-port", "0", "--show-interactive-dev-session=false", "--log-level", "log",
      "--persist-to", join(dir, "state"),
    ],
    {
      cwd: dir,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        ...process.env,
        PATH: `${bin}:${process.env.PATH}`,
        WRANGLER_SEND_METRICS: "false",
        WRANGLER_SEND_ERROR_REPORTS: "false",
        CLOUDFLARE_CF_FETCH_ENABLED: "false",
        DO_NOT_TRACK: "1",
        XDG_CONFIG_HOME: join(dir, "xdg"),
        CI: "true",
      },
    },
  );
  let logs = "";
  child.stdout.on("data", (c) => (logs += c));
  child.stderr.on("data", (c) => (logs += c));
  const stop = async () => {
    if (running(child)) {
      try {
        process.kill(-child.pid, "SIGTERM");
      } catch {}
      const exited = await Promise.race([new Promise((r) => child.once("exit", () => r(true))), sleep(5000)]);
      if (!exited) {
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {}
      }
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const started = Date.now();
  while (Date.now() - started < 90_000) {
    if (!running(child)) {
      await stop();
      const error = new Error(`wrangler dev exited (${child.exitCode}):\n${logs}`);
      error.portTaken = portTaken(logs);
      throw error;
    }
    if (logs.includes("Ready on")) {
      try {
        await fetch(`http://127.0.0.1:${port}/`);
        return { url: `http://127.0.0.1:${port}`, stop, logs: () => logs, pid: child.pid };
      } catch {}
    }
    await sleep(100);
  }
  await stop();
  throw new Error(`wrangler dev did not answer within 90 s:\n${logs}`);
}
