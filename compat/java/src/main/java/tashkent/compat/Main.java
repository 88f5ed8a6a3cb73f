package tashkent.compat;

import java.io.StringReader;
import java.io.StringWriter;
import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;
import org.postgresql.util.PSQLException;

/**
 * Compatibility suite for pgjdbc. Run by internal/compat's Go test, or by hand
 * with the environment the other suites read:
 *
 * <pre>
 *   PGHOST PGPORT PGUSER PGPASSWORD PGDATABASE  the server (a replica) to test
 *   COMPAT_PORT2    a second port: another replica of the cluster (or the same
 *                   server when COMPAT_TARGET=direct)
 *   COMPAT_TARGET   "direct" or "cluster"
 *   COMPAT_PREFIX   prefix of every table the suite creates
 *   COMPAT_ONLY     optional comma-separated scenarios to run
 *   COMPAT_EXPECT_FAIL  scenarios known to fail: they run with a short timeout
 * </pre>
 *
 * It prints one line per scenario: COMPAT-RESULT &lt;scenario&gt; PASS|FAIL|NA [detail].
 */
public final class Main {
  static final List<String> SCENARIOS = List.of(
      "connect", "simple_query", "extended_query", "prepared", "transactions", "copy_in", "copy_out",
      "large_result", "cursor", "pipeline", "errors", "cancel", "statement_timeout", "retry_40001", "no_pk_write");
  static final List<String> TABLES = List.of("simple", "extended", "prepared", "tx", "copyin", "copyout", "pipeline", "errors", "counter", "nopk");

  static String host = env("PGHOST", "127.0.0.1");
  static int port = Integer.parseInt(env("PGPORT", "5432"));
  static int port2 = Integer.parseInt(env("COMPAT_PORT2", String.valueOf(port)));
  static String user = env("PGUSER", "postgres");
  static String password = env("PGPASSWORD", "");
  static String database = env("PGDATABASE", "postgres");
  static String target = env("COMPAT_TARGET", "direct");
  static String prefix = env("COMPAT_PREFIX", "compat_java_" + ProcessHandle.current().pid());
  static Set<String> only = split(env("COMPAT_ONLY", ""));
  static Set<String> expectFail = split(env("COMPAT_EXPECT_FAIL", ""));
  static final List<Connection> open = new ArrayList<>();

  static String env(String k, String d) {
    String v = System.getenv(k);
    return v == null || v.isEmpty() ? d : v;
  }

  static Set<String> split(String s) {
    Set<String> out = new HashSet<>();
    for (String p : s.split(",")) if (!p.isEmpty()) out.add(p);
    return out;
  }

  static String table(String name) { return prefix + "_" + name; }

  static String q(String name) { return "\"" + name + "\""; }

  static final class Fail extends RuntimeException {
    Fail(String m) { super(m); }
  }

  static void check(boolean cond, String msg) { if (!cond) throw new Fail(msg); }

  static void checkEq(Object got, Object want, String what) {
    if (!Objects.equals(got, want)) throw new Fail(what + ": got " + got + ", want " + want);
  }

  static Connection connect(int p, Properties extra) throws SQLException {
    Properties props = new Properties();
    props.setProperty("user", user);
    if (!password.isEmpty()) props.setProperty("password", password);
    props.setProperty("connectTimeout", "10");
    if (extra != null) props.putAll(extra);
    Connection c = DriverManager.getConnection("jdbc:postgresql://" + host + ":" + p + "/" + database, props);
    synchronized (open) { open.add(c); }
    return c;
  }

  static Connection connect() throws SQLException { return connect(port, null); }

  static Properties props(String... kv) {
    Properties p = new Properties();
    for (int i = 0; i < kv.length; i += 2) p.setProperty(kv[i], kv[i + 1]);
    return p;
  }

  interface SqlRunnable { void run() throws Exception; }

  static SQLException expectSQLState(String want, SqlRunnable r) throws Exception {
    try {
      r.run();
    } catch (SQLException e) {
      checkEq(e.getSQLState(), want, "SQLSTATE of \"" + e.getMessage() + "\"");
      return e;
    }
    throw new Fail("no error, want SQLSTATE " + want);
  }

