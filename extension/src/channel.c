/*
 * channel.c: the socket between a backend and its replica's agent.
 *
 * Each backend that commits a writing transaction opens one Unix stream
 * socket to the agent (tashkent.agent_socket) and keeps it for its life.
 * Messages are frames: a 4-byte big-endian length of what follows, a type
 * byte, and the payload (integers big-endian). The agent's side is
 * internal/agent/wire in Go; the two must agree byte for byte.
 *
 *   backend -> agent
 *     'H' hello     u32 protocol, i32 pid, u8 role (0 session, 1 applier,
 *                   2 durability feed), u16 length + database name (the
 *                   feed's is empty: it serves the whole server)
 *     'C' certify   u64 start version, then the writeset: an encoded
 *                   tashkent.certifier.v1.Writeset to the end of the frame
 *     'F' fragment  a fragment of a streamed writeset (stream.c): an
 *                   encoded Writeset to the end of the frame; one or more,
 *                   in apply order, each followed by the next or by 'W'
 *     'W' certify streamed  u64 start version, u32 fragments, u64 bytes
 *                   (the fragments' payloads' total size), then the
 *                   certified writeset (what the transaction is certified
 *                   on, never applied): an encoded Writeset to the end of
 *                   the frame. Answered by 'D', whose version, for a
 *                   commit, is the last of the fragments' consecutive
 *                   versions
 *     'A' abandon   u64 version: this backend will not commit the version
 *                   it was told to commit; the agent applies it instead
 *     'S' sync      u32 milliseconds: the cluster's durable version is
 *                   wanted within them (tashkent.sync_wait, causal.c)
 *     'K' hold      u64 version, u32 milliseconds: hold this replica's
 *                   commits after the version (or after the last one
 *                   already under way, if later) for at most that long
 *                   (tashkent.hold_commits, hold.c)
 *     'R' release   no payload: end this backend's hold
 *     'Q' state     u64 version, u8 epoch given, u64 epoch: the state of
 *                   the transaction committed as that version (in that
 *                   epoch; if none is given, in the epoch the replica's
 *                   history holds at the version): tashkent.txn_state
 *   agent -> backend
 *     'h' welcome   u8 accepted, u64 agent generation, u16 length + text
 *     'D' decision  u8 kind (TkDecisionKind), u64 version, u64 epoch (a
 *                   commit's: the epoch that certified it), u64 the
 *                   certifier's durable version the agent knew when it
 *                   answered (a safe commit at or below it does not wait,
 *                   safe.c), u8 abort reason, u32 length + detail
 *     's' synced    u8 known, u64 the certifier's durable version,
 *                   u16 length + why not (when not known)
 *     'k' held      u8 held, u64 the version commits are held after,
 *                   u16 length + why not (when not held)
 *     'q' state     u8 state (TkTxnState), u8 final (the state never
 *                   changes on this replica: durable, failed, or unknown
 *                   for good), u64 the certifier's durable version as the
 *                   agent knows it, u16 length + why (TK_TXN_UNAVAILABLE:
 *                   why the agent cannot judge now; a final unknown: why
 *                   nothing here can tell)
 *   agent -> feed (the durability feed, feed.c, after its welcome)
 *     'V' durable   u64 the certifier's durable version: at once, then
 *                   at each advance (once the socket's buffer is full, a
 *                   feed that reads slowly gets the latest only)
 *     'X' failed    u64 every version above it failed (PG_UINT64_MAX:
 *                   none is known to): at once, then at each change,
 *                   always before a 'V' that follows the change (safe.c)
 *
 * A wait for a certification absorbs cancels, as the turn does (turn.c):
 * once the writeset is sent, the outcome is the certifier's, and the
 * backend must learn it. Sending a streamed writeset's fragments does
 * not: nothing is certified before 'W', and a backend that stops midway
 * closes the connection, which drops what the agent staged. A wait for a
 * sync does not either: nothing is decided. Termination and postmaster
 * death end the wait; the agent then sees the socket close and applies
 * the version itself if it committed.
 */
#include "tashkent.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <fcntl.h>
#include <errno.h>

