'use strict'
// Compatibility suite for node-postgres (pg), with pg-copy-streams for COPY
// and pg-cursor for cursors. Run by internal/compat's Go test, or by hand:
//
//   PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE  the server (a replica) to test
//   COMPAT_PORT2    a second port: another replica of the cluster (or the same
//                   server when COMPAT_TARGET=direct)
//   COMPAT_TARGET   "direct" or "cluster"
//   COMPAT_PREFIX   prefix of every table the suite creates
//   COMPAT_ONLY     optional comma-separated scenarios to run
//   COMPAT_EXPECT_FAIL  scenarios known to fail: they run with a short timeout
//
// It prints one line per scenario: COMPAT-RESULT <scenario> PASS|FAIL|NA [detail].

const pg = require('pg')
const { from: copyFrom, to: copyTo } = require('pg-copy-streams')
const Cursor = require('pg-cursor')
const { pipeline } = require('node:stream/promises')
const { Readable, Writable } = require('node:stream')

const SCENARIOS = [
  'connect', 'simple_query', 'extended_query', 'prepared', 'transactions', 'copy_in', 'copy_out',
  'large_result', 'cursor', 'pipeline', 'errors', 'cancel', 'statement_timeout', 'retry_40001', 'no_pk_write',
]

const env = {
  host: process.env.PGHOST || '127.0.0.1',
  port: parseInt(process.env.PGPORT || '5432', 10),
  user: process.env.PGUSER || 'postgres',
  password: process.env.PGPASSWORD || undefined,
  database: process.env.PGDATABASE || 'postgres',
  target: process.env.COMPAT_TARGET || 'direct',
  prefix: process.env.COMPAT_PREFIX || `compat_node_${process.pid}`,
  only: new Set((process.env.COMPAT_ONLY || '').split(',').filter(Boolean)),
  expectFail: new Set((process.env.COMPAT_EXPECT_FAIL || '').split(',').filter(Boolean)),
}
env.port2 = parseInt(process.env.COMPAT_PORT2 || String(env.port), 10)

const table = (name) => `${env.prefix}_${name}`
const q = (name) => `"${name}"`

