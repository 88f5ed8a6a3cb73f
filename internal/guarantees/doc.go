// Package guarantees tests tashkent's guarantees on the whole path, the
// way users meet them: real clients connected to the PostgreSQL servers of
// a cluster's replicas (internal/clustertest: replicas with the
// extension, an in-process certifier, an agent per replica). Each test
// names what it proves; docs/GUARANTEES.md states the claims.
//
// The package has no code of its own; its tests are the whole of it:
//
//	TASHKENT_PG_INCLUDEDIR=$(bash scripts/pg-server-headers.sh) go test -race ./internal/guarantees/
//
// What is where:
//
//   - replication_test.go: writes reach every replica (mw and base);
//     concurrent updates of one row on two replicas commit exactly one;
//     no lost update; SELECT FOR UPDATE then write.
//   - abort_test.go: what a certification abort says, and that it is
//     answered once the version it lost to is applied.
//   - visibility_test.go: readers never see partial or out-of-order
//     commits (no Long Fork).
//   - foreignkey_test.go, unique_test.go: foreign keys and unique values
//     across replicas.
//   - ddl_test.go, temp_test.go: DDL replicated in order, inside code
//     too; temporary objects local; refused mixes; savepoints; deferred
//     constraints.
//   - triggers_test.go: user triggers writing their own table, nested.
//   - roles_test.go: the DDL guard, the trusted-roles setting, a role's
//     code never run as a superuser on apply.
//   - sequences_test.go, settings_test.go, copy_test.go: sequences never
//     collide; session settings do not change what replicates; COPY.
//   - lockwatch_test.go: remote writesets take priority over local
//     transactions (40001), and a certified transaction in an earlier
//     version's way gives way (08007).
//   - pgbench_test.go: TPC-B on three replicas in every protocol mode.
//   - faults_test.go: kill -9 of PostgreSQL, of a backend holding the
//     commit turn, stop of an agent, kill -9 of the certifier, under load:
//     no acknowledged commit lost.
//   - state_test.go: a commit's state (durable, committed, failed,
//     unknown) across a certifier restart; wait_durable; the durability
//     feed through an agent restart.
//   - recovery_test.go: a rebuilt replica catches up from the log; a
//     replica that cannot apply a version refuses clients (57P03).
//   - bypass_test.go: every way around replication an ordinary role or a
//     superuser without tashkent.maintenance might try fails, or its write
//     is certified and replicated; maintenance stays local and is logged.
//     TestNoWayAroundReplication logs each attempt's outcome.
package guarantees