#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "port/pg_bswap.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

/* The largest frame the agent may send: a decision with its detail. */
#define MAX_REPLY_FRAME (64 * 1024)

/* How long a new connection's hello may take. */
#define HELLO_TIMEOUT_MS 10000

/* What a connection to the agent is for (the hello's role). */
#define TK_ROLE_SESSION 0
#define TK_ROLE_APPLIER 1
#define TK_ROLE_FEED 2

static int	agent_sock = -1;
static uint64 agent_generation = 0;

/*
 * A request is out and its answer not read yet. An error in between (a
 * cancel during the hello, a termination, a malformed answer) leaves the
 * answer in the socket, where the next request would read it as its own:
 * the next exchange closes such a connection first and opens a new one.
 * The agent then sees the socket close, and applies a version it had
 * decided for the request if the replica does not show it committed.
 */
static bool exchange_open = false;

/*
 * What a wait for the agent watches: the socket, this backend's latch and
 * the postmaster. Made once per connection, as PostgreSQL does for its
 * client socket (WaitLatchOrSocket would make and free an epoll set, three
 * system calls more, at every wait of every commit).
 */
static WaitEventSet *agent_wait = NULL;
static int	agent_wait_socket_pos = -1;
static uint32 agent_wait_socket_events = 0;

static void
close_agent(void)
{
	exchange_open = false;
	if (agent_wait != NULL)
		FreeWaitEventSet(agent_wait);
	agent_wait = NULL;
	if (agent_sock >= 0)
		close(agent_sock);
	agent_sock = -1;
}

