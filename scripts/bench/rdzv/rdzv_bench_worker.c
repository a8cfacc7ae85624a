/* rdzv_bench_worker DIR SECONDS: writes the CLOCK_REALTIME nanoseconds of its start to
 * DIR/start.<restart>.<rank>, then sleeps SECONDS (0: until stopped). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char** argv) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (argc < 3) return 64;
  const char* r = getenv("RANK");
  const char* a = getenv("TORCHELASTIC_RESTART_COUNT");
  char path[4096];
  snprintf(path, sizeof path, "%s/start.%s.%s", argv[1], a ? a : "0", r ? r : "0");
  FILE* f = fopen(path, "w");
  if (f) {
    fprintf(f, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    fclose(f);
  }
  double s = atof(argv[2]);
  if (s <= 0) {
    for (;;) pause();
  }
  struct timespec d = {(time_t)s, (long)((s - (time_t)s) * 1e9)};
  while (nanosleep(&d, &d) != 0) {
  }
  return 0;
}
