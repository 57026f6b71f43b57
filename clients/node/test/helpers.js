"use strict";
// Starts the real sluice binary (SLUICE_BINARY) for the tests; without it
// they skip, unless SLUICE_REQUIRE_TOOLS is set (CI), when they fail.
// SLUICE_NODE_PACKAGE names the installed package to test (default: this folder).

const { spawn, execFileSync } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");

const pkg = require(process.env.SLUICE_NODE_PACKAGE || path.join(__dirname, ".."));

function freePort() {
  return new Promise((ok, fail) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); });
    s.on("error", fail);
  });
}

/** A port that accepts connections and never answers; close() ends it. */
async function silentPort() {
  const socks = [];
  const s = net.createServer((c) => socks.push(c));
  await new Promise((ok) => s.listen(0, "127.0.0.1", ok));
  return { port: s.address().port, close: () => { socks.forEach((c) => c.destroy()); s.close(); } };
}

/** The binary, or a skip reason (a failure under SLUICE_REQUIRE_TOOLS). */
function binary(t) {
  const b = process.env.SLUICE_BINARY;
  if (b && fs.existsSync(b)) return b;
  const why = "SLUICE_BINARY is not set to the sluice executable (go build -o /tmp/sluice ./cmd/sluice; SLUICE_BINARY=/tmp/sluice)";
  if (process.env.SLUICE_REQUIRE_TOOLS) throw new Error(why + "; SLUICE_REQUIRE_TOOLS is set");
  t.skip(why);
  return null;
}

async function startSluice(t) {
  const bin = binary(t);
  if (!bin) return null;
  const [resp, http, raft] = [await freePort(), await freePort(), await freePort()];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-node-"));
  const proc = spawn(bin, ["--resp-addr", `127.0.0.1:${resp}`, "--http-addr", `127.0.0.1:${http}`,
    "--raft-addr", `127.0.0.1:${raft}`, "--data-dir", path.join(dir, "data")], { stdio: "ignore" });
  const cli = (...args) => execFileSync("redis-cli", ["-p", String(resp), ...args.map(String)], { stdio: ["ignore", "pipe", "ignore"] }).toString().trim();
  const exited = new Promise((ok) => proc.once("exit", ok));
  // Ready, not only up: a node answers PING while it loads, and LOADING to RL.ACQUIRE.
  await until(() => ready(http), 30000, "sluice did not become ready (GET /readyz)");
  t.after(async () => {
    proc.kill();
    await exited;
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { resp, http, cli, commands: () => Number(/total_commands_processed:(\d+)/.exec(cli("INFO", "stats"))[1]) };
}

/**
 * Three nodes (n1, then n2 and n3 with --join), as docs/cluster.md grows a
 * cluster; resolves once every node lists all three as voters and knows a
 * leader. Each node: {id, resp, addr, kill()}.
 */
async function startCluster(t, size = 3) {
  const bin = binary(t);
  if (!bin) return null;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-node-cluster-"));
  const nodes = [];
  const cli = (port, ...args) => execFileSync("redis-cli", ["-p", String(port), ...args.map(String)],
    { stdio: ["ignore", "pipe", "ignore"], timeout: 5000 }).toString().trim();
  t.after(async () => {
    for (const n of nodes) await n.kill();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  for (let i = 1; i <= size; i++) {
    const [resp, http, raft] = [await freePort(), await freePort(), await freePort()];
    const args = ["--node-id", `n${i}`, "--resp-addr", `127.0.0.1:${resp}`, "--http-addr", `127.0.0.1:${http}`,
      "--raft-addr", `127.0.0.1:${raft}`, "--data-dir", path.join(dir, `n${i}`)];
    if (i > 1) args.push("--join", nodes[0].addr);
    const proc = spawn(bin, args, { stdio: "ignore" });
    const exited = new Promise((ok) => proc.once("exit", ok));
    let alive = true;
    proc.once("exit", () => { alive = false; });
    const n = { id: `n${i}`, resp, addr: `127.0.0.1:${resp}`, cli: (...a) => cli(resp, ...a),
      kill: async () => { if (alive) proc.kill("SIGKILL"); await exited; }, get alive() { return alive; } };
    nodes.push(n);
    n.http = http;
    await until(() => { try { return n.cli("PING") === "PONG"; } catch { return false; } }, 30000, `${n.id} did not start`);
  }
  await until(() => nodes.every((n) => {
    try {
      const out = n.cli("RL.CLUSTER", "NODES");
      return (out.match(/^voter$/gm) || []).length === size && /^leader$/m.test(out);
    } catch { return false; }
  }), 60000, `the ${size} nodes did not form one cluster with a leader`);
  await until(async () => (await Promise.all(nodes.map((n) => ready(n.http)))).every(Boolean), 60000, "the nodes did not become ready (GET /readyz)");
  return nodes;
}

/** Whether GET /readyz on the HTTP port answers 200. */
async function ready(port) {
  try { return (await fetch(`http://127.0.0.1:${port}/readyz`)).status === 200; } catch { return false; }
}

/** Polls cond every 20 ms until it is true; fails with why after ms. */
async function until(cond, ms, why) {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`${why} within ${ms} ms`);
    await new Promise((ok) => setTimeout(ok, 20));
  }
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

module.exports = { pkg, freePort, silentPort, startSluice, startCluster, until, median, binary };

/**
 * A web framework for the adapter tests (express, fastify, koa): from beside
 * the package under test (CI installs them with its tarball), from
 * SLUICE_NODE_MODULES, or from wherever require finds it (NODE_PATH). Missing,
 * it fails the test rather than skipping it.
 */
function framework(name) {
  const pkgDir = process.env.SLUICE_NODE_PACKAGE || path.join(__dirname, "..");
  const paths = [pkgDir];
  if (process.env.SLUICE_NODE_MODULES) paths.push(path.join(process.env.SLUICE_NODE_MODULES, "node_modules"));
  for (const p of paths) {
    try { return require(require.resolve(name, { paths: [p] })); } catch { /* next */ }
  }
  try { return require(name); } catch (e) {
    throw new Error(`${name} is not installed: the adapter tests run the real framework. Install it beside the package ` +
      `(npm install --prefix <folder> <the packed tarball> ioredis@6 express@5 fastify@5 koa@3) or into ` +
      `SLUICE_NODE_MODULES (npm install --prefix "$SLUICE_NODE_MODULES" express@5 fastify@5 koa@3)`, { cause: e });
  }
}
module.exports.framework = framework;
