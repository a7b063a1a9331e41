/* Memory-bandwidth probe in the manner of McCalpin's STREAM: copy (c = a), scale
 * (b = s c), add (c = a + b) and triad (a = b + s c) over arrays of doubles, with 1 thread
 * and with N threads (OpenMP), printing GB/s (1e9 bytes/s). Bytes are counted the STREAM
 * way: copy and scale move 2 x 8 x n bytes, add and triad 3 x 8 x n (writes count once;
 * write-allocate traffic is not counted). Each kernel runs --reps times; the best time is
 * reported, as STREAM does, and the median next to it (this machine is shared).
 *
 *   kolo_peer_stream [--mib 1024] [--reps 5] [--threads N] [--json FILE]
 *
 * --mib is the size of each of the three arrays. The default, 1 GiB, is well above this
 * VM's reported 300 MiB L3, so the numbers are DRAM bandwidth, not cache bandwidth. Used by
 * bench/compare.sh to bound what an allreduce through shared memory can reach; not a
 * replacement for the real STREAM.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kCopy, kScale, kAdd, kTriad, kKernels };
static const char* kNames[kKernels] = {"copy", "scale", "add", "triad"};
static const double kWords[kKernels] = {2, 2, 3, 3};

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void run_kernel(int k, int threads, long n, double* a, double* b, double* c) {
  const double s = 3.0;
  if (k == kCopy) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; ++i) c[i] = a[i];
  } else if (k == kScale) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; ++i) b[i] = s * c[i];
  } else if (k == kAdd) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; ++i) c[i] = a[i] + b[i];
  } else {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
  }
}

/* Best and median GB/s of each kernel with `threads` threads. */
static void measure(int threads, int reps, long n, double* a, double* b, double* c,
                    double best[kKernels], double median[kKernels]) {
  double* t = malloc(sizeof(double) * (size_t)reps * kKernels);
  for (int r = 0; r < reps; ++r) {
    for (int k = 0; k < kKernels; ++k) {
      const double t0 = omp_get_wtime();
      run_kernel(k, threads, n, a, b, c);
      t[k * reps + r] = omp_get_wtime() - t0;
    }
  }
  for (int k = 0; k < kKernels; ++k) {
    double* tk = t + k * reps;
    qsort(tk, (size_t)reps, sizeof(double), cmp_double);
    const double bytes = kWords[k] * 8.0 * (double)n;
    best[k] = bytes / tk[0] / 1e9;
    median[k] = bytes / tk[reps / 2] / 1e9;
  }
  free(t);
}

int main(int argc, char** argv) {
  long mib = 1024;
  int reps = 5, threads = omp_get_num_procs();
  const char* json = NULL;
  for (int i = 1; i < argc; ++i) {
    if (i + 1 < argc && !strcmp(argv[i], "--mib"))
      mib = atol(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--reps"))
      reps = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
      threads = atoi(argv[++i]);
    else if (i + 1 < argc && !strcmp(argv[i], "--json"))
      json = argv[++i];
    else {
      fprintf(stderr, "usage: %s [--mib MiB per array] [--reps N] [--threads N] [--json FILE]\n",
              argv[0]);
      return 2;
    }
  }
  if (mib < 1 || reps < 1 || threads < 1) {
    fprintf(stderr, "--mib, --reps and --threads must be positive\n");
    return 2;
  }
  const long n = mib * (1l << 20) / 8;
  double *a = NULL, *b = NULL, *c = NULL;
  if (posix_memalign((void**)&a, 64, (size_t)n * 8) ||
      posix_memalign((void**)&b, 64, (size_t)n * 8) ||
      posix_memalign((void**)&c, 64, (size_t)n * 8)) {
    fprintf(stderr, "cannot allocate 3 x %ld MiB\n", mib);
    return 1;
  }
  /* First touch with all threads, so pages spread as the N-thread runs use them. */
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long i = 0; i < n; ++i) {
    a[i] = 1.0;
    b[i] = 2.0;
    c[i] = 0.0;
  }

  const int counts[2] = {1, threads};
  double best[2][kKernels], median[2][kKernels];
  printf("stream: 3 arrays of %ld MiB (%ld doubles), %d reps, best (median) GB/s\n", mib, n, reps);
  for (int t = 0; t < 2; ++t) {
    measure(counts[t], reps, n, a, b, c, best[t], median[t]);
    printf("threads %2d:", counts[t]);
    for (int k = 0; k < kKernels; ++k)
      printf("  %s %.2f (%.2f)", kNames[k], best[t][k], median[t][k]);
    printf("\n");
    fflush(stdout);
  }
  /* Keeps the kernels' results live (and catches a NaN). */
  double sum = 0;
  for (long i = 0; i < n; i += 4096) sum += a[i] + b[i] + c[i];
  if (!(sum == sum)) {
    fprintf(stderr, "stream: non-finite result\n");
    return 1;
  }
  if (json) {
    FILE* f = fopen(json, "w");
    if (!f) {
      fprintf(stderr, "cannot write %s\n", json);
      return 1;
    }
    fprintf(f, "{\"array_mib\": %ld, \"reps\": %d, \"threads\": [", mib, reps);
    for (int t = 0; t < 2; ++t) {
      fprintf(f, "%s{\"threads\": %d", t ? ", " : "", counts[t]);
      for (int k = 0; k < kKernels; ++k) {
        fprintf(f, ", \"%s_gbps\": %.4f, \"%s_gbps_median\": %.4f", kNames[k], best[t][k],
                kNames[k], median[t][k]);
      }
      fprintf(f, "}");
    }
    fprintf(f, "]}\n");
    fclose(f);
  }
  free(a);
  free(b);
  free(c);
  return 0;
}