class Fail extends Error {}
function check (cond, msg) { if (!cond) throw new Fail(msg) }
function checkEq (got, want, what) {
  const g = JSON.stringify(got)
  const w = JSON.stringify(want)
  if (g !== w) throw new Fail(`${what}: got ${g}, want ${w}`)
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

let openClients = []
function config (port, password) {
  return {
    host: env.host, port: port || env.port, user: env.user, database: env.database,
    password: password !== undefined ? password : env.password, connectionTimeoutMillis: 10000,
  }
}
async function connect (port, password) {
  const c = new pg.Client(config(port, password))
  c.on('error', () => {}) // reported through the failing call
  openClients.push(c)
  await c.connect()
  return c
}

async function expectSQLState (want, promise) {
  try {
    await promise
  } catch (e) {
    if (e instanceof Fail) throw e
    checkEq(e.code, want, `SQLSTATE of "${e.message}"`)
    return e
  }
  throw new Fail(`no error, want SQLSTATE ${want}`)
}

async function poll (fn, what, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs
  let last
  for (;;) {
    try {
      if (await fn()) return
    } catch (e) { last = e }
    if (Date.now() > deadline) throw new Fail(`timed out after ${timeoutMs / 1000}s waiting for ${what} (last error: ${last})`)
    await sleep(20)
  }
}

// The table reads the same through the second port (another replica when
// run on the cluster).
async function checkReplicated (client, t) {
  const sql = `SELECT count(*)::int AS n, coalesce(sum(hashtext(x::text)), 0)::text AS h FROM ${q(t)} x`
  const want = JSON.stringify((await client.query(sql)).rows[0])
  const c2 = await connect(env.port2)
  try {
    await poll(async () => JSON.stringify((await c2.query(sql)).rows[0]) === want, `table ${t} to read ${want} through the second port`)
  } finally {
    await c2.end()
  }
}

const scenarios = {}

scenarios.connect = async () => {
  const c = await connect()
  try {
    const r = await c.query("SELECT current_user AS u, current_database() AS d, current_setting('server_version_num')::int AS v")
    checkEq(r.rows[0].u, env.user, 'current_user')
    checkEq(r.rows[0].d, env.database, 'current_database()')
    check(r.rows[0].v >= 150000 && r.rows[0].v < 160000, `server_version_num ${r.rows[0].v} is not 15.x`)
    check(c.processID > 0, 'no backend pid (BackendKeyData)')
  } finally {
    await c.end()
  }
  if (env.password) {
    const bad = new pg.Client(config(env.port, env.password + '-wrong'))
    await expectSQLState('28P01', bad.connect())
    await bad.end().catch(() => {})
  }
}

scenarios.simple_query = async () => {
  const t = table('simple')
  const c = await connect()
  try {
    // No values: pg sends a simple Query, so several statements are allowed.
    await c.query(`CREATE TABLE ${q(t)} (id int PRIMARY KEY, name text)`)
    const res = await c.query(`INSERT INTO ${q(t)} VALUES (1, 'one'); INSERT INTO ${q(t)} VALUES (2, 'two'); SELECT 1 AS a`)
    checkEq(res.map((r) => r.command), ['INSERT', 'INSERT', 'SELECT'], 'commands of a three-statement query')
    checkEq(res[2].rows, [{ a: 1 }], 'rows of its SELECT')
    const upd = await c.query(`UPDATE ${q(t)} SET name = 'deux' WHERE id = 2`)
    checkEq(upd.rowCount, 1, 'rowCount of UPDATE')
    checkEq((await c.query(`SELECT id, name FROM ${q(t)} ORDER BY id`)).rows, [{ id: 1, name: 'one' }, { id: 2, name: 'deux' }], 'table contents')
    await checkReplicated(c, t)
  } finally {
    await c.query(`DROP TABLE IF EXISTS ${q(t)}`)
    await c.end()
  }
}

scenarios.extended_query = async () => {
  const t = table('extended')
  const c = await connect()
  try {
    await c.query(`CREATE TABLE ${q(t)} (id int PRIMARY KEY, t text, n numeric, b bool, ts timestamptz, by bytea, nul text, f float8, j jsonb)`)
    const ts = new Date(Date.UTC(2024, 1, 29, 12, 34, 56, 789))
    const row = [7, 'naïve ☃ text', '12345.6789', true, ts, Buffer.from([0, 1, 0xfe, 0xff]), null, 2.5, { a: [1, 2] }]
    const ins = `INSERT INTO ${q(t)} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
    await c.query(ins, row) // values: Parse/Bind/Describe/Execute/Sync (unnamed statement)
    const r = await c.query(`SELECT * FROM ${q(t)} WHERE id = $1 AND t = $2`, [7, row[1]])
    checkEq(r.rows.length, 1, 'rows')
    const got = r.rows[0]
    checkEq([got.id, got.t, got.n, got.b, got.ts.getTime(), got.by.toString('hex'), got.nul, got.f, got.j],
      [7, row[1], '12345.6789', true, ts.getTime(), '0001feff', null, 2.5, { a: [1, 2] }], 'row read back')
    for (let i = 100; i < 110; i++) await c.query(ins, [i, ...row.slice(1)])
    const u = await c.query(`UPDATE ${q(t)} SET f = f + $1 WHERE id >= $2`, [1, 100])
    checkEq(u.rowCount, 10, 'rowCount of a parameterized UPDATE')
    const arr = await c.query({ text: 'SELECT $1::int AS a, $2::text AS b', values: [1, 'x'], rowMode: 'array' })
    checkEq(arr.rows, [[1, 'x']], 'rowMode array')
    await checkReplicated(c, t)
  } finally {
    await c.query(`DROP TABLE IF EXISTS ${q(t)}`)
    await c.end()
  }
}

scenarios.prepared = async () => {
  const t = table('prepared')
  const c = await connect()
  try {
    await c.query(`CREATE TABLE ${q(t)} (id int PRIMARY KEY, v text)`)
    // Named queries are prepared once per connection (server-side statements).
    const ins = (i) => c.query({ name: 'compat_ins', text: `INSERT INTO ${q(t)} VALUES ($1, $2)`, values: [i, `v${i}`] })
    for (let i = 0; i < 5; i++) await ins(i) // autocommit writes through a named statement
    await c.query('BEGIN')
    for (let i = 5; i < 10; i++) await ins(i)
    await c.query('COMMIT')
    for (let i = 0; i < 10; i++) {
      const r = await c.query({ name: 'compat_sel', text: `SELECT v FROM ${q(t)} WHERE id = $1`, values: [i] })
      checkEq(r.rows, [{ v: `v${i}` }], `prepared SELECT ${i}`)
    }
    const names = (await c.query("SELECT name FROM pg_prepared_statements WHERE NOT from_sql AND name LIKE 'compat%' ORDER BY name")).rows.map((r) => r.name)
    checkEq(names, ['compat_ins', 'compat_sel'], 'protocol-level prepared statements on the server')
    checkEq((await c.query(`SELECT count(*)::int AS n FROM ${q(t)}`)).rows[0].n, 10, 'rows')
    await checkReplicated(c, t)
  } finally {
    await c.query(`DROP TABLE IF EXISTS ${q(t)}`)
    await c.end()
  }
}

scenarios.transactions = async () => {
  const t = table('tx')
  const c = await connect()
  const ids = async () => (await c.query(`SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM ${q(t)}`)).rows[0].ids
  try {
    await c.query(`CREATE TABLE ${q(t)} (id int PRIMARY KEY, v text)`)
    const ins = `INSERT INTO ${q(t)} VALUES ($1, $2)`
    await c.query('BEGIN')
    await c.query(ins, [1, 'a'])
    await c.query('SAVEPOINT s1')
    await c.query(ins, [2, 'b'])
    await expectSQLState('23505', c.query(ins, [1, 'dup']))
    await c.query('ROLLBACK TO SAVEPOINT s1')
    await c.query(ins, [3, 'c'])
    await c.query('COMMIT')
    checkEq(await ids(), [1, 3], 'rows after COMMIT with ROLLBACK TO SAVEPOINT')
    await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ')
    await c.query(ins, [4, 'd'])
    await c.query(`DELETE FROM ${q(t)} WHERE id = 1`)
    await c.query('ROLLBACK')
    checkEq(await ids(), [1, 3], 'rows after ROLLBACK')
    await c.query('BEGIN')
    await c.query(ins, [5, 'e'])
    await c.query('SAVEPOINT s1')
    await c.query(ins, [6, 'f'])
    await c.query('RELEASE SAVEPOINT s1')
    await c.query('COMMIT')
    await c.query('BEGIN')
    await c.query(ins, [7, 'g'])
    await expectSQLState('22012', c.query('SELECT 1/0'))
    const r = await c.query('COMMIT')
    checkEq(r.command, 'ROLLBACK', 'COMMIT of a failed transaction answers')
    checkEq(await ids(), [1, 3, 5, 6], 'rows at the end')
    await checkReplicated(c, t)
  } finally {
    await c.query(`DROP TABLE IF EXISTS ${q(t)}`)
    await c.end()
  }
}

scenarios.copy_in = async () => {
  const t = table('copyin')
  const c = await connect()
  try {
    await c.query(`CREATE TABLE ${q(t)} (id int PRIMARY KEY, name text, amount numeric)`)
    const lines = []
    for (let i = 1; i <= 1000; i++) lines.push(`${i}\trow ${i}\\twith tab\t${i / 4}\n`)
    const s1 = c.query(copyFrom(`COPY ${q(t)} (id, name, amount) FROM STDIN`))
    await pipeline(Readable.from(lines), s1)
    checkEq(s1.rowCount, 1000, 'COPY rowCount')
    await c.query('BEGIN')
    const csv = []
    for (let i = 1001; i <= 1500; i++) csv.push(`${i},"csv ${i}, quoted",${i}\n`)
    await pipeline(Readable.from(csv), c.query(copyFrom(`COPY ${q(t)} FROM STDIN WITH (FORMAT csv)`)))
    await c.query('COMMIT')
    const r = await c.query(`SELECT count(*)::int AS n, sum(id)::int AS s, sum(amount)::text AS a FROM ${q(t)}`)
    let want = 0
    for (let i = 1; i <= 1000; i++) want += i / 4
    for (let i = 1001; i <= 1500; i++) want += i
    checkEq([r.rows[0].n, r.rows[0].s, Number(r.rows[0].a)], [1500, 1500 * 1501 / 2, want], 'count, sum(id), sum(amount)')
    checkEq((await c.query(`SELECT name FROM ${q(t)} WHERE id = 7`)).rows[0].name, 'row 7\twith tab', 'escaped text')
    await expectSQLState('23505', pipeline(Readable.from(['5000\tnew\t1\n', '1\tdup\t1\n']), c.query(copyFrom(`COPY ${q(t)} FROM STDIN`))))
    checkEq((await c.query(`SELECT count(*)::int AS n FROM ${q(t)}`)).rows[0].n, 1500, 'rows after a failed COPY')
    await checkReplicated(c, t)
  } finally {
    await c.query(`DROP TABLE IF EXISTS ${q(t)}`)
    await c.end()
  }
}

function collect () {
  const chunks = []
  const w = new Writable({ write (chunk, _enc, cb) { chunks.push(chunk); cb() } })
  w.text = () => Buffer.concat(chunks).toString()
  return w
}

scenarios.copy_out = async () => {
  const t = table('copyout')
  const c = await connect()
  try {
    await c.query(`CREATE TABLE ${q(t)} (id int PRIMARY KEY, name text)`)
    await c.query(`INSERT INTO ${q(t)} SELECT g, 'n' || g FROM generate_series(1, 500) g`)
    const out = collect()
    const s = c.query(copyTo(`COPY ${q(t)} TO STDOUT`))
    await pipeline(s, out)
    const lines = out.text().trim().split('\n').sort((a, b) => parseInt(a, 10) - parseInt(b, 10))
    checkEq([lines.length, lines[0], s.rowCount], [500, '1\tn1', 500], 'rows copied out')
    const out2 = collect()
    await pipeline(c.query(copyTo('COPY (SELECT g, g * 2 FROM generate_series(1, 3) g) TO STDOUT WITH (FORMAT csv, HEADER)')), out2)
    checkEq(out2.text(), 'g,?column?\n1,2\n2,4\n3,6\n', 'CSV out')
  } finally {
    await c.query(`DROP TABLE IF EXISTS ${q(t)}`)
    await c.end()
  }
}

scenarios.large_result = async () => {
  const c = await connect()
  try {
    const r = await c.query('SELECT g, md5(g::text) AS h FROM generate_series(1, $1::int) g', [100000])
    checkEq(r.rows.length, 100000, 'rows')
    let sum = 0
    for (const row of r.rows) sum += row.g
    checkEq(sum, 100000 * 100001 / 2, 'sum')
    checkEq(r.rows[99999].h, (await c.query("SELECT md5('100000') AS h")).rows[0].h, 'md5 of the last row')
    const s = await c.query('SELECT g FROM generate_series(1, 100000) g') // simple protocol too
    checkEq(s.rows.length, 100000, 'rows (simple protocol)')
  } finally {
    await c.end()
  }
}

scenarios.cursor = async () => {
  // pg-cursor: a portal read in batches (Execute with a row limit, then Flush).
  const c = await connect()
  try {
    await c.query('BEGIN')
    const cursor = c.query(new Cursor('SELECT g FROM generate_series(1, $1::int) g', [100000]))
    let n = 0
    let sum = 0
    for (;;) {
      const rows = await cursor.read(5000)
      if (rows.length === 0) break
      for (const r of rows) { n++; sum += r.g }
    }
    await cursor.close()
    await c.query('COMMIT')
    checkEq([n, sum], [100000, 100000 * 100001 / 2], 'rows and sum through a cursor')
  } finally {
    await c.end()
  }
}

scenarios.pipeline = async () => {
  // pg's pipeline mode: queries are written without waiting for the previous
  // one's answer (each ends with its own Sync).
  const t = table('pipeline')
  const setup = await connect()
  const c = new pg.Client({ ...config(), pipeline: true })
  c.on('error', () => {})
  openClients.push(c)
  try {
    await setup.query(`CREATE TABLE ${q(t)} (id int PRIMARY KEY, v text)`)
    await c.connect()
    const ins = `INSERT INTO ${q(t)} VALUES ($1, $2)`
    const results = await Promise.all([
      c.query(ins, [1, 'a']), c.query(ins, [2, 'b']), c.query(`SELECT count(*)::int AS n FROM ${q(t)}`),
      c.query('BEGIN'), c.query(ins, [3, 'c']), c.query(ins, [4, 'd']), c.query('COMMIT'),
    ])
    checkEq(results[2].rows[0].n, 2, 'count read in the pipeline')
    checkEq((await c.query(`SELECT count(*)::int AS n FROM ${q(t)}`)).rows[0].n, 4, 'rows written in the pipeline')
    await checkReplicated(c, t)
  } finally {
    await setup.query(`DROP TABLE IF EXISTS ${q(t)}`)
    await setup.end()
    await c.end().catch(() => {})
  }
}

scenarios.errors = async () => {
  const t = table('errors')
  const c = await connect()
  try {
    await c.query(`CREATE TABLE ${q(t)} (id int PRIMARY KEY)`)
    const ins = `INSERT INTO ${q(t)} VALUES ($1)`
    await c.query(ins, [1])
    const e = await expectSQLState('23505', c.query(ins, [1]))
    checkEq(e.constraint, `${t}_pkey`, 'constraint name')
    await expectSQLState('23505', c.query(`INSERT INTO ${q(t)} VALUES (1)`))
    await expectSQLState('22012', c.query('SELECT 1/0'))
    await expectSQLState('22012', c.query('SELECT $1::int / $2::int', [1, 0]))
    await expectSQLState('42P01', c.query('SELECT * FROM compat_no_such_table'))
    await expectSQLState('42601', c.query('SELEC 1'))
    await c.query('BEGIN')
    await expectSQLState('23505', c.query(ins, [1]))
    await expectSQLState('25P02', c.query('SELECT 1'))
    await c.query('ROLLBACK')
    checkEq((await c.query('SELECT 42 AS v')).rows[0].v, 42, 'the session works after errors')
  } finally {
    await c.query(`DROP TABLE IF EXISTS ${q(t)}`)
    await c.end()
  }
}

scenarios.cancel = async () => {
  // pg's cancel API: Client#cancel(client, query) opens a connection and
  // sends a CancelRequest with the target's BackendKeyData.
  const c = await connect()
  try {
    const query = new pg.Query('SELECT pg_sleep(10)')
    const done = new Promise((resolve, reject) => { query.on('error', reject); query.on('end', resolve) })
    const start = Date.now()
    c.query(query)
    await sleep(500)
    new pg.Client(config()).cancel(c, query)
    const e = await expectSQLState('57014', done)
    check(/cancel/.test(e.message), `message ${e.message}`)
    const elapsed = (Date.now() - start) / 1000
    check(elapsed < 5, `cancel took ${elapsed}s`)
    checkEq((await c.query('SELECT 1 AS v')).rows[0].v, 1, 'the session works after the cancel')
  } finally {
    await c.end()
  }
}

scenarios.statement_timeout = async () => {
  const c = await connect()
  try {
    await c.query('SET statement_timeout = 200')
    const start = Date.now()
    await expectSQLState('57014', c.query('SELECT pg_sleep(5)'))
    const elapsed = (Date.now() - start) / 1000
    check(elapsed < 3, `the timeout took ${elapsed}s`)
    await c.query('RESET statement_timeout')
    checkEq((await c.query('SHOW statement_timeout')).rows[0].statement_timeout, '0', 'statement_timeout after RESET')
  } finally {
    await c.end()
  }
}

// DROP TABLE, retried on 40001 as a client would: right after writes on the
// other replica, the DDL's snapshot may be labelled before this replica
// counted the last of them applied (Tashkent §6.2, conservative versions).
async function dropRetrying (c, t) {
  for (let attempt = 1; ; attempt++) {
    try {
      await c.query(`DROP TABLE IF EXISTS ${q(t)}`)
      return
    } catch (e) {
      if (e.code !== '40001' || attempt === 5) throw e
      await new Promise((resolve) => setTimeout(resolve, 50))
    }
  }
}

scenarios.retry_40001 = async () => {
  const t = table('counter')
  const perWorker = 3
  const a = await connect()
  const b = await connect(env.port2)
  try {
    await a.query(`CREATE TABLE ${q(t)} (id int PRIMARY KEY, n int NOT NULL)`)
    await a.query(`INSERT INTO ${q(t)} VALUES (1, 0)`)
    const sel = `SELECT n FROM ${q(t)} WHERE id = 1`
    const upd = `UPDATE ${q(t)} SET n = $1 WHERE id = 1`
    await poll(async () => (await b.query(sel)).rows.length === 1, 'the counter row on the second connection')
    // A barrier for two: both read before either writes, on the first attempt.
    let arrived = 0
    let release
    const barrier = new Promise((resolve) => { release = resolve })
    const stats = { ok: 0, conflicts: 0 }
    const worker = async (c) => {
      let first = true
      let done = 0
      for (let attempt = 1; done < perWorker; attempt++) {
        if (attempt > 200) throw new Fail('no success after 200 attempts')
        try {
          await c.query('BEGIN ISOLATION LEVEL REPEATABLE READ')
          const n = (await c.query(sel)).rows[0].n
          if (first) {
            first = false
            if (++arrived === 2) release()
            await barrier
          } else {
            await sleep(Math.random() * 30)
          }
          await c.query(upd, [n + 1])
          await c.query('COMMIT')
          done++
          stats.ok++
        } catch (e) {
          if (e.code !== '40001') throw e
          stats.conflicts++
          await c.query('ROLLBACK')
          await sleep(10 + Math.random() * 40)
        }
      }
    }
    await Promise.all([worker(a), worker(b)])
    checkEq(stats.ok, 2 * perWorker, 'successful increments')
    check(stats.conflicts >= 1, 'no 40001: the concurrent updates did not conflict')
    for (const c of [a, b]) {
      await poll(async () => (await c.query(sel)).rows[0].n === stats.ok, `counter == ${stats.ok} (successful increments)`)
    }
    process.stderr.write(`retry_40001: ${stats.ok} increments, ${stats.conflicts} serialization failures retried\n`)
  } finally {
    try {
      await dropRetrying(a, t)
    } finally {
      await a.end()
      await b.end()
    }
  }
}

scenarios.no_pk_write = async () => {
  // A table without a primary key takes inserts (equal rows too), updates
  // and deletes, on the cluster as on PostgreSQL.
  const t = table('nopk')
  const c = await connect()
  try {
    await c.query(`CREATE TABLE ${q(t)} (a int, b text)`)
    await c.query(`INSERT INTO ${q(t)} VALUES ($1, 'x'), ($1, 'x')`, [1])
    await c.query(`UPDATE ${q(t)} SET b = 'y' WHERE ctid = (SELECT min(ctid) FROM ${q(t)})`)
    await c.query(`DELETE FROM ${q(t)} WHERE b = $1`, ['x'])
    checkEq((await c.query(`SELECT count(*)::text || min(b) AS v FROM ${q(t)}`)).rows[0].v, '1y', 'rows left')
  } finally {
    await c.query(`DROP TABLE IF EXISTS ${q(t)}`)
    await c.end()
  }
}

const TABLES = ['simple', 'extended', 'prepared', 'tx', 'copyin', 'copyout', 'pipeline', 'errors', 'counter', 'nopk']

function report (name, status, detail) {
  process.stdout.write(`COMPAT-RESULT ${name} ${status}${detail ? ' ' + String(detail).replace(/\s+/g, ' ') : ''}\n`)
}

async function main () {
  process.stderr.write(`node ${process.version}, pg ${require('pg/package.json').version}\n`)
  let failed = 0
  for (const name of SCENARIOS) {
    if (env.only.size && !env.only.has(name)) continue
    const fn = scenarios[name]
    if (!fn) { report(name, 'NA', 'no such scenario in this suite'); continue }
    openClients = []
    const start = Date.now()
    const timeoutMs = env.expectFail.has(name) ? 4000 : 90000
    let timer
    try {
      await Promise.race([
        fn(),
        new Promise((resolve, reject) => { timer = setTimeout(() => reject(new Fail(`timed out after ${timeoutMs / 1000}s (hung)`)), timeoutMs) }),
      ])
      report(name, 'PASS', `${((Date.now() - start) / 1000).toFixed(2)}s`)
    } catch (e) {
      failed++
      process.stderr.write(`${name}: ${e.stack || e}\n`)
      report(name, 'FAIL', `${e.constructor.name}: ${e.message}${e.code ? ' (SQLSTATE ' + e.code + ')' : ''}`)
      for (const c of openClients) { try { c.connection.stream.destroy() } catch (_) {} }
    } finally {
      clearTimeout(timer)
    }
  }
  try {
    const c = await connect()
    await c.query(`DROP TABLE IF EXISTS ${TABLES.map((t) => q(table(t))).join(', ')}`)
    await c.end()
  } catch (e) {
    process.stderr.write(`cleanup failed: ${e}\n`)
    failed++
  }
  process.exit(failed ? 1 : 0)
}

main()
