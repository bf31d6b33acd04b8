/* A plain MPI_Allreduce loop over the same sizes as `ms-diagnose check`, as the peer its busbw is
 * compared with (scripts/bench/check_vs_mpi.sh). Prints "size busbw_GB/s" lines with nccl-tests'
 * definitions: algbw = bytes / time, busbw = algbw * 2(n-1)/n; time is the slowest rank's mean.
 * Usage: plain_allreduce <min bytes> <max bytes> <factor> <iters> <warmup> */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double time_allreduce(float* send, float* recv, int count, int iters, int warmup) {
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) MPI_Allreduce(send, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double mean = (MPI_Wtime() - start) / iters, slowest = 0;
  MPI_Allreduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 6) {
    fprintf(stderr, "usage: %s <min bytes> <max bytes> <factor> <iters> <warmup>\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const double min_bytes = atof(argv[1]), max_bytes = atof(argv[2]), factor = atof(argv[3]);
  const int iters = atoi(argv[4]), warmup = atoi(argv[5]);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  float* send = malloc((size_t)max_bytes + 4);
  float* recv = malloc((size_t)max_bytes + 4);
  for (size_t i = 0; i < (size_t)max_bytes / 4; ++i) send[i] = (float)(i % 16 + 1);
  for (double s = min_bytes; s <= max_bytes * 1.000001; s *= factor) {
    const int count = (int)((size_t)s / 4);
    const double t = time_allreduce(send, recv, count, iters, warmup);
    const double algbw = count * 4.0 / t / 1e9;
    if (rank == 0) printf("%zu %.4f\n", (size_t)count * 4, algbw * 2.0 * (size - 1) / size);
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return 0;
}
