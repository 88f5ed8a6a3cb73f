package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// The bank workload: transfers between accounts, run on every replica,
// and reads of all balances in one snapshot. Under snapshot isolation
// (Tashkent §2: GSI) every snapshot is the state after some prefix of the
// global commit order, so every read sums to the initial total; two
// transfers from one account write the same row, so the certifier lets
// only one of them commit and no balance goes negative.

const (
	bankAccounts       = 5
	bankInitialBalance = 100
	// bankViolationsKept bounds how many violations are described.
	bankViolationsKept = 20
)

type bank struct {
	table string

	mu         sync.Mutex
	reads      int
	transfers  map[OpType]int
	violations []string
}

func newBank(table string) *bank { return &bank{table: table, transfers: map[OpType]int{}} }

func (b *bank) total() int64 { return bankAccounts * bankInitialBalance }

func (b *bank) setupSQL() []string {
	rows := make([]string, bankAccounts)
	for i := range rows {
		rows[i] = fmt.Sprintf("(%d, %d)", i, bankInitialBalance)
	}
	return []string{
		fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (id int PRIMARY KEY, balance bigint NOT NULL)", b.table),
		fmt.Sprintf("INSERT INTO %s (id, balance) VALUES %s ON CONFLICT (id) DO NOTHING", b.table, strings.Join(rows, ", ")),
	}
}

// step runs a transfer or a read on c.
func (b *bank) step(ctx context.Context, c *client) {
	if c.rng.IntN(2) == 0 {
		b.read(ctx, c)
		return
	}
	from := c.rng.IntN(bankAccounts)
	to := (from + 1 + c.rng.IntN(bankAccounts-1)) % bankAccounts
	amount := int64(1 + c.rng.IntN(20))
	t, _ := c.txn(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var balance int64
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT balance FROM %s WHERE id = $1", b.table), from).Scan(&balance); err != nil {
			return err
		}
		if balance < amount {
			return nil // nothing to move: a read-only transaction
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("UPDATE %s SET balance = balance - $1 WHERE id = $2", b.table), amount, from); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, fmt.Sprintf("UPDATE %s SET balance = balance + $1 WHERE id = $2", b.table), amount, to)
		return err
	})
	b.mu.Lock()
	b.transfers[t]++
	b.mu.Unlock()
}

// read reads every balance in one snapshot and checks the invariant.
func (b *bank) read(ctx context.Context, c *client) {
	var balances map[int]int64
	t, _ := c.txn(ctx, func(ctx context.Context, conn *pgx.Conn) error {
		var err error
		balances, err = readBalances(ctx, conn, b.table)
		return err
	})
	if t != OK {
		return
	}
	b.check(c.ep.Replica, balances)
}

// check records a violation if a snapshot's balances break the invariant.
func (b *bank) check(where string, balances map[int]int64) {
	var sum int64
	var bad []string
	for id, v := range balances {
		sum += v
		if v < 0 {
			bad = append(bad, fmt.Sprintf("account %d is negative (%d)", id, v))
		}
	}
	if len(balances) != bankAccounts {
		bad = append(bad, fmt.Sprintf("%d accounts instead of %d", len(balances), bankAccounts))
	}
	if sum != b.total() {
		bad = append(bad, fmt.Sprintf("balances sum to %d instead of %d", sum, b.total()))
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reads++
	if len(bad) > 0 && len(b.violations) < bankViolationsKept {
		b.violations = append(b.violations, fmt.Sprintf("read on %s: %s (balances %v)", where, strings.Join(bad, "; "), balances))
	}
}

func readBalances(ctx context.Context, conn *pgx.Conn, table string) (map[int]int64, error) {
	rows, err := conn.Query(ctx, fmt.Sprintf("SELECT id, balance FROM %s", table))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[int]int64{}
	for rows.Next() {
		var id int
		var v int64
		if err := rows.Scan(&id, &v); err != nil {
			return nil, err
		}
		out[id] = v
	}
	return out, rows.Err()
}

// BankResult summarizes the bank workload.
type BankResult struct {
	Reads      int            `json:"reads"`
	Transfers  map[OpType]int `json:"transfers"`
	Violations []string       `json:"violations,omitempty"`
}

func (b *bank) result() BankResult {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := map[OpType]int{}
	for k, v := range b.transfers {
		t[k] = v
	}
	return BankResult{Reads: b.reads, Transfers: t, Violations: append([]string(nil), b.violations...)}
}
