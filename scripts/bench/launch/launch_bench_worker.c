/* launch_bench_worker DIR: appends "<start ns>" to DIR/start.<attempt>.<rank>; on attempt 0, rank
 * 0 writes DIR/crash (the time just before it exits with 1) and exits; everyone else sleeps until
 * stopped (attempt 0) or exits 0 at once (attempt >= 1). Times are CLOCK_REALTIME nanoseconds, so
 * the driver can compare them with its own clock. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void stamp(const char* dir, const char* name, long long t) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "w");
  if (f) {
    fprintf(f, "%lld\n", t);
    fclose(f);
  }
}

int main(int argc, char** argv) {
  long long start = now_ns();
  if (argc < 2) return 64;
  const char* r = getenv("RANK");
  const char* a = getenv("TORCHELASTIC_RESTART_COUNT");
  int rank = r ? atoi(r) : 0, attempt = a ? atoi(a) : 0;
  char name[64];
  snprintf(name, sizeof name, "start.%d.%d", attempt, rank);
  stamp(argv[1], name, start);
  if (attempt >= 1) return 0;
  if (rank == 0) {
    stamp(argv[1], "crash", now_ns());
    return 1;
  }
  for (;;) pause();
}
