/*
 * execbench: times <n> vfork+execve+waitpid of <path> with an environment
 * of <bytes> bytes whose last variable is KUBERNETES_EXEC_AUDIT_ID (=<id>,
 * a fixed UUID by default; in an exec session, the session's own). Built
 * by the Go benchmark so the measured loop is exec alone, with no Go
 * runtime converting the environment on every call. Prints total ns.
 * EXECBENCH_RATE=<n> paces the loop at n execs a second (0: as fast as it
 * goes). EXECBENCH_ARG=<arg> is the program's argument ("true" by default);
 * EXECBENCH_NOWAIT=1 starts each exec without waiting for the last to end
 * (processes that live, as /bin/sleep 2 does), reaping them as they end
 * and all of them before printing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: execbench <n> <env-bytes> <path> [<id>]\n");
		return 2;
	}
	long n = atol(argv[1]), want = atol(argv[2]);
	char *path = argv[3];
	size_t cap = want / 16 + 4, cnt = 0;
	char **envp = calloc(cap, sizeof(char *));
	long size = 0;
	for (int i = 0; size < want - 64 && cnt < cap - 2; i++) {
		char *v = malloc(64);
		int len = snprintf(v, 64, "SVC_%05d_SERVICE_PORT_HTTP_TCP_ADDR=10.%d.%d.%d", i, i % 250, (i / 250) % 250, i % 7);
		envp[cnt++] = v;
		size += len + 1;
	}
	char key[256];
	snprintf(key, sizeof(key), "KUBERNETES_EXEC_AUDIT_ID=%s",
		 argc == 5 ? argv[4] : "6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f");
	envp[cnt++] = key;
	envp[cnt] = NULL;
	const char *arg = getenv("EXECBENCH_ARG");
	char *args[] = {path, arg ? (char *)arg : "true", NULL};
	const char *r = getenv("EXECBENCH_RATE");
	long rate = r ? atol(r) : 0;
	const char *nw = getenv("EXECBENCH_NOWAIT");
	int nowait = nw && strcmp(nw, "1") == 0;
	long running = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (long i = 0; i < n; i++) {
		int st;
		if (rate > 0) { /* exec i is due at t0 + i/rate */
			long long due = (long long)t0.tv_nsec + i * 1000000000LL / rate;
			struct timespec at = {t0.tv_sec + due / 1000000000LL, due % 1000000000LL};
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
		}
		pid_t pid = vfork();
		if (pid == 0) {
			execve(path, args, envp);
			_exit(127);
		}
		if (pid < 0) {
			fprintf(stderr, "execbench: vfork failed\n");
			return 1;
		}
		if (nowait) {
			running++;
			pid_t done;
			while (running > 0 && (done = waitpid(-1, &st, WNOHANG)) > 0) {
				running--;
				if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
					fprintf(stderr, "execbench: child failed\n");
					return 1;
				}
			}
			continue;
		}
		if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "execbench: child failed\n");
			return 1;
		}
	}
	for (int st; running > 0; running--) {
		if (waitpid(-1, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "execbench: child failed\n");
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
	return 0;
}
