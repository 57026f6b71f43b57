// The client matrix for Node.js: node-redis ("redis" on npm) and ioredis,
// each with its default options, against a sluice started by the Go test
// (e2e/matrix_test.go), which passes the address and credentials in the
// environment. Prints one line per check; exits 1 on the first failure.
'use strict';

const env = process.env;
const port = Number(env.SLUICE_PORT);
const which = env.SLUICE_CLIENT;
const name = which; // keys and subjects are per client, so clients do not meet

function check(what, ok, got) {
  if (!ok) {
    console.log(`FAIL ${which}: ${what}: got ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log(`ok ${which}: ${what}`);
}

function same(a, b) { return JSON.stringify(a) === JSON.stringify(b); }

// The steps every client runs, given call (one command), pipeline (many,
// one round trip, not a transaction), transaction (MULTI/EXEC) and the
// client's error class.
async function scenario(c) {
  check('inline RL.ACQUIRE', same(await c.call(['RL.ACQUIRE', name + ':k', 'RATE', '10', 'BURST', '10']), [1, 9, 10, 0, 100, name + ':k']),
    await c.call(['RL.PEEK', name + ':k', 'COST', '0']));
  const b = await c.call(['RL.ACQUIRE', 'acme/api', 'KEY', name]);
  check('budget RL.ACQUIRE', same(b, [1, 99, 100, 0, 600, 'acme/api#' + name]), b);
  const t = await c.call(['CL.THROTTLE', name + ':cell', '15', '30', '60']);
  check('CL.THROTTLE', same(t, [0, 16, 15, -1, 2]), t);
  const cmds = [];
  for (let i = 0; i < 100; i++) cmds.push(['RL.ACQUIRE', name + ':pipe', 'RATE', '1', 'PER', 'hour', 'BURST', '60']);
  const rs = await c.pipeline(cmds);
  check('100-call pipeline', rs.length === 100 && rs.filter(r => r[0] === 1).length === 60, rs.map(r => r[0]).join(''));
  const tx = await c.transaction([
    ['RL.ACQUIRE', name + ':tx', 'RATE', '2', 'PER', 'hour'],
    ['RL.ACQUIRE', name + ':tx', 'RATE', '2', 'PER', 'hour'],
    ['RL.ACQUIRE', name + ':tx', 'RATE', '2', 'PER', 'hour'],
  ]);
  check('transaction', tx.length === 3 && same(tx.map(r => r[0]), [1, 1, 0]) && same(tx[2].slice(0, 3), [0, 0, 2]), tx);
  let err = null;
  try {
    await c.call(['RL.ACQUIRE', name + ':k', 'RATE', '0']);
  } catch (e) {
    err = e;
  }
  check('error reply', err instanceof c.ErrorClass && err.message === 'ERR RATE must be an integer between 1 and 1000000000000',
    err && (err.constructor.name + ': ' + err.message));
  const info = String(await c.call(['CLIENT', 'INFO']));
  check('RESP3 (CLIENT INFO resp=3)', info.includes(' resp=3 ') && info.includes(' lib-name=' + which), info);
  check('ACL WHOAMI', (await c.call(['ACL', 'WHOAMI'])) === c.user, c.user);
}

async function nodeRedis() {
  const redis = require('redis');
  const open = async (username, password) => {
    const client = createClientQuiet(redis, { socket: { host: '127.0.0.1', port, reconnectStrategy: false }, username, password });
    await client.connect();
    return client;
  };
  const wrap = (client, user) => ({
    user,
    ErrorClass: redis.ErrorReply,
    call: args => client.sendCommand(args),
    pipeline: async cmds => {
      const m = client.multi();
      for (const a of cmds) m.addCommand(a);
      return m.execAsPipeline();
    },
    transaction: async cmds => {
      const m = client.multi();
      for (const a of cmds) m.addCommand(a);
      return m.exec();
    },
  });
  await authThenScenario(open, wrap, c => c.quit());
}

// authThenScenario checks AUTH with the password and the refusal of a
// wrong one, then runs the scenario as the ACL user; open, wrap and close
// are the client's own.
async function authThenScenario(open, wrap, close) {
  const def = await open(undefined, env.SLUICE_PASSWORD);
  check('AUTH with the password', (await wrap(def, 'default').call(['ACL', 'WHOAMI'])) === 'default', null);
  await close(def);
  let bad = null;
  try {
    await open('default', 'wrong');
  } catch (e) {
    bad = e;
  }
  check('wrong password refused', bad && /WRONGPASS/.test(bad.message), bad && bad.message);
  const c = await open(env.SLUICE_ACL_USER, env.SLUICE_ACL_PASS);
  await scenario(wrap(c, env.SLUICE_ACL_USER));
  await close(c);
}

function createClientQuiet(redis, opts) {
  const c = redis.createClient(opts);
  c.on('error', () => {}); // connection errors surface through connect()
  return c;
}

async function ioredis() {
  const { Redis, ReplyError } = require('ioredis');
  const open = (username, password) => new Promise((resolve, reject) => {
    const r = new Redis({ host: '127.0.0.1', port, username, password, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    let first = null; // an AUTH error arrives as an 'error' event; connect() then says only that the connection closed
    r.on('error', e => { first = first || e; });
    r.connect().then(() => resolve(r), e => reject(first || e));
  });
  const wrap = (r, user) => ({
    user,
    ErrorClass: ReplyError,
    call: args => r.call(...args),
    pipeline: async cmds => {
      const p = r.pipeline();
      for (const a of cmds) p.call(...a);
      return (await p.exec()).map(([e, v]) => { if (e) throw e; return v; });
    },
    transaction: async cmds => {
      const m = r.multi();
      for (const a of cmds) m.call(...a);
      return (await m.exec()).map(([e, v]) => { if (e) throw e; return v; });
    },
  });
  await authThenScenario(open, wrap, r => r.disconnect());
}

({ 'node-redis': nodeRedis, ioredis })[which]().then(() => process.exit(0), e => {
  console.log(`FAIL ${which}: ${e && e.stack || e}`);
  process.exit(1);
});
