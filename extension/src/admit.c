/*
 * admit.c: new connections wait until the replica has caught up.
 *
 * After its server starts, a replica holds the versions its database kept
 * and nothing newer; the agent replays the rest from the certifier's log.
 * A client admitted meanwhile would read a state far behind the cluster's
 * (a stale read beyond the staleness tashkent bounds), so connections are
 * refused with 57P03 until the agent opens the gate (tashkent.set_admitting),
 * as a PostgreSQL that is still starting up refuses them. The roles in
 * tashkent.recovery_roles (the agent's own among them) are let in.
 *
 * The same hook, which runs in every client backend once PostgresMain
 * set up its signal handlers, makes the backend take doom signals
 * (doom.c).
 */
#include "tashkent.h"

/*
 * libpq-be.h includes the GSSAPI headers when the server was built with
 * GSSAPI, and tashkent builds without them (Debian's postgresql-server-dev
 * does not bring them). Port's layout does not depend on it: its gss
 * member is a pointer either way, "for extension ABI compatibility" as
 * libpq-be.h says, and only Port's names are read here.
 */
#undef ENABLE_GSS
#include "libpq/auth.h"
#include "libpq/libpq-be.h"
#include "utils/builtins.h"
#include "utils/varlena.h"

static ClientAuthentication_hook_type prev_client_authentication_hook = NULL;

static bool
recovery_role(const char *user)
{
	char	   *copy;
	List	   *names;
	ListCell   *lc;
	bool		found = false;

	if (tk_recovery_roles == NULL || user == NULL)
		return false;
	copy = pstrdup(tk_recovery_roles);
	if (!SplitIdentifierString(copy, ',', &names))
		return false;
	foreach(lc, names)
	{
		if (strcmp((const char *) lfirst(lc), user) == 0)
			found = true;
	}
	return found;
}

static void
admit(Port *port, int status)
{
	bool		admitting;
	char		reason[sizeof(tk_shared->admit_reason)];

	if (prev_client_authentication_hook)
		prev_client_authentication_hook(port, status);
	if (status != STATUS_OK || tk_shared == NULL)
		return;
	tk_doom_take_signals();
	LWLockAcquire(tk_shared->lock, LW_SHARED);
	admitting = tk_shared->admitting;
	strlcpy(reason, tk_shared->admit_reason, sizeof(reason));
	LWLockRelease(tk_shared->lock);
	if (admitting || recovery_role(port->user_name))
		return;
	ereport(FATAL,
			(errcode(ERRCODE_CANNOT_CONNECT_NOW),
			 errmsg("this replica is not serving clients yet: %s", reason),
			 errdetail("Its tashkent agent admits clients once the replica holds every version the cluster had made durable."),
			 errhint("Connect to another replica, or retry in a moment.")));
}

void
tk_admit_init(void)
{
	prev_client_authentication_hook = ClientAuthentication_hook;
	ClientAuthentication_hook = admit;
}
