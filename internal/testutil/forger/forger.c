// forger: a static helper for the adversarial exec-attribution tests. It plays
// an intruder inside a pod who runs a program under another exec session's
// KUBERNETES_EXEC_AUDIT_ID, in ways busybox cannot. testutil.BuildForger
// compiles it with `gcc -static -O2 -pthread`.
//
// Usage (PROG is a path run with execve: there is no PATH search):
//
//   forger reexec       [OP...] PROG [ARG...]  execve in place
//   forger thread-exec  [OP...] PROG [ARG...]  execve from a non-leader thread
//   forger clone-parent [OP...] PROG [ARG...]  execve in a CLONE_PARENT child
//   forger userns-pidns [OP...] PROG [ARG...]  the same, the child in a new pid
//                                              namespace under a new user
//                                              namespace (what an unprivileged
//                                              process may make)
//   forger steal PID KEY PROG [ARG...]         execve with KEY copied from
//                                              /proc/PID/environ
//
// Each OP edits a copy of the caller's environ before the execve:
//
//   KEY=VAL   remove every KEY, then append KEY=VAL (the key ends up last)
//   +KEY=VAL  append KEY=VAL and keep any existing KEY (a duplicate)
//   -KEY      remove every KEY
//   --        end of OPs, for a PROG that would parse as one
//
// An argument is an OP if it starts with '+' or '-', or has an '=' with no
// '/' before it. steal takes the first KEY in PID's environ and sets it as
// KEY=VAL does.
//
// thread-exec: the main thread pauses; the kernel's de_thread kills it when
// the second thread's execve succeeds, and the process keeps its PID.
// clone-parent: the child's parent is the caller's parent, so the caller
// cannot wait for it. The caller exits only once the child has exec'd: a
// close-on-exec pipe reads EOF at the exec, or the child's errno if the exec
// failed. A child that failed is left for the caller's parent to reap.
//
// Exit status (the exec'd PROG's own status otherwise):
//   0  clone-parent: the child exec'd PROG
//   1  executing PROG failed
//   2  usage
//   3  system error while setting up (memory, pipe)
//   4  creating the thread or the clone child failed
//   5  reading /proc/PID/environ failed
//   6  KEY is not in /proc/PID/environ
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum {
	EXIT_EXEC = 1,
	EXIT_USAGE = 2,
	EXIT_SYS = 3,
	EXIT_SPAWN = 4,
	EXIT_PROC = 5,
	EXIT_NOKEY = 6,
};

extern char **environ;

static const char usage_text[] =
	"usage: forger reexec       [OP...] PROG [ARG...]\n"
	"       forger thread-exec  [OP...] PROG [ARG...]\n"
	"       forger clone-parent [OP...] PROG [ARG...]\n"
	"       forger userns-pidns [OP...] PROG [ARG...]\n"
	"       forger steal PID KEY PROG [ARG...]\n"
	"OP: KEY=VAL (replace, append last) | +KEY=VAL (append) | -KEY (remove) | --\n";

static void usage(const char *why)
{
	fprintf(stderr, "forger: %s\n%s", why, usage_text);
	exit(EXIT_USAGE);
}

// die reports what failed with errno's text and exits with code.
static void die(int code, const char *what, const char *obj)
{
	fprintf(stderr, "forger: %s %s: %s\n", what, obj, strerror(errno));
	exit(code);
}

// env is a NULL-terminated, growable copy of an environment. Entries point
// into environ or argv, which live until the execve.
struct env {
	char **v;
	size_t n, cap;
};

static void env_append(struct env *e, char *kv)
{
	if (e->n + 2 > e->cap) {
		e->cap *= 2;
		e->v = realloc(e->v, e->cap * sizeof(*e->v));
		if (!e->v)
			die(EXIT_SYS, "allocating", "environment");
	}
	e->v[e->n++] = kv;
	e->v[e->n] = NULL;
}

static int key_matches(const char *entry, const char *key, size_t klen)
{
	return strncmp(entry, key, klen) == 0 && entry[klen] == '=';
}

static void env_remove(struct env *e, const char *key, size_t klen)
{
	size_t j = 0;
	for (size_t i = 0; i < e->n; i++)
		if (!key_matches(e->v[i], key, klen))
			e->v[j++] = e->v[i];
	e->n = j;
	e->v[j] = NULL;
}

static struct env env_from_environ(void)
{
	struct env e = {.cap = 32};
	e.v = malloc(e.cap * sizeof(*e.v));
	if (!e.v)
		die(EXIT_SYS, "allocating", "environment");
	e.v[0] = NULL;
	for (char **p = environ; *p; p++)
		env_append(&e, *p);
	return e;
}

static int is_op(const char *a)
{
	if (a[0] == '+' || a[0] == '-')
		return 1;
	const char *eq = strchr(a, '=');
	return eq && !memchr(a, '/', (size_t)(eq - a));
}

static void apply_op(struct env *e, char *op)
{
	if (op[0] == '-') {
		const char *key = op + 1;
		if (!*key || strchr(key, '='))
			usage("bad -KEY operand");
		env_remove(e, key, strlen(key));
		return;
	}
	int dup = op[0] == '+';
	char *kv = op + dup;
	char *eq = strchr(kv, '=');
	if (!eq || eq == kv)
		usage("bad KEY=VAL operand");
	if (!dup)
		env_remove(e, kv, (size_t)(eq - kv));
	env_append(e, kv);
}

