// Runs rate-limiter-flexible (RateLimiterRedis) and rate-limit-redis
// (express-rate-limit's Redis store), unchanged, as their READMEs use them,
// against the server on SLUICE_PORT, and prints what each call answered as
// one JSON array on one line. e2e/TestNodeRedisLibrariesAsOnRedis runs it
// against redis-server and sluice and compares the two.
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { RedisStore } = require('rate-limit-redis');
const express = require('express');
const { rateLimit } = require('express-rate-limit');

const sec = (ms) => Math.round(ms / 1000); // ms between the two servers' calls do not count

async function main() {
  const client = new Redis({ port: Number(process.env.SLUICE_PORT), host: '127.0.0.1', enableOfflineQueue: true, maxRetriesPerRequest: 1 });
  const out = [];
  const res = (r) => ({ remaining: r.remainingPoints, consumed: r.consumedPoints, first: r.isFirstInDuration, next: sec(r.msBeforeNext) });

  const limiter = new RateLimiterRedis({ storeClient: client, keyPrefix: 'rlflx', points: 5, duration: 60 });
  for (let i = 0; i < 7; i++) {
    try {
      out.push(['consume', 'ok', res(await limiter.consume('u1'))]);
    } catch (r) {
      if (r instanceof Error) throw r;
      out.push(['consume', 'rejected', res(r)]);
    }
  }
  for (const pts of [3, 3]) {
    try {
      out.push(['consume 3', 'ok', res(await limiter.consume('u2', pts))]);
    } catch (r) {
      if (r instanceof Error) throw r;
      out.push(['consume 3', 'rejected', res(r)]);
    }
  }
  out.push(['get', res(await limiter.get('u1'))]);
  out.push(['get missing', await limiter.get('nobody')]);
  out.push(['penalty', res(await limiter.penalty('u3', 2))]);
  out.push(['reward', res(await limiter.reward('u3', 1))]);
  out.push(['delete', await limiter.delete('u1')]);
  out.push(['after delete', res(await limiter.consume('u1'))]);
  const blocker = new RateLimiterRedis({ storeClient: client, keyPrefix: 'rlblk', points: 1, duration: 60, blockDuration: 120 });
  await blocker.consume('b').catch(() => {});
  out.push(['block', await blocker.consume('b').then(res, (r) => ['rejected', res(r)])]);

  const store = new RedisStore({ sendCommand: (...args) => client.call(...args), prefix: 'rl:' });
  store.init({ windowMs: 60000 });
  const inc = async () => {
    const r = await store.increment('ip');
    return { hits: r.totalHits, reset: sec(r.resetTime.getTime() - Date.now()) };
  };
  out.push(['increment', await inc()]);
  out.push(['increment', await inc()]);
  out.push(['increment', await inc()]);
  await store.decrement('ip');
  out.push(['after decrement', await inc()]);
  const got = await store.get('ip');
  out.push(['get', { hits: got.totalHits, reset: sec(got.resetTime.getTime() - Date.now()) }]);
  out.push(['get missing', await store.get('nobody').then((r) => r && r.totalHits)]);
  await store.resetKey('ip');
  out.push(['after reset', await inc()]);

  // express-rate-limit itself, with the store, in an express app as its
  // README sets it up: each request's status and RateLimit header.
  const app = express();
  app.use(rateLimit({ windowMs: 60000, limit: 5, standardHeaders: 'draft-7', legacyHeaders: false,
    store: new RedisStore({ sendCommand: (...args) => client.call(...args), prefix: 'erl:' }) }));
  app.get('/', (req, res) => res.send('ok'));
  const server = await new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  for (let i = 0; i < 7; i++) {
    const r = await fetch(`http://127.0.0.1:${server.address().port}/`);
    // reset= is whole seconds of the clock: say only that it is about a minute.
    const h = (r.headers.get('ratelimit') || '').replace(/reset=(\d+)/, (_, s) => 'reset~' + (Number(s) >= 58 && Number(s) <= 60 ? 60 : s));
    out.push(['express', r.status, h]);
  }
  server.close();

  console.log(JSON.stringify(out));
  client.disconnect();
}

// With SLUICE_PORTS (three nodes of a cluster), three instances of each
// library, one per node, share one limit of 50: 90 calls interleaved
// across them must admit exactly 50.
async function cluster(ports) {
  const clients = ports.map((p) => new Redis({ port: Number(p), host: '127.0.0.1', maxRetriesPerRequest: 1 }));
  const limiters = clients.map((c) => new RateLimiterRedis({ storeClient: c, keyPrefix: 'shared', points: 50, duration: 3600 }));
  const stores = clients.map((c) => {
    const s = new RedisStore({ sendCommand: (...args) => c.call(...args), prefix: 'shared:' });
    s.init({ windowMs: 3600000 });
    return s;
  });
  // A call refused with TRYAGAIN (an election) was not decided: ask again.
  const retry = async (f) => {
    for (let i = 0; ; i++) {
      try { return await f(); } catch (e) {
        if (!(e instanceof Error) || !/TRYAGAIN|LOADING|CLUSTERDOWN/.test(e.message) || i > 200) throw e;
        await new Promise((r) => setTimeout(r, 20));
      }
    }
  };
  let admitted = 0;
  for (let i = 0; i < 90; i++) {
    await retry(() => limiters[i % 3].consume('tenant')).then(() => admitted++, (r) => { if (r instanceof Error) throw r; });
  }
  let underLimit = 0;
  for (let i = 0; i < 90; i++) {
    const r = await retry(() => stores[i % 3].increment('client'));
    if (r.totalHits <= 50) underLimit++;
  }
  // Three express apps, one per node, each with express-rate-limit over
  // the store: 90 requests taking turns across them get 50 answers of 200.
  const servers = await Promise.all(clients.map((c) => {
    const app = express();
    app.use(rateLimit({ windowMs: 3600000, limit: 50, standardHeaders: 'draft-7', legacyHeaders: false,
      store: new RedisStore({ sendCommand: (...args) => c.call(...args), prefix: 'erl-shared:' }) }));
    app.get('/', (req, res) => res.send('ok'));
    return new Promise((resolve) => { const s = app.listen(0, '127.0.0.1', () => resolve(s)); });
  }));
  let ok = 0;
  for (let i = 0; i < 90; i++) {
    for (let attempt = 0; ; attempt++) {
      const r = await fetch(`http://127.0.0.1:${servers[i % 3].address().port}/`);
      // The middleware answers 500 when the store's call failed (an
      // election's TRYAGAIN): not decided, ask again.
      if (r.status === 500 && attempt < 200) { await new Promise((res) => setTimeout(res, 20)); continue; }
      if (r.status === 200) ok++;
      break;
    }
  }
  servers.forEach((s) => s.close());
  console.log(JSON.stringify({ flexible: admitted, redisStore: underLimit, express: ok }));
  clients.forEach((c) => c.disconnect());
}

(process.env.SLUICE_PORTS ? cluster(process.env.SLUICE_PORTS.split(',')) : main())
  .catch((e) => { console.log('FAIL ' + (e && e.stack || e)); process.exit(1); });
