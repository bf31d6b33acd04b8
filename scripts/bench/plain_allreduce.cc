// A plain MPI_Allreduce loop, the yardstick `ms-diagnose check` is compared with
// (scripts/bench/check_vs_mpi.sh): bare MPI calls on buffers allocated and filled once, timed
// the way check times (warm-up, then `rounds` passes of a barrier and `iters` operations; a
// pass's time is the slowest rank's mean, the best pass is kept). Prints one line per size:
// "size out_of_place_busbw in_place_busbw" in GB/s with busbw = size / time * 2(n-1)/n.
// Usage: plain_allreduce <min bytes> <max bytes> <factor> <iters> <warmup> <rounds>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

struct Loop {
  int iters = 20, warmup = 5, rounds = 3;
};

// The slowest rank's mean seconds per MPI_Allreduce of `count` floats over one pass.
double time_pass(const void* source, float* recv, int count, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    MPI_Allreduce(source, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double mean = (MPI_Wtime() - start) / iters;
  double slowest = 0;
  MPI_Allreduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

// The best pass; send == nullptr reduces `recv` in place.
double time_allreduce(const float* send, float* recv, int count, const Loop& loop) {
  const void* source = send == nullptr ? MPI_IN_PLACE : send;
  for (int i = 0; i < loop.warmup; ++i) {
    MPI_Allreduce(source, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  double best = 1e30;
  for (int r = 0; r < loop.rounds; ++r) best = std::min(best, time_pass(source, recv, count, loop.iters));
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s <min bytes> <max bytes> <factor> <iters> <warmup> <rounds>\n",
                 argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const double min_bytes = std::atof(argv[1]), max_bytes = std::atof(argv[2]);
  const double factor = std::atof(argv[3]);
  const Loop loop{std::atoi(argv[4]), std::atoi(argv[5]), std::max(std::atoi(argv[6]), 1)};
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const size_t max_count = static_cast<size_t>(max_bytes) / sizeof(float);
  std::vector<float> send(max_count), recv(max_count), inplace(max_count);
  for (size_t i = 0; i < max_count; ++i) send[i] = inplace[i] = static_cast<float>(i % 16 + 1);
  const double bus = 2.0 * (size - 1) / size;
  for (double s = min_bytes; s <= max_bytes * 1.000001; s *= factor) {
    const int count = static_cast<int>(static_cast<size_t>(s) / sizeof(float));
    const double bytes = count * 4.0;
    const double t_out = time_allreduce(send.data(), recv.data(), count, loop);
    const double t_in = time_allreduce(nullptr, inplace.data(), count, loop);
    if (rank == 0) {
      std::printf("%zu %.4f %.4f\n", static_cast<size_t>(bytes), bytes / t_out / 1e9 * bus,
                  bytes / t_in / 1e9 * bus);
    }
  }
  MPI_Finalize();
  return 0;
}
