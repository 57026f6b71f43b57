"use strict";
// The client over a real three-node cluster: failover when a node dies,
// topology from RL.CLUSTER NODES, a refused port decided at once.
const test = require("node:test");
const assert = require("node:assert");
const { pkg, freePort, startSluice, startCluster, until, median, binary } = require("./helpers.js");

const uniq = (p) => `${p}:${Math.random().toString(16).slice(2, 10)}`;
// A generous deadline: the machine may be loaded; what is asserted is that
// no call is decided by the failure policy, not how fast the server answers.
const TIMEOUT = 2000;

async function decideMany(c, n, lim = { rate: 1000000, per: "hour" }) {
  const sources = [];
  for (let i = 0; i < n; i++) {
    const d = await c.acquire(uniq("k"), lim);
    sources.push(d.source);
    assert.ok(d.allowed, `call ${i}: ${JSON.stringify(d)}`);
  }
  return sources;
}

test("three nodes, one killed: a client given all three keeps deciding", async (t) => {
  const nodes = await startCluster(t);
  if (!nodes) return;
  const c = new pkg.Client({ nodes: nodes.map((n) => n.addr), timeout: TIMEOUT, failure: "closed", breakerFailures: 1 });
  t.after(() => c.close());
  assert.deepStrictEqual(await decideMany(c, 20), Array(20).fill("server"));
  const cur = c.nodes.find((n) => n.current);
  assert.ok(cur, `a current node among ${JSON.stringify(c.nodes)}`);
  const victim = nodes.find((n) => n.addr === cur.addr);
  // Calls in flight while the node is killed: those it had been sent are
  // sent again to another node within their deadline, and those after go
  // elsewhere. None is decided by the failure policy (failure "closed"
  // would refuse it), and the breaker, which one failed call would open,
  // stays closed.
  const sources = [];
  let killed = false, after = 0;
  const worker = async () => {
    while (!killed || after < 200) {
      const d = await c.acquire(uniq("k"), { rate: 1000000, per: "hour" });
      sources.push(d.source);
      if (killed) after++;
      if (d.source !== "server") break;
    }
  };
  const workers = Array.from({ length: 8 }, worker);
  await until(() => sources.length >= 100, 30000, "the workers did not start");
  await victim.kill();
  killed = true;
  await Promise.all(workers);
  const other = sources.filter((x) => x !== "server");
  assert.deepStrictEqual(other, [], `${other.length} of ${sources.length} calls not decided by a server`);
  assert.strictEqual(c.breaker.state, "closed");
  assert.deepStrictEqual(await decideMany(c, 20), Array(20).fill("server"));
  const now = c.nodes.find((n) => n.current);
  assert.ok(now && now.addr !== victim.addr, `calls moved off ${victim.addr}: ${JSON.stringify(c.nodes)}`);
});

test("given one node, the client learns the others from RL.CLUSTER NODES and fails over to them", async (t) => {
  const nodes = await startCluster(t);
  if (!nodes) return;
  // By name: localhost is not the 127.0.0.1 the members advertise, and is kept once.
  const c = new pkg.Client({ nodes: [`localhost:${nodes[0].resp}`], timeout: TIMEOUT, failure: "closed", breakerFailures: 1 });
  t.after(() => c.close());
  assert.strictEqual((await c.acquire(uniq("k"), { rate: 10 })).source, "server");
  await until(() => {
    const ns = c.nodes;
    return ns.length === 3 && ns.every((n) => n.state === "ready" && n.id) && new Set(ns.map((n) => n.id)).size === 3;
  }, 20000, "the client did not learn the three nodes");
  const learnt = c.nodes;
  assert.deepStrictEqual(learnt.map((n) => n.id).sort(), ["n1", "n2", "n3"]);
  assert.deepStrictEqual(learnt.filter((n) => !n.seed).map((n) => n.addr).sort(), [nodes[1].addr, nodes[2].addr].sort());
  await nodes[0].kill(); // the only node it was given
  assert.deepStrictEqual(await decideMany(c, 30), Array(30).fill("server"));
  assert.strictEqual(c.breaker.state, "closed");
});

test("a DNS name: dns:NAME:PORT connects to its addresses", async (t) => {
  const s = await startSluice(t);
  if (!s) return;
  const c = new pkg.Client({ nodes: `dns:localhost:${s.resp}`, timeout: TIMEOUT, failure: "closed", breakerFailures: 100 });
  t.after(() => c.close());
  const d = await c.acquire(uniq("k"), { rate: 10 });
  assert.strictEqual(d.source, "server");
  assert.ok(c.nodes.some((n) => n.addr === `127.0.0.1:${s.resp}`), JSON.stringify(c.nodes));
});

test("a refused connection is decided within 5 ms (median of 20), alone or among nodes", async (t) => {
  if (!binary(t)) return;
  const live = await startSluice(t);
  const ports = [await freePort(), await freePort(), await freePort()];
  const measure = async (opts, want) => {
    const times = [];
    for (let i = 0; i < 21; i++) {
      const c = new pkg.Client({ timeout: 1000, failure: "closed", ...opts });
      try {
        const t0 = performance.now();
        const d = await c.acquire("k", { rate: 10 });
        times.push(performance.now() - t0);
        assert.strictEqual(d.source, want, JSON.stringify(d));
      } finally { await c.close(); }
    }
    return times.slice(1); // the first also compiles the path
  };
  const one = await measure({ port: ports[0] }, "fail_closed");
  const three = await measure({ nodes: ports.map((p) => `127.0.0.1:${p}`) }, "fail_closed");
  // A refused node first: the call moves on to the live one, within the same call.
  const over = await measure({ nodes: [`127.0.0.1:${ports[0]}`, `127.0.0.1:${live.resp}`] }, "server");
  t.diagnostic(`median ms: one refused ${median(one).toFixed(2)}, three refused ${median(three).toFixed(2)}, refused then live ${median(over).toFixed(2)}`);
  assert.ok(median(one) < 5, `one refused port: median ${median(one).toFixed(2)} ms of ${one.map((x) => x.toFixed(1))}`);
  // Each node is asked in turn, its refusal known as fast as one alone: 5 ms each.
  assert.ok(median(three) < 15, `three refused ports: median ${median(three).toFixed(2)} ms of ${three.map((x) => x.toFixed(1))}`);
  // Not timed tightly: the live node's answer is on a loaded machine's clock.
  assert.ok(median(over) < TIMEOUT);
});

test("bad nodes are refused with the option named", () => {
  assert.throws(() => new pkg.Client({ nodes: [] }), /nodes must be a non-empty array/);
  assert.throws(() => new pkg.Client({ nodes: ["127.0.0.1:99999"] }), /nodes\[0\]: port must be an integer from 1 to 65535/);
  assert.throws(() => new pkg.Client({ nodes: ["h:1", ":2"] }), /nodes\[1\]: expected "host:port"/);
  assert.throws(() => new pkg.Client({ nodes: "dns:name:0" }), /dns:NAME:PORT.*port must be an integer from 1 to 65535/);
  assert.throws(() => new pkg.Client({ nodes: ["h:1"], host: "h" }), /nodes or host, not both/);
  assert.throws(() => new pkg.Client({ nodes: ["h:1"], refreshInterval: -1 }), /refreshInterval must be whole milliseconds/);
});
