// Measures rate-limiter-flexible's consume and rate-limit-redis's increment,
// unchanged, against Redis or sluice (bench/libraries.sh runs it):
//   node bench/libcalls.js flexible|store PORT[,PORT...] [CONCURRENCY] [SECONDS]
// CONCURRENCY calls in flight at once, spread over one client per port,
// on random keys; it prints the calls per second and how many failed.
const Redis = require('ioredis');
const { RateLimiterRedis } = require('rate-limiter-flexible');
const { RedisStore } = require('rate-limit-redis');

async function main() {
  const [lib, ports, conc = '32', secs = '5'] = process.argv.slice(2);
  const clients = ports.split(',').map((p) => new Redis({ port: Number(p), host: '127.0.0.1' }));
  const calls = clients.map((c) => {
    if (lib === 'flexible') {
      const l = new RateLimiterRedis({ storeClient: c, keyPrefix: 'b', points: 100, duration: 60 });
      return (k) => l.consume(k).catch((r) => { if (r instanceof Error) throw r; });
    }
    const s = new RedisStore({ sendCommand: (...args) => c.call(...args), prefix: 'b:' });
    s.init({ windowMs: 60000 });
    return (k) => s.increment(k);
  });
  let n = 0, failed = 0;
  const end = Date.now() + Number(secs) * 1000;
  const worker = async (i) => {
    const call = calls[i % calls.length];
    while (Date.now() < end) {
      try { await call('k' + Math.floor(Math.random() * 10000)); } catch (e) { failed++; }
      n++;
    }
  };
  await Promise.all(Array.from({ length: Number(conc) }, (_, i) => worker(i)));
  console.log(`${Math.round(n / Number(secs))} calls/s, ${failed} failed`);
  clients.forEach((c) => c.disconnect());
  process.exit(failed ? 1 : 0);
}
main().catch((e) => { console.log('FAIL ' + (e && e.stack || e)); process.exit(1); });
