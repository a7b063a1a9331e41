/* Peer for `kolo_bench allreduce`: plain Open MPI MPI_Allreduce (in place, MPI_SUM,
 * float32) over the same size sweep, timed the same way, so that bench/compare.sh can put
 * kolo's numbers next to MPI's measured in the same run.
 *
 *   mpirun -np 2 kolo_peer_mpi_allreduce [--min-bytes 4] [--max-bytes 268435456]
 *                                        [--step 2|4] [--iters N] [--json FILE]
 *
 * Per size: warm-up iterations, then timed back-to-back iterations without barriers; an
 * iteration's time is MPI_Wtime around one MPI_Allreduce on one rank, the reported time is
 * the maximum over ranks per iteration (an MPI_Allreduce(MPI_MAX) of the times after the
 * loop), then the median over iterations. Default iterations follow kolo_bench's rule
 * (~1 GiB per size, between 5 and 1000; warm-up iters/10 in [2, 50]). Output on rank 0:
 * a table and a JSON list with the keys bytes, dtype, ranks, time_us_median, algbw_gbps,
 * busbw_gbps. Not a general MPI benchmark (see the OSU micro-benchmarks for that).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Sorts `v` and returns its median; *p10, *p90: nearest-rank percentiles. */
static double stats(double* v, int n, double* p10, double* p90) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  *p10 = v[(int)(0.1 * (n - 1) + 0.5)];
  *p90 = v[(int)(0.9 * (n - 1) + 0.5)];
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int default_iters(long long bytes) {
  long long it = (1ll << 30) / (bytes > 0 ? bytes : 1);
  return (int)(it < 5 ? 5 : it > 1000 ? 1000 : it);
}

static long long parse_size(const char* s) {
  char* end = NULL;
  long long v = strtoll(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

int main(int argc, char** argv) {
  long long min_bytes = 4, max_bytes = 256ll << 20;
  int step = 2, iters_opt = 0;
  const char* json = NULL;
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v && !strcmp(a, "--min-bytes"))
      min_bytes = parse_size(argv[++i]);
    else if (v && !strcmp(a, "--max-bytes"))
      max_bytes = parse_size(argv[++i]);
    else if (v && !strcmp(a, "--step"))
      step = atoi(argv[++i]);
    else if (v && !strcmp(a, "--iters"))
      iters_opt = atoi(argv[++i]);
    else if (v && !strcmp(a, "--json"))
      json = argv[++i];
    else {
      if (rank == 0)
        fprintf(stderr,
                "usage: %s [--min-bytes B] [--max-bytes B] [--step 2|4] "
                "[--iters N] [--json FILE] (bad argument '%s')\n",
                argv[0], a);
      MPI_Finalize();
      return 2;
    }
  }
  if (min_bytes < 4 || max_bytes < min_bytes || (step != 2 && step != 4)) {
    if (rank == 0) fprintf(stderr, "need 4 <= --min-bytes <= --max-bytes and --step 2 or 4\n");
    MPI_Finalize();
    return 2;
  }

  float* buf = NULL;
  if (posix_memalign((void**)&buf, 64, (size_t)max_bytes)) MPI_Abort(MPI_COMM_WORLD, 1);
  memset(buf, 0, (size_t)max_bytes);
  FILE* out = NULL;
  if (rank == 0 && json) {
    out = fopen(json, "w");
    if (!out) {
      fprintf(stderr, "cannot write %s\n", json);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    fprintf(out, "[\n");
  }
  if (rank == 0) {
    printf(
        "MPI_Allreduce: %d ranks, f32, MPI_SUM, MPI_IN_PLACE; time = max over ranks per "
        "iteration, median over iterations\n%12s %7s %12s %12s %12s %10s %10s\n",
        size, "bytes", "iters", "median_us", "p10_us", "p90_us", "algbw_GB/s", "busbw_GB/s");
    fflush(stdout);
  }
  /* Start-up noise stays out of the first row, as in kolo_bench: small allreduces first. */
  for (int i = 0; i < 300; ++i)
    MPI_Allreduce(MPI_IN_PLACE, buf, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  int first = 1;
  for (long long b = min_bytes; b <= max_bytes; b *= step) {
    const long long bytes = b / 4 * 4;
    const int count = (int)(bytes / 4);
    const int iters = iters_opt > 0 ? iters_opt : default_iters(bytes);
    int warmup = iters / 10;
    warmup = warmup < 2 ? 2 : warmup > 50 ? 50 : warmup;
    double* t = malloc(sizeof(double) * (size_t)iters);
    for (int i = 0; i < warmup; ++i)
      MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < iters; ++i) {
      const double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      t[i] = (MPI_Wtime() - t0) * 1e6;
    }
    MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    double p10, p90;
    const double med = stats(t, iters, &p10, &p90);
    const double alg = (double)bytes / med / 1e3;
    const double bus = size > 1 ? alg * 2.0 * (size - 1) / size : alg;
    if (rank == 0) {
      printf("%12lld %7d %12.2f %12.2f %12.2f %10.3f %10.3f\n", bytes, iters, med, p10, p90, alg,
             bus);
      fflush(stdout);
      if (out) {
        fprintf(out,
                "%s  {\"bytes\": %lld, \"dtype\": \"f32\", \"ranks\": %d, \"op\": \"sum\", "
                "\"iters\": %d, \"time_us_median\": %.3f, \"time_us_p10\": %.3f, "
                "\"time_us_p90\": %.3f, \"algbw_gbps\": %.6f, \"busbw_gbps\": %.6f, "
                "\"timing\": \"max over ranks per iteration\"}",
                first ? "" : ",\n", bytes, size, iters, med, p10, p90, alg, bus);
      }
    }
    first = 0;
    free(t);
  }
  if (out) {
    fprintf(out, "\n]\n");
    fclose(out);
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