static void
make_wait_set(void)
{
	agent_wait = CreateWaitEventSet(TopMemoryContext, 3);
	agent_wait_socket_events = WL_SOCKET_READABLE;
	agent_wait_socket_pos = AddWaitEventToSet(agent_wait, agent_wait_socket_events, agent_sock, NULL, NULL);
	AddWaitEventToSet(agent_wait, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(agent_wait, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
}

static void
put_u8(StringInfo buf, uint8 v)
{
	appendStringInfoChar(buf, (char) v);
}

static void
put_u16(StringInfo buf, uint16 v)
{
	uint16		n = pg_hton16(v);

	appendBinaryStringInfo(buf, (char *) &n, 2);
}

static void
put_u32(StringInfo buf, uint32 v)
{
	uint32		n = pg_hton32(v);

	appendBinaryStringInfo(buf, (char *) &n, 4);
}

static void
put_u64(StringInfo buf, uint64 v)
{
	uint64		n = pg_hton64(v);

	appendBinaryStringInfo(buf, (char *) &n, 8);
}

/* A frame's start: room for the length, then the type. */
static void
begin_frame(StringInfo buf, char type)
{
	initStringInfo(buf);
	put_u32(buf, 0);
	put_u8(buf, (uint8) type);
}

static void
end_frame(StringInfo buf)
{
	uint32		n = pg_hton32((uint32) (buf->len - 4));

	memcpy(buf->data, &n, 4);
}

/* tk_ms_left: the milliseconds until deadline (0 or less: passed). */
long
tk_ms_left(TimestampTz deadline)
{
	long		secs;
	int			usecs;

	TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
	return secs * 1000 + usecs / 1000;
}

/*
 * wait_socket waits until the agent's socket is ready for `event` or the
 * deadline passed (false). Cancels are absorbed once a request is out
 * (absorb), reported as usual otherwise.
 */
static bool
wait_socket(int event, TimestampTz deadline, bool absorb, bool *warned)
{
	if (event != agent_wait_socket_events)
	{
		ModifyWaitEvent(agent_wait, agent_wait_socket_pos, event, NULL);
		agent_wait_socket_events = event;
	}
	for (;;)
	{
		long		timeout = tk_ms_left(deadline);
		WaitEvent	occurred;
		int			rc = 0;

		if (timeout <= 0)
			return false;
		if (WaitEventSetWait(agent_wait, timeout, &occurred, 1, PG_WAIT_EXTENSION) == 1)
			rc = occurred.events;
		if (rc & WL_LATCH_SET)
			ResetLatch(MyLatch);
		if (absorb && QueryCancelPending)
		{
			QueryCancelPending = false;
			if (!*warned)
				ereport(WARNING,
						(errmsg("canceling the wait for the certifier's decision is not possible"),
						 errdetail("The transaction's writeset is being certified; the commit waits for the outcome.")));
			*warned = true;
		}
		CHECK_FOR_INTERRUPTS();
		if (rc & event)
			return true;
	}
}

/* send_all sends buf; false when the socket broke. */
static bool
send_all(StringInfo buf, TimestampTz deadline, bool absorb, bool *warned)
{
	int			off = 0;

	while (off < buf->len)
	{
		ssize_t		n = send(agent_sock, buf->data + off, buf->len - off, MSG_NOSIGNAL);

		if (n > 0)
		{
			off += n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		{
			if (!wait_socket(WL_SOCKET_WRITEABLE, deadline, absorb, warned))
				return false;
			continue;
		}
		return false;
	}
	return true;
}

/* recv_exact reads len bytes into out; false on EOF, error or deadline. */
static bool
recv_exact(char *out, size_t len, TimestampTz deadline, bool absorb, bool *warned)
{
	size_t		off = 0;

	while (off < len)
	{
		ssize_t		n = recv(agent_sock, out + off, len - off, 0);

		if (n > 0)
		{
			off += n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		{
			if (!wait_socket(WL_SOCKET_READABLE, deadline, absorb, warned))
				return false;
			continue;
		}
		return false;
	}
	return true;
}

/* recv_frame reads one frame into buf (type byte first); false if broken. */
static bool
recv_frame(StringInfo buf, TimestampTz deadline, bool absorb, bool *warned)
{
	uint32		len;

	if (!recv_exact((char *) &len, 4, deadline, absorb, warned))
		return false;
	len = pg_ntoh32(len);
	if (len < 1 || len > MAX_REPLY_FRAME)
		return false;
	resetStringInfo(buf);
	enlargeStringInfo(buf, len);
	if (!recv_exact(buf->data, len, deadline, absorb, warned))
		return false;
	buf->len = len;
	buf->cursor = 0;
	return true;
}

static uint8
get_u8(StringInfo buf)
{
	if (buf->cursor + 1 > buf->len)
		elog(ERROR, "tashkent: truncated message from the agent");
	return (uint8) buf->data[buf->cursor++];
}

static uint16
get_u16(StringInfo buf)
{
	uint16		n;

	if (buf->cursor + 2 > buf->len)
		elog(ERROR, "tashkent: truncated message from the agent");
	memcpy(&n, buf->data + buf->cursor, 2);
	buf->cursor += 2;
	return pg_ntoh16(n);
}

static uint32
get_u32(StringInfo buf)
{
	uint32		n;

	if (buf->cursor + 4 > buf->len)
		elog(ERROR, "tashkent: truncated message from the agent");
	memcpy(&n, buf->data + buf->cursor, 4);
	buf->cursor += 4;
	return pg_ntoh32(n);
}

static uint64
get_u64(StringInfo buf)
{
	uint64		n;

	if (buf->cursor + 8 > buf->len)
		elog(ERROR, "tashkent: truncated message from the agent");
	memcpy(&n, buf->data + buf->cursor, 8);
	buf->cursor += 8;
	return pg_ntoh64(n);
}

static char *
get_text(StringInfo buf, uint32 len)
{
	char	   *s;

	if (buf->cursor + (int) len > buf->len)
		elog(ERROR, "tashkent: truncated message from the agent");
	s = pnstrdup(buf->data + buf->cursor, len);
	buf->cursor += len;
	return s;
}

/*
 * What the backend wants from the agent when it cannot reach it: a
 * certification (role 0, at commit), a sync (tashkent.sync_wait) or a hold
 * (tashkent.hold_commits).
 */
typedef enum TkAsk
{
	TK_ASK_CERTIFY,
	TK_ASK_SYNC,
	TK_ASK_HOLD,
	TK_ASK_STATE,
	TK_ASK_FEED
} TkAsk;

static TkAsk asking = TK_ASK_CERTIFY;

static void
agent_unavailable(const char *why)
{
	if (asking == TK_ASK_FEED)
		ereport(ERROR,
				(errcode(ERRCODE_CANNOT_CONNECT_NOW),
				 errmsg("the durability feed cannot reach this replica's tashkent agent: %s", why),
				 errhint("tashkent.agent_socket is \"%s\"; the feed retries until the agent listens.",
						 tk_agent_socket)));
	if (asking == TK_ASK_STATE)
		ereport(ERROR,
				(errcode(ERRCODE_CANNOT_CONNECT_NOW),
				 errmsg("this replica's tashkent agent is not available: %s", why),
				 errdetail("A transaction's state is judged by the agent, which keeps the replica's history."),
				 errhint("Start the agent (tashkent agent), or check its log; tashkent.agent_socket is \"%s\".",
						 tk_agent_socket)));
	if (asking == TK_ASK_HOLD)
		ereport(ERROR,
				(errcode(ERRCODE_CANNOT_CONNECT_NOW),
				 errmsg("this replica's tashkent agent is not available: %s", why),
				 errdetail("Commits are held by the agent, which orders them."),
				 errhint("Start the agent (tashkent agent), or check its log; tashkent.agent_socket is \"%s\".",
						 tk_agent_socket)));
	if (asking == TK_ASK_SYNC)
		ereport(ERROR,
				(errcode(ERRCODE_CANNOT_CONNECT_NOW),
				 errmsg("this replica's tashkent agent is not available: %s", why),
				 errdetail("tashkent.sync_wait is on: each transaction first asks the agent for the cluster's durable version."),
				 errhint("Start the agent (tashkent agent), or check its log; tashkent.agent_socket is \"%s\". SET tashkent.sync_wait = off reads without waiting.",
						 tk_agent_socket)));
	ereport(ERROR,
			(errcode(ERRCODE_CANNOT_CONNECT_NOW),
			 errmsg("this replica's tashkent agent is not available: %s", why),
			 errdetail("Writes to replicated tables are certified by the agent at commit; reads do not need it."),
			 errhint("Start the agent (tashkent agent), or check its log; tashkent.agent_socket is \"%s\".",
					 tk_agent_socket)));
}

/* An idle connection that the agent closed (it restarted) reads EOF. */
static bool
agent_alive(void)
{
	char		c;
	ssize_t		n;

	if (exchange_open)
		close_agent();
	if (agent_sock < 0)
		return false;
	n = recv(agent_sock, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n == 0)
		return false;
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		return false;
	return true;
}

/*
 * connect_agent opens the socket and says hello as `role` from database
 * `db`, by `deadline` at the latest (0: within HELLO_TIMEOUT_MS).
 */
static void
connect_agent(uint8 role, const char *db, TimestampTz deadline)
{
	struct sockaddr_un addr;
	StringInfoData buf;
	TimestampTz hello_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), HELLO_TIMEOUT_MS);
	bool		warned = false;
	bool		accepted;
	char	   *text;

	close_agent();
	if (tk_agent_socket == NULL || tk_agent_socket[0] == '\0')
		agent_unavailable("tashkent.agent_socket is empty");
	if (strlen(tk_agent_socket) >= sizeof(addr.sun_path))
		agent_unavailable("tashkent.agent_socket is too long for a Unix socket");
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	strlcpy(addr.sun_path, tk_agent_socket, sizeof(addr.sun_path));

	agent_sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (agent_sock < 0)
		agent_unavailable(strerror(errno));
	if (connect(agent_sock, (struct sockaddr *) &addr, sizeof(addr)) < 0)
	{
		int			saved = errno;

		close_agent();
		agent_unavailable(saved == ENOENT || saved == ECONNREFUSED ? "it is not running" : strerror(saved));
	}
	if (fcntl(agent_sock, F_SETFL, O_NONBLOCK) < 0)
	{
		close_agent();
		agent_unavailable(strerror(errno));
	}
	make_wait_set();

	exchange_open = true;
	begin_frame(&buf, 'H');
	put_u32(&buf, TK_PROTOCOL_VERSION);
	put_u32(&buf, (uint32) MyProcPid);
	put_u8(&buf, role);
	put_u16(&buf, (uint16) strlen(db));
	appendBinaryStringInfo(&buf, db, strlen(db));
	end_frame(&buf);
	if (deadline == 0 || deadline > hello_deadline)
		deadline = hello_deadline;
	if (!send_all(&buf, deadline, false, &warned) || !recv_frame(&buf, deadline, false, &warned))
	{
		close_agent();
		agent_unavailable("it did not answer");
	}
	if (get_u8(&buf) != 'h')
	{
		close_agent();
		agent_unavailable("it answered with an unexpected message");
	}
	accepted = get_u8(&buf) != 0;
	agent_generation = get_u64(&buf);
	text = get_text(&buf, get_u16(&buf));
	exchange_open = false;
	if (!accepted)
	{
		close_agent();
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("this replica's tashkent agent refused the connection: %s", text)));
	}
	pfree(buf.data);
}

