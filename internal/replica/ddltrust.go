package replica

import (
	"context"
	"fmt"
)

// SetDDLTrust records whether this database lets roles that are not
// superusers run DDL. The other replicas run replicated DDL as a
// superuser, so by default the extension refuses (42501) DDL that would be
// replicated from any other role (extension/src/ddlguard.c, whose
// tashkent.role_may_replicate_ddl() reads tashkent.ddl_trust). Run it on a
// superuser's connection. The setting is this replica's own: nothing in
// schema tashkent is captured. The agent runs it at every start, from its
// --trust-ddl-roles.
func SetDDLTrust(ctx context.Context, q Querier, trustRoles bool) error {
	const sql = `INSERT INTO tashkent.ddl_trust (trust_roles) VALUES ($1)
		ON CONFLICT (id) DO UPDATE SET trust_roles = EXCLUDED.trust_roles`
	if _, err := q.Exec(ctx, sql, trustRoles); err != nil {
		return fmt.Errorf("replica: record whether DDL of roles that are not superusers is trusted: %w", err)
	}
	return nil
}