  interface Probe { boolean ok() throws Exception; }

  static void poll(Probe p, String what) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    Exception last = null;
    for (;;) {
      try {
        if (p.ok()) return;
      } catch (Exception e) {
        last = e;
      }
      if (System.nanoTime() > deadline) throw new Fail("timed out after 10s waiting for " + what + " (last error: " + last + ")");
      Thread.sleep(20);
    }
  }

  static String one(Connection c, String sql) throws SQLException {
    try (Statement s = c.createStatement(); ResultSet rs = s.executeQuery(sql)) {
      if (!rs.next()) return null;
      StringBuilder b = new StringBuilder(String.valueOf(rs.getObject(1)));
      for (int i = 2; i <= rs.getMetaData().getColumnCount(); i++) b.append('|').append(rs.getObject(i));
      return b.toString();
    }
  }

  static void exec(Connection c, String sql) throws SQLException {
    try (Statement s = c.createStatement()) { s.execute(sql); }
  }

  /** The table reads the same through the second port (another replica on the cluster). */
  static void checkReplicated(Connection c, String t) throws Exception {
    String sql = "SELECT count(*), coalesce(sum(hashtext(x::text)), 0) FROM " + q(t) + " x";
    String want = one(c, sql);
    try (Connection c2 = connect(port2, null)) {
      poll(() -> want.equals(one(c2, sql)), "table " + t + " to read " + want + " through the second port");
    }
  }

  // ---- scenarios ----

  static void connectScenario() throws Exception {
    try (Connection c = connect()) {
      checkEq(one(c, "SELECT current_user, current_database()"), user + "|" + database, "current_user, current_database()");
      int v = Integer.parseInt(one(c, "SELECT current_setting('server_version_num')"));
      check(v >= 150000 && v < 160000, "server_version_num " + v + " is not 15.x");
      checkEq(c.getMetaData().getDatabaseMajorVersion(), 15, "DatabaseMetaData major version");
      check(c.unwrap(PGConnection.class).getBackendPID() > 0, "no backend pid (BackendKeyData)");
    }
    if (!password.isEmpty()) {
      expectSQLState("28P01", () -> connect(port, props("password", password + "-wrong")).close());
    }
  }

  static void simpleQuery() throws Exception {
    String t = table("simple");
    try (Connection c = connect(port, props("preferQueryMode", "simple"))) {
      try {
        exec(c, "CREATE TABLE " + q(t) + " (id int PRIMARY KEY, name text)");
        try (Statement s = c.createStatement()) {
          boolean rs = s.execute("INSERT INTO " + q(t) + " VALUES (1, 'one'); INSERT INTO " + q(t) + " VALUES (2, 'two'); SELECT 3 AS a");
          check(!rs, "first result is an update count");
          checkEq(s.getUpdateCount(), 1, "update count of the first INSERT");
          check(!s.getMoreResults(), "second result is an update count");
          checkEq(s.getUpdateCount(), 1, "update count of the second INSERT");
          check(s.getMoreResults(), "third result is a result set");
          try (ResultSet r = s.getResultSet()) {
            check(r.next(), "a row");
            checkEq(r.getInt(1), 3, "SELECT 3");
          }
        }
        // A PreparedStatement in simple mode: pgjdbc interpolates the parameters.
        try (PreparedStatement ps = c.prepareStatement("UPDATE " + q(t) + " SET name = ? WHERE id = ?")) {
          ps.setString(1, "deux");
          ps.setInt(2, 2);
          checkEq(ps.executeUpdate(), 1, "update count");
        }
        checkEq(one(c, "SELECT string_agg(id || '=' || name, ',' ORDER BY id) FROM " + q(t)), "1=one,2=deux", "table contents");
        checkReplicated(c, t);
      } finally {
        exec(c, "DROP TABLE IF EXISTS " + q(t));
      }
    }
  }

  static void extendedQuery() throws Exception {
    String t = table("extended");
    try (Connection c = connect()) {
      try {
        exec(c, "CREATE TABLE " + q(t) + " (id int PRIMARY KEY, t text, n numeric, b bool, ts timestamptz, by bytea, nul text, f float8, d date)");
        Timestamp ts = Timestamp.from(Instant.parse("2024-02-29T12:34:56.789Z"));
        String ins = "INSERT INTO " + q(t) + " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)";
        try (PreparedStatement ps = c.prepareStatement(ins)) {
          for (int id : new int[] {7, 100, 101, 102}) {
            ps.setInt(1, id);
            ps.setString(2, "naïve ☃ text");
            ps.setBigDecimal(3, new BigDecimal("12345.6789"));
            ps.setBoolean(4, true);
            ps.setTimestamp(5, ts);
            ps.setBytes(6, new byte[] {0, 1, (byte) 0xfe, (byte) 0xff});
            ps.setNull(7, java.sql.Types.VARCHAR);
            ps.setDouble(8, 2.5);
            ps.setObject(9, LocalDate.of(2000, 1, 1));
            checkEq(ps.executeUpdate(), 1, "update count");
          }
        }
        try (PreparedStatement ps = c.prepareStatement("SELECT * FROM " + q(t) + " WHERE id = ? AND t = ?")) {
          ps.setInt(1, 7);
          ps.setString(2, "naïve ☃ text");
          try (ResultSet r = ps.executeQuery()) {
            check(r.next(), "the row");
            checkEq(r.getString(2), "naïve ☃ text", "text");
            checkEq(r.getBigDecimal(3), new BigDecimal("12345.6789"), "numeric");
            checkEq(r.getBoolean(4), true, "bool");
            checkEq(r.getTimestamp(5), ts, "timestamptz");
            checkEq(Arrays.toString(r.getBytes(6)), Arrays.toString(new byte[] {0, 1, (byte) 0xfe, (byte) 0xff}), "bytea");
            checkEq(r.getString(7), null, "NULL");
            checkEq(r.getDouble(8), 2.5, "float8");
            checkEq(r.getObject(9, LocalDate.class), LocalDate.of(2000, 1, 1), "date");
          }
        }
        try (PreparedStatement ps = c.prepareStatement("UPDATE " + q(t) + " SET f = f + ? WHERE id >= ?")) {
          ps.setDouble(1, 1.0);
          ps.setInt(2, 100);
          checkEq(ps.executeUpdate(), 3, "update count of a parameterized UPDATE");
        }
        checkReplicated(c, t);
      } finally {
        exec(c, "DROP TABLE IF EXISTS " + q(t));
      }
    }
  }

  static void prepared() throws Exception {
    String t = table("prepared");
    // prepareThreshold=1: a named server-side statement from the first execution.
    try (Connection c = connect(port, props("prepareThreshold", "1"))) {
      try {
        exec(c, "CREATE TABLE " + q(t) + " (id int PRIMARY KEY, v text)");
        try (PreparedStatement ins = c.prepareStatement("INSERT INTO " + q(t) + " VALUES (?, ?)")) {
          for (int i = 0; i < 5; i++) {  // autocommit writes through a named statement
            ins.setInt(1, i);
            ins.setString(2, "v" + i);
            ins.executeUpdate();
          }
          c.setAutoCommit(false);
          for (int i = 5; i < 10; i++) {
            ins.setInt(1, i);
            ins.setString(2, "v" + i);
            ins.addBatch();
          }
          int[] counts = ins.executeBatch();
          checkEq(counts.length, 5, "batch size");
          c.commit();
          c.setAutoCommit(true);
        }
        try (PreparedStatement sel = c.prepareStatement("SELECT v FROM " + q(t) + " WHERE id = ?")) {
          for (int i = 0; i < 10; i++) {
            sel.setInt(1, i);
            try (ResultSet r = sel.executeQuery()) {
              check(r.next(), "row " + i);
              checkEq(r.getString(1), "v" + i, "prepared SELECT " + i);
            }
          }
        }
        String n = one(c, "SELECT count(*) FROM pg_prepared_statements WHERE NOT from_sql AND statement LIKE '%" + t + "%'");
        check(Integer.parseInt(n) >= 2, "protocol-level prepared statements on the server: " + n);
        checkEq(one(c, "SELECT count(*) FROM " + q(t)), "10", "rows");
        checkReplicated(c, t);
      } finally {
        c.setAutoCommit(true);
        exec(c, "DROP TABLE IF EXISTS " + q(t));
      }
    }
  }

  static void transactions() throws Exception {
    String t = table("tx");
    try (Connection c = connect()) {
      String ids = "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM " + q(t);
      try {
        exec(c, "CREATE TABLE " + q(t) + " (id int PRIMARY KEY, v text)");
        String ins = "INSERT INTO " + q(t) + " VALUES (?, 'x')";
        try (PreparedStatement ps = c.prepareStatement(ins)) {
          c.setAutoCommit(false);
          ps.setInt(1, 1);
          ps.executeUpdate();
          Savepoint sp = c.setSavepoint("s1");
          ps.setInt(1, 2);
          ps.executeUpdate();
          ps.setInt(1, 1);
          expectSQLState("23505", ps::executeUpdate);
          c.rollback(sp);
          ps.setInt(1, 3);
          ps.executeUpdate();
          c.commit();
          checkEq(one(c, ids), "1,3", "rows after COMMIT with ROLLBACK TO SAVEPOINT");
          c.commit();
          c.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
          ps.setInt(1, 4);
          ps.executeUpdate();
          exec(c, "DELETE FROM " + q(t) + " WHERE id = 1");
          c.rollback();
          checkEq(one(c, ids), "1,3", "rows after rollback()");
          c.commit();
          ps.setInt(1, 5);
          ps.executeUpdate();
          Savepoint sp2 = c.setSavepoint();
          ps.setInt(1, 6);
          ps.executeUpdate();
          c.releaseSavepoint(sp2);
          c.commit();
          ps.setInt(1, 7);
          ps.executeUpdate();
          expectSQLState("22012", () -> one(c, "SELECT 1/0"));
          try {
            c.commit(); // the server answers ROLLBACK; pgjdbc may or may not raise
          } catch (SQLException ignored) {
            // raised as a silent rollback
          }
          c.setAutoCommit(true);
          checkEq(one(c, ids), "1,3,5,6", "rows at the end");
        }
        // autosave=always: pgjdbc sets a savepoint before every statement (in the
        // same round trip) and rolls back to it after an error, so the
        // transaction goes on.
        try (Connection a = connect(port, props("autosave", "always"));
             PreparedStatement ps = a.prepareStatement(ins)) {
          a.setAutoCommit(false);
          ps.setInt(1, 8);
          ps.executeUpdate();
          ps.setInt(1, 1);
          expectSQLState("23505", ps::executeUpdate);
          ps.setInt(1, 9);
          ps.executeUpdate();
          a.commit();
          a.setAutoCommit(true);
        }
        checkEq(one(c, ids), "1,3,5,6,8,9", "rows after an autosave=always transaction");
        checkReplicated(c, t);
      } finally {
        if (!c.getAutoCommit()) {
          c.rollback();
          c.setAutoCommit(true);
        }
        exec(c, "DROP TABLE IF EXISTS " + q(t));
      }
    }
  }

  static void copyIn() throws Exception {
    String t = table("copyin");
    try (Connection c = connect()) {
      try {
        exec(c, "CREATE TABLE " + q(t) + " (id int PRIMARY KEY, name text, amount numeric)");
        CopyManager cm = c.unwrap(PGConnection.class).getCopyAPI();
        StringBuilder b = new StringBuilder();
        BigDecimal want = BigDecimal.ZERO;
        for (int i = 1; i <= 1000; i++) {
          BigDecimal a = BigDecimal.valueOf(i).divide(BigDecimal.valueOf(4));
          want = want.add(a);
          b.append(i).append("\trow ").append(i).append("\\twith tab\t").append(a.toPlainString()).append('\n');
        }
        checkEq(cm.copyIn("COPY " + q(t) + " (id, name, amount) FROM STDIN", new StringReader(b.toString())), 1000L, "COPY row count");
        c.setAutoCommit(false);
        b.setLength(0);
        for (int i = 1001; i <= 1500; i++) {
          want = want.add(BigDecimal.valueOf(i));
          b.append(i).append(",\"csv ").append(i).append(", quoted\",").append(i).append('\n');
        }
        checkEq(cm.copyIn("COPY " + q(t) + " FROM STDIN WITH (FORMAT csv)", new StringReader(b.toString())), 500L, "CSV COPY row count");
        c.commit();
        c.setAutoCommit(true);
        String got = one(c, "SELECT count(*), sum(id), sum(amount) FROM " + q(t));
        checkEq(new BigDecimal(got.split("\\|")[2]).compareTo(want), 0, "sum(amount) " + got);
        checkEq(got.split("\\|")[0] + "|" + got.split("\\|")[1], "1500|" + (1500 * 1501 / 2), "count, sum(id)");
        checkEq(one(c, "SELECT name FROM " + q(t) + " WHERE id = 7"), "row 7\twith tab", "escaped text");
        expectSQLState("23505", () -> cm.copyIn("COPY " + q(t) + " FROM STDIN", new StringReader("5000\tnew\t1\n1\tdup\t1\n")));
        checkEq(one(c, "SELECT count(*) FROM " + q(t)), "1500", "rows after a failed COPY");
        checkReplicated(c, t);
      } finally {
        if (!c.getAutoCommit()) {
          c.rollback();
          c.setAutoCommit(true);
        }
        exec(c, "DROP TABLE IF EXISTS " + q(t));
      }
    }
  }

  static void copyOut() throws Exception {
    String t = table("copyout");
    try (Connection c = connect()) {
      try {
        exec(c, "CREATE TABLE " + q(t) + " (id int PRIMARY KEY, name text)");
        exec(c, "INSERT INTO " + q(t) + " SELECT g, 'n' || g FROM generate_series(1, 500) g");
        CopyManager cm = c.unwrap(PGConnection.class).getCopyAPI();
        StringWriter w = new StringWriter();
        checkEq(cm.copyOut("COPY " + q(t) + " TO STDOUT", w), 500L, "COPY OUT row count");
        String[] lines = w.toString().split("\n");
        Arrays.sort(lines, (x, y) -> Integer.parseInt(x.split("\t")[0]) - Integer.parseInt(y.split("\t")[0]));
        checkEq(lines.length + " " + lines[0], "500 1\tn1", "rows copied out");
        StringWriter w2 = new StringWriter();
        cm.copyOut("COPY (SELECT g, g * 2 FROM generate_series(1, 3) g) TO STDOUT WITH (FORMAT csv, HEADER)", w2);
        checkEq(w2.toString(), "g,?column?\n1,2\n2,4\n3,6\n", "CSV out");
      } finally {
        exec(c, "DROP TABLE IF EXISTS " + q(t));
      }
    }
  }

  static void largeResult() throws Exception {
    try (Connection c = connect(); PreparedStatement ps = c.prepareStatement("SELECT g, md5(g::text) FROM generate_series(1, ?) g")) {
      ps.setInt(1, 100000);
      long n = 0, sum = 0;
      String last = null;
      try (ResultSet r = ps.executeQuery()) {
        while (r.next()) {
          n++;
          sum += r.getInt(1);
          last = r.getString(2);
        }
      }
      checkEq(n + " " + sum, "100000 " + (100000L * 100001 / 2), "rows and sum");
      checkEq(last, one(c, "SELECT md5('100000')"), "md5 of the last row");
    }
  }

  static void cursor() throws Exception {
    // setFetchSize in a transaction: pgjdbc reads the portal in batches.
    try (Connection c = connect()) {
      c.setAutoCommit(false);
      try (PreparedStatement ps = c.prepareStatement("SELECT g FROM generate_series(1, ?) g")) {
        ps.setFetchSize(5000);
        ps.setInt(1, 100000);
        long n = 0, sum = 0;
        try (ResultSet r = ps.executeQuery()) {
          while (r.next()) {
            n++;
            sum += r.getInt(1);
          }
        }
        checkEq(n + " " + sum, "100000 " + (100000L * 100001 / 2), "rows and sum through a cursor");
      }
      c.commit();
    }
  }

  static void pipeline() throws Exception {
    // A Statement batch: pgjdbc sends every statement, then one Sync.
    String t = table("pipeline");
    try (Connection c = connect()) {
      try {
        exec(c, "CREATE TABLE " + q(t) + " (id int PRIMARY KEY, v text)");
        try (Statement s = c.createStatement()) {
          for (int i = 1; i <= 50; i++) s.addBatch("INSERT INTO " + q(t) + " VALUES (" + i + ", 'v" + i + "')");
          s.addBatch("UPDATE " + q(t) + " SET v = 'u' WHERE id <= 10");
          int[] counts = s.executeBatch();
          checkEq(counts.length + " " + counts[50], "51 10", "batch update counts");
        }
        c.setAutoCommit(false);
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + q(t) + " VALUES (?, ?)")) {
          for (int i = 51; i <= 100; i++) {
            ps.setInt(1, i);
            ps.setString(2, "w" + i);
            ps.addBatch();
          }
          ps.executeBatch();
        }
        c.commit();
        c.setAutoCommit(true);
        checkEq(one(c, "SELECT count(*), count(*) FILTER (WHERE v = 'u') FROM " + q(t)), "100|10", "rows written by the batches");
        checkReplicated(c, t);
      } finally {
        if (!c.getAutoCommit()) {
          c.rollback();
          c.setAutoCommit(true);
        }
        exec(c, "DROP TABLE IF EXISTS " + q(t));
      }
    }
  }

  static void errors() throws Exception {
    String t = table("errors");
    try (Connection c = connect()) {
      try {
        exec(c, "CREATE TABLE " + q(t) + " (id int PRIMARY KEY)");
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + q(t) + " VALUES (?)")) {
          ps.setInt(1, 1);
          ps.executeUpdate();
          SQLException e = expectSQLState("23505", ps::executeUpdate);
          checkEq(((PSQLException) e).getServerErrorMessage().getConstraint(), t + "_pkey", "constraint name");
          expectSQLState("23505", () -> exec(c, "INSERT INTO " + q(t) + " VALUES (1)"));
          expectSQLState("22012", () -> one(c, "SELECT 1/0"));
          expectSQLState("42P01", () -> one(c, "SELECT * FROM compat_no_such_table"));
          expectSQLState("42601", () -> one(c, "SELEC 1"));
          c.setAutoCommit(false);
          expectSQLState("23505", ps::executeUpdate);
          expectSQLState("25P02", () -> one(c, "SELECT 1"));
          c.rollback();
          c.setAutoCommit(true);
          checkEq(one(c, "SELECT 42"), "42", "the session works after errors");
        }
      } finally {
        if (!c.getAutoCommit()) {
          c.rollback();
          c.setAutoCommit(true);
        }
        exec(c, "DROP TABLE IF EXISTS " + q(t));
      }
    }
  }

  static void cancel() throws Exception {
    try (Connection c = connect(); Statement s = c.createStatement()) {
      ExecutorService ex = Executors.newSingleThreadExecutor();
      try {
        long start = System.nanoTime();
        Future<?> f = ex.submit(() -> {
          Thread.sleep(500);
          s.cancel();
          return null;
        });
        SQLException e = expectSQLState("57014", () -> s.executeQuery("SELECT pg_sleep(10)"));
        f.get(5, TimeUnit.SECONDS);
        double elapsed = (System.nanoTime() - start) / 1e9;
        check(elapsed < 5, "Statement.cancel() took " + elapsed + "s (" + e.getMessage() + ")");
        checkEq(one(c, "SELECT 1"), "1", "the session works after the cancel");
        // setQueryTimeout: pgjdbc's own timer sends the cancel request.
        start = System.nanoTime();
        s.setQueryTimeout(1);
        expectSQLState("57014", () -> s.executeQuery("SELECT pg_sleep(10)"));
        elapsed = (System.nanoTime() - start) / 1e9;
        check(elapsed < 5, "setQueryTimeout(1) took " + elapsed + "s");
        s.setQueryTimeout(0);
        checkEq(one(c, "SELECT 1"), "1", "the session works after the query timeout");
      } finally {
        ex.shutdownNow();
      }
    }
  }

  static void statementTimeout() throws Exception {
    try (Connection c = connect()) {
      exec(c, "SET statement_timeout = 200");
      long start = System.nanoTime();
      expectSQLState("57014", () -> one(c, "SELECT pg_sleep(5)"));
      double elapsed = (System.nanoTime() - start) / 1e9;
      check(elapsed < 3, "the timeout took " + elapsed + "s");
      exec(c, "RESET statement_timeout");
      checkEq(one(c, "SHOW statement_timeout"), "0", "statement_timeout after RESET");
    }
  }

  static void retry40001() throws Exception {
    String t = table("counter");
    int perWorker = 3;
    try (Connection a = connect(); Connection b = connect(port2, null)) {
      try {
        exec(a, "CREATE TABLE " + q(t) + " (id int PRIMARY KEY, n int NOT NULL)");
        exec(a, "INSERT INTO " + q(t) + " VALUES (1, 0)");
        String sel = "SELECT n FROM " + q(t) + " WHERE id = 1";
        poll(() -> one(b, sel) != null, "the counter row on the second connection");
        CyclicBarrier barrier = new CyclicBarrier(2);
        AtomicInteger ok = new AtomicInteger(), conflicts = new AtomicInteger();
        ExecutorService ex = Executors.newFixedThreadPool(2);
        List<Future<?>> fs = new ArrayList<>();
        for (Connection c : List.of(a, b)) {
          fs.add(ex.submit(() -> {
            boolean first = true;
            int done = 0;
            c.setAutoCommit(false);
            c.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
            try (PreparedStatement r = c.prepareStatement(sel);
                 PreparedStatement u = c.prepareStatement("UPDATE " + q(t) + " SET n = ? WHERE id = 1")) {
              for (int attempt = 1; done < perWorker; attempt++) {
                if (attempt > 200) throw new Fail("no success after 200 attempts");
                try {
                  int n;
                  try (ResultSet rs = r.executeQuery()) {
                    rs.next();
                    n = rs.getInt(1);
                  }
                  if (first) {
                    first = false;
                    barrier.await(20, TimeUnit.SECONDS);
                  } else {
                    Thread.sleep(ThreadLocalRandom.current().nextInt(30));
                  }
                  u.setInt(1, n + 1);
                  u.executeUpdate();
                  c.commit();
                  done++;
                  ok.incrementAndGet();
                } catch (SQLException e) {
                  if (!"40001".equals(e.getSQLState())) throw e;
                  conflicts.incrementAndGet();
                  c.rollback();
                  Thread.sleep(10 + ThreadLocalRandom.current().nextInt(40));
                }
              }
            } finally {
              c.rollback();
              c.setAutoCommit(true);
            }
            return null;
          }));
        }
        try {
          for (Future<?> f : fs) f.get(60, TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
          throw new Fail("worker failed: " + e.getCause());
        } finally {
          ex.shutdownNow();
        }
        checkEq(ok.get(), 2 * perWorker, "successful increments");
        check(conflicts.get() >= 1, "no 40001: the concurrent updates did not conflict");
        for (Connection c : List.of(a, b)) {
          poll(() -> String.valueOf(ok.get()).equals(one(c, sel)), "counter == " + ok.get() + " (successful increments)");
        }
        System.err.println("retry_40001: " + ok.get() + " increments, " + conflicts.get() + " serialization failures retried");
      } finally {
        dropRetrying(a, t);
      }
    }
  }

  /**
   * DROP TABLE, retried on 40001 as a client would: right after writes on the
   * other replica, the DDL's snapshot may be labelled before this replica
   * counted the last of them applied (Tashkent §6.2, conservative versions).
   */
  static void dropRetrying(Connection c, String t) throws Exception {
    for (int attempt = 1; ; attempt++) {
      try {
        exec(c, "DROP TABLE IF EXISTS " + q(t));
        return;
      } catch (SQLException e) {
        if (!"40001".equals(e.getSQLState()) || attempt == 5) throw e;
        Thread.sleep(50);
      }
    }
  }

  static void noPkWrite() throws Exception {
    // A table without a primary key takes inserts (equal rows too), updates
    // and deletes, on the cluster as on PostgreSQL.
    String t = table("nopk");
    try (Connection c = connect()) {
      try {
        exec(c, "CREATE TABLE " + q(t) + " (a int, b text)");
        try (PreparedStatement ps = c.prepareStatement("INSERT INTO " + q(t) + " VALUES (?, 'x'), (?, 'x')")) {
          ps.setInt(1, 1);
          ps.setInt(2, 1);
          ps.executeUpdate();
        }
        exec(c, "UPDATE " + q(t) + " SET b = 'y' WHERE ctid = (SELECT min(ctid) FROM " + q(t) + ")");
        try (PreparedStatement ps = c.prepareStatement("DELETE FROM " + q(t) + " WHERE b = ?")) {
          ps.setString(1, "x");
          ps.executeUpdate();
        }
        checkEq(one(c, "SELECT count(*)::text || min(b) FROM " + q(t)), "1y", "rows left");
      } finally {
        exec(c, "DROP TABLE IF EXISTS " + q(t));
      }
    }
  }

  static void report(String name, String status, String detail) {
    String line = "COMPAT-RESULT " + name + " " + status;
    if (detail != null && !detail.isEmpty()) line += " " + detail.replaceAll("\\s+", " ");
    System.out.println(line);
    System.out.flush();
  }

  public static void main(String[] args) throws Exception {
    Map<String, SqlRunnable> scenarios = new LinkedHashMap<>();
    scenarios.put("connect", Main::connectScenario);
    scenarios.put("simple_query", Main::simpleQuery);
    scenarios.put("extended_query", Main::extendedQuery);
    scenarios.put("prepared", Main::prepared);
    scenarios.put("transactions", Main::transactions);
    scenarios.put("copy_in", Main::copyIn);
    scenarios.put("copy_out", Main::copyOut);
    scenarios.put("large_result", Main::largeResult);
    scenarios.put("cursor", Main::cursor);
    scenarios.put("pipeline", Main::pipeline);
    scenarios.put("errors", Main::errors);
    scenarios.put("cancel", Main::cancel);
    scenarios.put("statement_timeout", Main::statementTimeout);
    scenarios.put("retry_40001", Main::retry40001);
    scenarios.put("no_pk_write", Main::noPkWrite);
    System.err.println("java " + System.getProperty("java.version") + ", pgjdbc " + org.postgresql.util.DriverInfo.DRIVER_VERSION);
    int failed = 0;
    ExecutorService runner = Executors.newCachedThreadPool(r -> {
      Thread th = new Thread(r);
      th.setDaemon(true);
      return th;
    });
    for (String name : SCENARIOS) {
      if (!only.isEmpty() && !only.contains(name)) continue;
      SqlRunnable fn = scenarios.get(name);
      synchronized (open) { open.clear(); }
      long start = System.nanoTime();
      Future<?> f = runner.submit(() -> { fn.run(); return null; });
      try {
        f.get(expectFail.contains(name) ? 4 : 90, TimeUnit.SECONDS);
        report(name, "PASS", String.format("%.2fs", (System.nanoTime() - start) / 1e9));
      } catch (TimeoutException e) {
        failed++;
        f.cancel(true);
        synchronized (open) {
          for (Connection c : open) {
            try { c.abort(Runnable::run); } catch (SQLException ignored) { }
          }
        }
        report(name, "FAIL", "timed out (hung)");
      } catch (java.util.concurrent.ExecutionException e) {
        failed++;
        Throwable cause = e.getCause();
        cause.printStackTrace();
        String state = cause instanceof SQLException ? " (SQLSTATE " + ((SQLException) cause).getSQLState() + ")" : "";
        report(name, "FAIL", cause.getClass().getSimpleName() + ": " + cause.getMessage() + state);
      }
    }
    try (Connection c = connect(); Statement s = c.createStatement()) {
      StringBuilder b = new StringBuilder("DROP TABLE IF EXISTS ");
      for (int i = 0; i < TABLES.size(); i++) b.append(i > 0 ? ", " : "").append(q(table(TABLES.get(i))));
      s.execute(b.toString());
    } catch (SQLException e) {
      System.err.println("cleanup failed: " + e);
      failed++;
    }
    System.exit(failed > 0 ? 1 : 0);
  }
}