/* connect_session connects as a client's backend, from its database. */
static void
connect_session(TimestampTz deadline)
{
	connect_agent(TK_ROLE_SESSION, get_database_name(MyDatabaseId), deadline);
}

/* The agent generation the last hello reported. */
uint64
tk_agent_generation_seen(void)
{
	return agent_generation;
}

static void
read_decision(StringInfo buf, TkDecision *d)
{
	if (get_u8(buf) != 'D')
		elog(ERROR, "tashkent: the agent answered a certification with an unexpected message");
	d->kind = (TkDecisionKind) get_u8(buf);
	d->version = get_u64(buf);
	d->epoch = get_u64(buf);
	d->durable = get_u64(buf);
	d->abort_reason = get_u8(buf);
	d->detail = get_text(buf, get_u32(buf));
	if (d->kind < TK_DECISION_COMMIT || d->kind > TK_DECISION_UNKNOWN ||
		(d->kind == TK_DECISION_COMMIT && d->version == 0))
		elog(ERROR, "tashkent: the agent sent a malformed decision");
}

static void
outcome_unknown(const char *why)
{
	ereport(ERROR,
			(errcode(ERRCODE_TRANSACTION_RESOLUTION_UNKNOWN),
			 errmsg("the outcome of this transaction is unknown: %s", why),
			 errdetail("Its writeset was sent for certification. If the cluster committed it, this replica applies it from the certifier's log like any other version; here it was rolled back."),
			 errhint("Check whether its changes are there before retrying it.")));
}

