/*
 * trust.c - what the shim checks before it believes the agent socket.
 *
 * The shim often runs inside root applications, and the socket path may be
 * in a directory others can write (/tmp). Whoever serves the socket hands
 * the shim memory to map and code to load, so before a handshake:
 *
 *   - the socket's directory is not world-writable, unless it is sticky and
 *     root's (/tmp): elsewhere anyone could replace the socket;
 *   - the socket file is a socket owned by an accepted uid;
 *   - right after connect, SO_PEERCRED names an accepted uid (the check
 *     that counts: the path checks only give a clearer reason earlier).
 *
 * Accepted uids: root, and GPUPROBE_SERVER_UID when set (a collector run
 * by an ordinary user). Every descriptor the server passes is fstat-ed:
 * a memfd must hold at least the bytes announced and be sealed against
 * shrinking (else a later truncation turns the shim's accesses into
 * SIGBUS in the application); the patched image must also be sealed
 * against writes, so the code checked is the code loaded. None of this is
 * on the launch path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "gp.h"

static long gp_server_uid = -1; /* GPUPROBE_SERVER_UID, or -1 */

/* gp_trust_init reads GPUPROBE_SERVER_UID (a decimal uid); anything else
 * is ignored, traced: only root is then accepted. */
GP_HIDDEN void gp_trust_init(void)
{
	const char *s = getenv("GPUPROBE_SERVER_UID");
	gp_server_uid = -1;
	if (s == NULL || s[0] == 0)
		return;
	char *end;
	long v = strtol(s, &end, 10);
	if (*end == 0 && v >= 0 && v < (long)UINT_MAX)
		gp_server_uid = v;
	else
		GP_TRACE("GPUPROBE_SERVER_UID=%s is not a uid; accepting only root", s);
}

GP_HIDDEN int gp_uid_accepted(uid_t u)
{
	return u == 0 || (gp_server_uid >= 0 && (long)u == gp_server_uid);
}

/* gp_trust_path checks the socket's directory and the socket file. */
GP_HIDDEN int gp_trust_path(const char *path, const char **why)
{
	char dir[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];
	size_t n = strlen(path);
	struct stat st;
	if (n >= sizeof dir)
		return *why = "socket path too long", -ENAMETOOLONG;
	memcpy(dir, path, n + 1);
	char *slash = strrchr(dir, '/');
	if (slash == NULL)
		memcpy(dir, ".", 2);
	else if (slash == dir)
		dir[1] = 0;
	else
		*slash = 0;
	if (stat(dir, &st) < 0)
		return *why = "socket directory", -errno;
	if ((st.st_mode & S_IWOTH) && !((st.st_mode & S_ISVTX) && st.st_uid == 0))
		return *why = "socket directory is world-writable (and not sticky and root's)", -EPERM;
	if (lstat(path, &st) < 0)
		return *why = "socket", -errno;
	if (!S_ISSOCK(st.st_mode))
		return *why = "not a socket", -ENOTSOCK;
	if (!gp_uid_accepted(st.st_uid)) {
		GP_TRACE("socket %s is owned by uid %u: not root nor GPUPROBE_SERVER_UID", path, (unsigned)st.st_uid);
		return *why = "socket owned by a uid not accepted (GPUPROBE_SERVER_UID)", -EPERM;
	}
	return 0;
}

/* gp_trust_peer checks the connected server's credentials. */
GP_HIDDEN int gp_trust_peer(int fd, const char **why)
{
	struct ucred c;
	socklen_t len = sizeof c;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) < 0 || len != sizeof c)
		return *why = "SO_PEERCRED", -errno;
	if (!gp_uid_accepted(c.uid)) {
		GP_TRACE("server pid %d runs as uid %u: not root nor GPUPROBE_SERVER_UID", (int)c.pid, (unsigned)c.uid);
		return *why = "server runs as a uid not accepted (GPUPROBE_SERVER_UID)", -EPERM;
	}
	return 0;
}

/* gp_fd_check checks a received descriptor before it is mapped: a regular
 * file (memfd) of at least need bytes carrying every seal in seals. A
 * descriptor that is not a file at all (an anonymous inode: a BPF map) is
 * accepted only with anon set: the kernel itself refuses an mmap past
 * such a map's end, so it cannot SIGBUS. */
GP_HIDDEN int gp_fd_check(int fd, uint64_t need, int seals, int anon, const char **why)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return *why = "fstat", -errno;
	if ((st.st_mode & S_IFMT) == 0 && anon)
		return 0;
	if (!S_ISREG(st.st_mode))
		return *why = "not a memfd", -EBADF;
	if ((uint64_t)st.st_size < need)
		return *why = "memfd smaller than announced", -EMSGSIZE;
	int have = fcntl(fd, F_GET_SEALS);
	if (have < 0 || (have & seals) != seals)
		return *why = "memfd not sealed (F_SEAL_SHRINK, F_SEAL_WRITE)", -EPERM;
	return 0;
}
