package guarantees_test

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tashkent-db/tashkent/internal/agent"
	"github.com/tashkent-db/tashkent/internal/clustertest"
)

// roleCluster is a 2-replica cluster with an application role, mallory,
// that has SELECT, INSERT, UPDATE, DELETE on public.notes, CREATE on
// schema public, and owns public.owned (a table a superuser created for
// her). Replica i's agent trusts every role with DDL if trust(i).
func roleCluster(t *testing.T, trust func(i int) bool) *cluster {
	t.Helper()
	c := start(t, 2, clustertest.Options{Agent: func(i int, cfg *agent.Config) {
		cfg.TrustDDLRoles = trust != nil && trust(i)
	}})
	admin := c.Connect(0)
	for _, sql := range []string{
		`CREATE ROLE mallory LOGIN`,
		`GRANT CREATE ON SCHEMA public TO mallory`,
		`CREATE TABLE public.notes (id int PRIMARY KEY, body text)`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON public.notes TO mallory`,
		`CREATE TABLE public.owned (id int PRIMARY KEY, v text)`,
		`ALTER TABLE public.owned OWNER TO mallory`,
	} {
		execSQL(t, admin, sql)
	}
	c.converge()
	return c
}

// mallory connects to replica i as the role mallory.
func (c *cluster) mallory(i int) *pgx.Conn {
	c.t.Helper()
	return c.connectAs(i, "mallory", nil)
}