/*
 * await_decision sends the certification request in buf (a 'C' or 'W'
 * frame) and waits for the decision (at most tashkent.certify_timeout).
 */
static void
await_decision(StringInfo buf, TkDecision *decision)
{
	TimestampTz deadline;
	bool		warned = false;

	exchange_open = true;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), tk_certify_timeout);
	if (!send_all(buf, deadline, true, &warned))
	{
		close_agent();
		outcome_unknown("the connection to the tashkent agent broke while the writeset was sent");
	}
	/*
	 * The decision takes a certifier's round trip: wait for it first rather
	 * than try a receive that would fail (a system call fewer per commit).
	 */
	if (!wait_socket(WL_SOCKET_READABLE, deadline, true, &warned) ||
		!recv_frame(buf, deadline, true, &warned))
	{
		bool		late = tk_ms_left(deadline) <= 0;

		close_agent();
		outcome_unknown(late ? "the certifier did not decide within tashkent.certify_timeout"
						: "the connection to the tashkent agent broke before its decision arrived");
	}
	read_decision(buf, decision);
	exchange_open = false;
	pfree(buf->data);
}

/*
 * tk_channel_certify sends the writeset with its start version and waits
 * for the decision.
 */
void
tk_channel_certify(uint64 start_version, StringInfo writeset, TkDecision *decision)
{
	StringInfoData buf;

	asking = TK_ASK_CERTIFY;
	if (!agent_alive())
		connect_session(0);

	begin_frame(&buf, 'C');
	put_u64(&buf, start_version);
	appendBinaryStringInfo(&buf, writeset->data, writeset->len);
	end_frame(&buf);
	await_decision(&buf, decision);
}

