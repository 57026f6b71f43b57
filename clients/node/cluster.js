"use strict";
// The nodes a Client talks to: the ones it was given (a list of host:port,
// or a DNS name's addresses), then the members RL.CLUSTER NODES names.
// Every call goes to one node; a connection error sends it on to the next
// within the same deadline, so one node down costs no failure-policy answer.

const dns = require("node:dns");

const MAX_PORT = 65535;

const fmt = (host, port) => (host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`);

/** {host, port} from "host:port", "[v6]:port", "host" (defPort) or {host, port}; what names the option in errors. */
function parseAddr(a, defPort, what) {
  let host, port;
  if (a && typeof a === "object") {
    ({ host, port = defPort } = a);
  } else if (typeof a === "string") {
    const v6 = /^\[([^\]]+)\](?::([^:]*))?$/.exec(a);
    if (v6) [host, port] = [v6[1], v6[2]];
    else if (a.indexOf(":") !== -1 && a.indexOf(":") === a.lastIndexOf(":")) [host, port] = a.split(":");
    else host = a; // a bare name, or an IPv6 address without a port
    port = port === undefined ? defPort : port === "" ? NaN : Number(port);
  }
  if (typeof host !== "string" || host === "")
    throw new TypeError(`${what}: expected "host:port" or {host, port}, got ${JSON.stringify(a)}`);
  if (!Number.isInteger(port) || port < 1 || port > MAX_PORT)
    throw new RangeError(`${what}: port must be an integer from 1 to ${MAX_PORT}, got ${JSON.stringify(a)}`);
  return { host, port };
}

/**
 * What the nodes option says: seeds [{host, port}] or a DNS name to look up.
 * nodes is an array of addresses, or one string: "dns:NAME[:PORT]" (every
 * A/AAAA record of NAME, as the server's --join dns: reads it) or "host:port".
 */
function parseNodes(nodes, defPort) {
  if (typeof nodes === "string" && nodes.startsWith("dns:")) {
    const rest = nodes.slice(4);
    const { host, port } = parseAddr(rest, defPort, `nodes ("dns:NAME" or "dns:NAME:PORT")`);
    return { dns: { name: host, port }, seeds: [] };
  }
  const list = typeof nodes === "string" || (nodes && !Array.isArray(nodes) && typeof nodes === "object") ? [nodes] : nodes;
  if (!Array.isArray(list) || list.length === 0)
    throw new TypeError('nodes must be a non-empty array of "host:port" (or {host, port}), or "dns:NAME[:PORT]"');
  return { dns: null, seeds: list.map((a, i) => parseAddr(a, defPort, `nodes[${i}]`)) };
}

/** A node's connection state: "ready", "connecting" or "down". */
function stateOf(r) {
  if (typeof r.status === "string") { // ioredis
    if (r.status === "ready") return "ready";
    return r.status === "connecting" || r.status === "connect" || r.status === "wait" ? "connecting" : "down";
  }
  return r.isReady ? "ready" : r.isOpen ? "connecting" : "down"; // node-redis
}

/** send(args) on one connection; a connection being made (not one being remade) is waited for, or until it fails. */
function sender(r) {
  const ioredis = typeof r.call === "function";
  const raw = ioredis ? (args) => r.call(...args) : (args) => r.sendCommand(args.map(String));
  const connecting = ioredis ? () => r.status === "connecting" || r.status === "connect" : () => r.isOpen && !r.isReady;
  let ready = null;
  return (args) => {
    if (!connecting()) return raw(args);
    if (!ready) {
      ready = new Promise((ok) => {
        const done = () => { ready = null; for (const e of ["ready", "close", "error"]) r.off(e, done); ok(); };
        for (const e of ["ready", "close", "error"]) r.on(e, done);
      });
    }
    return ready.then(() => raw(args));
  };
}

/** One field of RL.CLUSTER INFO's reply: flat pairs (RESP2), a Map or an object (RESP3). */
function infoField(reply, name) {
  if (reply instanceof Map) return reply.get(name) == null ? null : String(reply.get(name));
  if (Array.isArray(reply)) {
    for (let i = 0; i + 1 < reply.length; i += 2) if (String(reply[i]) === name) return String(reply[i + 1]);
    return null;
  }
  if (reply && typeof reply === "object" && name in reply) return String(reply[name]);
  return null;
}

class Node {
  constructor(host, port, redis, { seed, own }) {
    Object.assign(this, { host, port, addr: fmt(host, port), redis, seed, own, id: null, suspectUntil: 0, send: sender(redis) });
  }
  get state() { return stateOf(this.redis); }
}

/**
 * The nodes, which one calls go to, failover and topology. connect(host,
 * port) makes a connection; isTransient(e) says whether another node may
 * answer; isDeadline(e) that the call's time is spent.
 */
class Pool {
  constructor({ connect, seeds = [], dnsName = null, redis = null, discover = false, refreshInterval = 30000,
    suspectFor = 1000, isTransient, isDeadline, lookup = dns.promises.lookup }) {
    Object.assign(this, { connect, dnsName, discover, refreshInterval, suspectFor, isTransient, isDeadline, lookup,
      nodes: [], cur: null, resolving: null, refreshing: null, closed: false, timer: null, refreshTimeout: 1000 });
    if (redis) this.nodes.push(new Node("", 0, redis, { seed: true, own: false }));
    for (const s of seeds) this.add(s.host, s.port, true);
    if (dnsName) this.resolve().catch(() => {});
    if ((discover || dnsName) && refreshInterval > 0) {
      this.timer = setInterval(() => { if (dnsName) this.resolve().catch(() => {}); this.refresh(); }, refreshInterval);
      this.timer.unref();
    }
  }

  add(host, port, seed, id = null) {
    const n = new Node(host, port, this.connect(host, port), { seed, own: true });
    n.id = id;
    this.nodes.push(n);
    if (typeof n.redis.on === "function") n.redis.on("ready", () => this.onReady(n));
    return n;
  }

  remove(n) {
    this.nodes = this.nodes.filter((x) => x !== n);
    if (this.cur === n) this.cur = null;
    if (n.own) n.redis.disconnect();
  }

  /** The DNS name's addresses, each with its port; new ones become nodes. */
  resolve() {
    if (!this.resolving) {
      const { name, port } = this.dnsName;
      this.resolving = this.lookup(name, { all: true }).then((addrs) => {
        if (this.closed) return;
        for (const { address } of addrs) {
          if (!this.nodes.some((n) => n.host === address && n.port === port)) this.add(address, port, true);
        }
      }).finally(() => { this.resolving = null; });
    }
    return this.resolving;
  }

  onReady(n) {
    if (this.closed || !this.discover) return;
    // Its id, so that the same node reached by two names is kept once.
    Promise.resolve().then(() => n.send(["RL.CLUSTER", "INFO"])).then((info) => {
      const id = infoField(info, "node_id");
      if (id) this.learnId(n, id);
    }, () => {});
    this.refresh(n);
  }

  learnId(n, id) {
    n.id = id;
    for (const o of this.nodes) {
      if (o === n || o.id !== id) continue;
      if (!o.seed) this.remove(o);
      else if (!n.seed) { this.remove(n); return; }
    }
  }

  /** Asks a ready node for RL.CLUSTER NODES: members not known become nodes; discovered nodes no longer members go. */
  refresh(via) {
    if (!this.discover || this.closed) return Promise.resolve();
    if (this.refreshing) return this.refreshing;
    const n = via && via.state === "ready" ? via : this.nodes.find((x) => x.state === "ready");
    if (!n) return Promise.resolve();
    let timer;
    const p = Promise.race([Promise.resolve().then(() => n.send(["RL.CLUSTER", "NODES"])),
      new Promise((_, no) => { timer = setTimeout(() => no(new Error("RL.CLUSTER NODES: no reply")), this.refreshTimeout); })]);
    this.refreshing = p.then((members) => this.apply(members), () => {}).finally(() => { clearTimeout(timer); this.refreshing = null; });
    return this.refreshing;
  }

  apply(members) {
    if (this.closed || !Array.isArray(members)) return;
    const ids = new Set();
    for (const m of members) {
      if (!Array.isArray(m) || m.length < 2) continue;
      const id = String(m[0]), resp = String(m[1] || "");
      ids.add(id);
      if (!resp) continue; // a member that has not registered its RESP address
      let a;
      try { a = parseAddr(resp, 0, "RL.CLUSTER NODES"); } catch { continue; }
      const known = this.nodes.find((x) => x.id === id || (x.host === a.host && x.port === a.port));
      if (known) { if (!known.id) known.id = id; continue; }
      this.add(a.host, a.port, false, id);
    }
    if (ids.size) for (const n of this.nodes.slice()) if (!n.seed && n.id && !ids.has(n.id)) this.remove(n);
  }

  /** The nodes in the order to try: the current one, then ready, connecting, down; suspects last. */
  order() {
    const ns = this.nodes;
    if (ns.length <= 1) return ns;
    const now = performance.now();
    const rank = (n) => {
      const st = n.state;
      return (n === this.cur ? 0 : 1) + (st === "ready" ? 0 : st === "connecting" ? 2 : 4) + (n.suspectUntil > now ? 8 : 0);
    };
    return ns.map((n, i) => [rank(n), i, n]).sort((a, b) => a[0] - b[0] || a[1] - b[1]).map((x) => x[2]);
  }

  /** Sends args to the nodes in order until one answers; deadline rejects when the call's time is up. */
  async call(args, deadline) {
    if (this.nodes.length === 0) {
      if (!this.dnsName) throw new Error("no sluice node");
      await Promise.race([this.resolve(), deadline]);
    }
    let last = null;
    for (const n of this.order()) {
      const p = Promise.resolve().then(() => n.send(args));
      p.catch(() => {});
      try {
        const v = await Promise.race([p, deadline]);
        this.cur = n;
        n.suspectUntil = 0;
        return v;
      } catch (e) {
        if (this.isDeadline(e)) { this.failed(n, true); throw e; }
        if (!this.isTransient(e)) { this.cur = n; throw e; } // an answer: an error reply
        this.failed(n, false);
        last = e;
      }
    }
    throw last || new Error("no sluice node");
  }

  failed(n, silent) {
    if (silent) n.suspectUntil = performance.now() + this.suspectFor;
    if (this.cur === n) this.cur = null;
    if (this.nodes.length > 1) this.refresh();
  }

  close() {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    for (const n of this.nodes) if (n.own) n.redis.disconnect();
  }
}

module.exports = { Pool, parseNodes, parseAddr, infoField };