static void exec_or_die(char **prog, char **env)
{
	execve(prog[0], prog, env);
	die(EXIT_EXEC, "executing", prog[0]);
}

struct thread_exec {
	char **prog, **env;
};

static void *thread_exec_main(void *arg)
{
	struct thread_exec *t = arg;
	if (gettid() == getpid()) {
		fprintf(stderr, "forger: thread-exec: running on the leader thread\n");
		_exit(EXIT_SPAWN);
	}
	execve(t->prog[0], t->prog, t->env);
	// _exit is exit_group: it takes the paused main thread down too.
	fprintf(stderr, "forger: executing %s from thread %d: %s\n", t->prog[0], gettid(),
		strerror(errno));
	_exit(EXIT_EXEC);
}

static _Noreturn void thread_exec(char **prog, char **env)
{
	static struct thread_exec t;
	pthread_t th;
	t.prog = prog;
	t.env = env;
	int err = pthread_create(&th, NULL, thread_exec_main, &t);
	if (err) {
		errno = err;
		die(EXIT_SPAWN, "creating", "exec thread");
	}
	for (;;)
		pause();
}

static int clone_parent(char **prog, char **env, int nested)
{
	int p[2];
	// unshare(CLONE_NEWPID) moves only the caller's future children.
	if (nested && unshare(CLONE_NEWUSER | CLONE_NEWPID))
		die(EXIT_SPAWN, "unsharing", "a user and pid namespace");
	if (pipe2(p, O_CLOEXEC))
		die(EXIT_SYS, "creating", "exec status pipe");
	// A raw fork-like clone (no new stack): the child only calls execve,
	// write and _exit. CLONE_PARENT makes it a sibling of the caller.
	long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, NULL, NULL, 0);
	if (pid < 0)
		die(EXIT_SPAWN, "cloning", "CLONE_PARENT child");
	if (pid == 0) {
		close(p[0]);
		execve(prog[0], prog, env);
		int err = errno;
		ssize_t w = write(p[1], &err, sizeof(err));
		(void)w;
		_exit(EXIT_EXEC);
	}
	close(p[1]);
	int err;
	ssize_t n;
	do
		n = read(p[0], &err, sizeof(err));
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return 0;
	if (n != sizeof(err))
		die(EXIT_SYS, "reading", "exec status pipe");
	fprintf(stderr, "forger: executing %s in clone-parent child %ld: %s\n", prog[0], pid,
		strerror(err));
	return EXIT_EXEC;
}

// read_environ returns the contents of /proc/PID/environ, NUL-terminated
// one past its end, and its length.
static char *read_environ(const char *pid, size_t *len)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%s/environ", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		die(EXIT_PROC, "opening", path);
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf)
			die(EXIT_SYS, "allocating", path);
		ssize_t r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die(EXIT_PROC, "reading", path);
		if (r == 0)
			break;
		n += (size_t)r;
		if (cap - n - 1 == 0)
			buf = realloc(buf, cap *= 2);
	}
	close(fd);
	buf[n] = '\0';
	*len = n;
	return buf;
}

static int steal(int argc, char **argv)
{
	if (argc < 3)
		usage("steal needs PID KEY PROG");
	const char *pid = argv[0], *key = argv[1];
	if (!*pid || strspn(pid, "0123456789") != strlen(pid) || strlen(pid) > 10)
		usage("steal: PID is not a number");
	if (!*key || strchr(key, '='))
		usage("steal: bad KEY");
	size_t len, klen = strlen(key);
	char *buf = read_environ(pid, &len);
	for (char *p = buf; p < buf + len; p += strlen(p) + 1) {
		if (key_matches(p, key, klen)) {
			struct env e = env_from_environ();
			apply_op(&e, p);
			exec_or_die(argv + 2, e.v);
		}
	}
	fprintf(stderr, "forger: steal: %s not in /proc/%s/environ\n", key, pid);
	return EXIT_NOKEY;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage("missing mode");
	const char *mode = argv[1];
	if (strcmp(mode, "steal") == 0)
		return steal(argc - 2, argv + 2);
	int in_place = strcmp(mode, "reexec") == 0;
	int in_thread = strcmp(mode, "thread-exec") == 0;
	int in_nested = strcmp(mode, "userns-pidns") == 0;
	int in_sibling = in_nested || strcmp(mode, "clone-parent") == 0;
	if (!in_place && !in_thread && !in_sibling)
		usage("unknown mode");

	struct env e = env_from_environ();
	int i = 2;
	while (i < argc && is_op(argv[i])) {
		if (strcmp(argv[i++], "--") == 0)
			break;
		apply_op(&e, argv[i - 1]);
	}
	if (i >= argc)
		usage("missing PROG");
	char **prog = argv + i;
	if (in_thread)
		thread_exec(prog, e.v);
	if (in_sibling)
		return clone_parent(prog, e.v, in_nested);
	exec_or_die(prog, e.v);
	return EXIT_EXEC;
}