/*
 * tk_channel_stream_begin opens the exchange of a streamed writeset: its
 * fragments ('F'), then its certification ('W'), on one connection.
 */
void
tk_channel_stream_begin(void)
{
	asking = TK_ASK_CERTIFY;
	if (!agent_alive())
		connect_session(0);
	exchange_open = true;
}

/*
 * tk_channel_stream_fragment sends one fragment of a streamed writeset:
 * frame holds TK_FRAME_HEADER_BYTES of room, then the fragment. Each
 * fragment gets tashkent.certify_timeout to go (the agent passes it on to
 * the certifier before it reads the next). A cancel is not absorbed:
 * nothing is certified yet.
 */
void
tk_channel_stream_fragment(StringInfo frame)
{
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), tk_certify_timeout);
	bool		warned = false;

	Assert(frame->len >= TK_FRAME_HEADER_BYTES);
	frame->data[4] = 'F';
	end_frame(frame);
	if (!send_all(frame, deadline, false, &warned))
	{
		bool		late = tk_ms_left(deadline) <= 0;

		close_agent();
		ereport(ERROR,
				(errcode(ERRCODE_CANNOT_CONNECT_NOW),
				 errmsg("could not send the transaction's streamed writeset to the tashkent agent: %s",
						late ? "it took no fragment within tashkent.certify_timeout"
						: "the connection broke"),
				 errdetail("Nothing was certified; the transaction was rolled back."),
				 errhint("Retry the transaction, or check the agent's log.")));
	}
}

/*
 * tk_channel_stream_broken: a streamed writeset will not be finished (an
 * error while its fragments were sent): the connection is closed, so
 * that the agent drops what it staged.
 */
void
tk_channel_stream_broken(void)
{
	close_agent();
}

/*
 * tk_channel_certify_streamed asks for the certification of a streamed
 * writeset whose fragments were sent: the start version, their number and
 * total size, and the certified writeset; then waits for the decision as
 * tk_channel_certify does.
 */
void
tk_channel_certify_streamed(uint64 start_version, uint32 fragments, uint64 bytes,
							StringInfo certified, TkDecision *decision)
{
	StringInfoData buf;

	begin_frame(&buf, 'W');
	put_u64(&buf, start_version);
	put_u32(&buf, fragments);
	put_u64(&buf, bytes);
	appendBinaryStringInfo(&buf, certified->data, certified->len);
	end_frame(&buf);
	await_decision(&buf, decision);
}

/*
 * tk_channel_abandon tells the agent that this backend will not commit
 * `version`, which the cluster committed: the agent applies it. Best
 * effort and never an error (it runs while the transaction aborts): if the
 * message cannot go, the socket's closing at exit or the agent's watch of
 * the backends' slots tells it instead.
 */
void
tk_channel_abandon(uint64 version)
{
	StringInfoData buf;
	ssize_t		n;

	if (agent_sock < 0)
		return;
	begin_frame(&buf, 'A');
	put_u64(&buf, version);
	end_frame(&buf);
	n = send(agent_sock, buf.data, buf.len, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n != buf.len)
		close_agent();
	pfree(buf.data);
}

/*
 * tk_channel_register_applier proves to the agent that this backend is
 * the one its apply connection runs on: the agent accepts the hello of an
 * applier only from the PID of its own connection (it learned it from the
 * connection's BackendKeyData), so no other session can pass as the
 * applier, whose writes are not captured.
 */
void
tk_channel_register_applier(void)
{
	asking = TK_ASK_CERTIFY;
	connect_agent(TK_ROLE_APPLIER, get_database_name(MyDatabaseId), 0);
}

/* Opens an exchange for `ask`: connects to the agent if need be. */
static void
begin_exchange(TkAsk ask, TimestampTz deadline)
{
	asking = ask;
	if (!agent_alive())
		connect_session(deadline);
}

/*
 * exchange sends the frame in buf and reads the agent's answer into buf,
 * by deadline; a cancel ends the wait with an error. It returns NULL, or
 * why it failed (late_why when the deadline passed), after closing the
 * connection.
 */
