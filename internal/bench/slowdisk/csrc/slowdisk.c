/*
 * slowdisk: an LD_PRELOAD shim that makes every durable flush of a process
 * take longer, after the real flush: the slow-disk regime of `tashkent bench
 * --fsync-delay` (internal/bench/slowdisk). Durability stays real: the real
 * function runs first and its result is returned unchanged.
 *
 * The Tashkent paper's effect (EuroSys 2006, section 9, Fig. 4-6) comes from
 * disks whose fsync took 8 ms; this machine's take 0.1-1 ms and its kernel
 * has no dm-delay. The shim wraps what PostgreSQL calls to make data
 * durable: fsync (data files at checkpoints, directories), fdatasync (the WAL
 * flush of every synchronous commit: wal_sync_method=fdatasync, which the
 * bench pins in this regime, so that no WAL write goes through O_DSYNC) and
 * syncfs. sync_file_range is not wrapped: PostgreSQL only calls it with
 * SYNC_FILE_RANGE_WRITE, to start write-back early, which makes nothing
 * durable.
 *
 * The delay is TASHKENT_SLOWDISK_DELAY_NS nanoseconds, read once at load.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

static long long delay_ns;
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_syncfs)(int);

__attribute__((constructor)) static void slowdisk_init(void)
{
	const char *s = getenv("TASHKENT_SLOWDISK_DELAY_NS");
	delay_ns = s ? atoll(s) : 0;
	real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	real_syncfs = (int (*)(int))dlsym(RTLD_NEXT, "syncfs");
}

/* slow_down sleeps delay_ns in full, across signals (PostgreSQL's latches
 * use SIGUSR1), and leaves errno as the real call set it. */
static void slow_down(void)
{
	struct timespec left;
	int saved = errno;

	if (delay_ns <= 0)
		return;
	left.tv_sec = delay_ns / 1000000000LL;
	left.tv_nsec = delay_ns % 1000000000LL;
	while (nanosleep(&left, &left) == -1 && errno == EINTR)
		;
	errno = saved;
}

static int unresolved(void)
{
	errno = ENOSYS;
	return -1;
}

int fsync(int fd)
{
	int rc = real_fsync ? real_fsync(fd) : unresolved();
	slow_down();
	return rc;
}

int fdatasync(int fd)
{
	int rc = real_fdatasync ? real_fdatasync(fd) : unresolved();
	slow_down();
	return rc;
}

int syncfs(int fd)
{
	int rc = real_syncfs ? real_syncfs(fd) : unresolved();
	slow_down();
	return rc;
}