static const char *
exchange(StringInfo buf, TimestampTz deadline, const char *late_why)
{
	bool		warned = false;

	exchange_open = true;
	if (send_all(buf, deadline, false, &warned) &&
		wait_socket(WL_SOCKET_READABLE, deadline, false, &warned) &&
		recv_frame(buf, deadline, false, &warned))
		return NULL;
	close_agent();
	return tk_ms_left(deadline) <= 0 ? late_why : "the connection to the tashkent agent broke";
}

/* An answer of the shape u8 ok, u64 version, u16 length + text ('s', 'k'). */
typedef struct VersionAnswer
{
	bool		ok;
	uint64		version;
	char	   *text;
} VersionAnswer;

static void
read_version_answer(StringInfo buf, char type, const char *what, VersionAnswer *answer)
{
	if (get_u8(buf) != type)
		elog(ERROR, "tashkent: the agent answered %s with an unexpected message", what);
	answer->ok = get_u8(buf) != 0;
	answer->version = get_u64(buf);
	answer->text = get_text(buf, get_u16(buf));
	exchange_open = false;
	pfree(buf->data);
}

/*
 * tk_channel_sync asks the agent for the certifier's durable version: a
 * version at or above every version the cluster acknowledged before the
 * question. The agent answers within the time left to `deadline`, or the
 * backend stops waiting then. A cancel ends the wait with an error (the
 * next exchange opens a new connection: see exchange_open).
 */
uint64
tk_channel_sync(TimestampTz deadline)
{
	StringInfoData buf;
	long		left = tk_ms_left(deadline);
	VersionAnswer answer;
	const char *failed;

	begin_exchange(TK_ASK_SYNC, deadline);
	begin_frame(&buf, 'S');
	put_u32(&buf, (uint32) Max(left, 1));
	end_frame(&buf);
	failed = exchange(&buf, deadline, "the agent did not answer within tashkent.sync_wait_timeout");
	if (failed != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CANNOT_CONNECT_NOW),
				 errmsg("tashkent.sync_wait could not learn the cluster's durable version: %s", failed),
				 errhint("Retry, or check the agent's log; SET tashkent.sync_wait = off reads without waiting.")));
	read_version_answer(&buf, 's', "a sync", &answer);
	if (!answer.ok)
		ereport(ERROR,
				(errcode(ERRCODE_CANNOT_CONNECT_NOW),
				 errmsg("tashkent.sync_wait could not learn the cluster's durable version: %s", answer.text),
				 errhint("Retry, or check the agent's and the certifier's logs; SET tashkent.sync_wait = off reads without waiting.")));
	return answer.version;
}

/*
 * tk_channel_hold asks the agent to hold this replica's commits after
 * `version` (or after the last version already under way, if that is
 * later) for at most hold_ms, and returns the version they are held after.
 * The hold is this backend's connection's: the agent ends it at
 * tk_channel_release, when the connection closes, or after hold_ms. A
 * cancel ends the wait for the answer with an error.
 */
uint64
tk_channel_hold(uint64 version, uint32 hold_ms, TimestampTz deadline)
{
	StringInfoData buf;
	VersionAnswer answer;
	const char *failed;

	begin_exchange(TK_ASK_HOLD, deadline);
	begin_frame(&buf, 'K');
	put_u64(&buf, version);
	put_u32(&buf, hold_ms);
	end_frame(&buf);
	failed = exchange(&buf, deadline, "the agent did not answer in time");
	if (failed != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CANNOT_CONNECT_NOW),
				 errmsg("could not hold this replica's commits: %s", failed),
				 errhint("Retry, or check the agent's log.")));
	read_version_answer(&buf, 'k', "a hold", &answer);
	if (!answer.ok)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("could not hold this replica's commits: %s", answer.text),
				 errhint("Retry once the other hold ends (it lasts at most its hold_ms), or check the agent's log.")));
	return answer.version;
}

/*
 * tk_channel_release ends this backend's hold. Best effort: if the message
 * cannot go, the agent ends the hold when the connection closes or its
 * time is up.
 */
void
tk_channel_release(void)
{
	StringInfoData buf;
	ssize_t		n;

	if (agent_sock < 0 || exchange_open)
		return;
	begin_frame(&buf, 'R');
	end_frame(&buf);
	n = send(agent_sock, buf.data, buf.len, MSG_DONTWAIT | MSG_NOSIGNAL);
	if (n != buf.len)
		close_agent();
	pfree(buf.data);
}

/*
 * tk_channel_txn_state asks the agent for the state of the transaction
 * committed as `version` (in `epoch`, if has_epoch), answered by
 * `deadline`, with the certifier's durable version as the agent knows it
 * (answer->why is palloc'd). It returns false if no answer came by then
 * (the connection is closed: the next question opens another). A broken
 * connection, or none, is an error (57P03); so is a cancel.
 */
bool
tk_channel_txn_state(uint64 version, bool has_epoch, uint64 epoch, TimestampTz deadline,
					 TkStateAnswer *answer)
{
	static const char *const late = "the agent did not answer in time";
	StringInfoData buf;
	const char *failed;
	uint8		state;

	begin_exchange(TK_ASK_STATE, deadline);
	begin_frame(&buf, 'Q');
	put_u64(&buf, version);
	put_u8(&buf, has_epoch ? 1 : 0);
	put_u64(&buf, epoch);
	end_frame(&buf);
	failed = exchange(&buf, deadline, late);
	if (failed == late)
	{
		pfree(buf.data);
		return false;
	}
	if (failed != NULL)
		agent_unavailable(failed);
	if (get_u8(&buf) != 'q')
		elog(ERROR, "tashkent: the agent answered a state question with an unexpected message");
	state = get_u8(&buf);
	answer->final = get_u8(&buf) != 0;
	answer->durable = get_u64(&buf);
	answer->why = get_text(&buf, get_u16(&buf));
	exchange_open = false;
	pfree(buf.data);
	if (state > TK_TXN_UNKNOWN)
		elog(ERROR, "tashkent: the agent sent an unknown transaction state %u", state);
	answer->state = (TkTxnState) state;
	return true;
}

/*
 * tk_channel_open_feed connects the durability feed (feed.c) to the
 * agent: a hello as role 2, from no database. An ERROR if the agent is
 * not there or refuses.
 */
void
tk_channel_open_feed(void)
{
	asking = TK_ASK_FEED;
	connect_agent(TK_ROLE_FEED, "", 0);
}

/*
 * tk_channel_feed_read waits up to timeout_ms for the agent's next word
 * on the feed's connection: true with its type ('V', 'X') and values when
 * one came ('V': the durable version; 'X': C and the failed epoch), false
 * when none did. A connection that broke or sent something
 * else is closed, with an ERROR.
 */
bool
tk_channel_feed_read(long timeout_ms, char *type, uint64 *value, uint64 *epoch)
{
	TimestampTz now = GetCurrentTimestamp();
	bool		warned = false;
	StringInfoData buf;

	if (!wait_socket(WL_SOCKET_READABLE, TimestampTzPlusMilliseconds(now, timeout_ms), false, &warned))
		return false;
	initStringInfo(&buf);
	/* a frame that started arrives whole at once: a short bound */
	if (!recv_frame(&buf, TimestampTzPlusMilliseconds(now, timeout_ms + HELLO_TIMEOUT_MS), false, &warned))
	{
		close_agent();
		agent_unavailable("the connection broke (the agent stopped?)");
	}
	if (!(buf.len == 9 && buf.data[0] == 'V') && !(buf.len == 17 && buf.data[0] == 'X'))
	{
		close_agent();
		agent_unavailable("it sent the feed an unexpected message");
	}
	*type = (char) get_u8(&buf);
	*value = get_u64(&buf);
	*epoch = *type == 'X' ? get_u64(&buf) : 0;
	pfree(buf.data);
	return true;
}

/* tk_channel_close closes this process's connection to the agent. */
void
tk_channel_close(void)
{
	close_agent();
}
