// Checks an elastic fashion_mnist run's --elastic-log files: within every epoch, every
// training image was trained on exactly once, counting a step's images when the commit
// after it completed in the same generation (work after the last commit is rolled back
// with the model and done again). Usage: kolo_count_samples IMAGES EPOCHS LOG...
// Prints one line per epoch and "samples ok"; exits 1 naming the first images counted
// zero or twice.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s IMAGES EPOCHS LOG...\n", argv[0]);
    return 2;
  }
  const long images = std::atol(argv[1]);
  const long epochs = std::atol(argv[2]);
  struct Batch {
    long gen, commit, epoch;
    std::vector<long> idx;
  };
  std::vector<Batch> batches;
  std::set<std::pair<long, long>> commits;  // (generation, commit number) that completed
  for (int a = 3; a < argc; ++a) {
    std::ifstream in(argv[a]);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string kind;
      f >> kind;
      if (kind == "commit") {
        long g = 0, n = 0;
        if (f >> g >> n) commits.insert({g, n});
      } else if (kind == "batch") {
        Batch b;
        if (!(f >> b.gen >> b.commit >> b.epoch)) continue;
        for (long i; f >> i;) b.idx.push_back(i);
        batches.push_back(std::move(b));
      }
    }
  }
  std::vector<std::vector<int>> count(static_cast<size_t>(epochs), std::vector<int>(images, 0));
  long rolled_back = 0;
  for (const Batch& b : batches) {
    if (!commits.count({b.gen, b.commit + 1})) {
      rolled_back += static_cast<long>(b.idx.size());
      continue;
    }
    if (b.epoch < 0 || b.epoch >= epochs) {
      std::printf("a step of epoch %ld: the run had %ld epochs\n", b.epoch, epochs);
      return 1;
    }
    for (long i : b.idx) {
      if (i < 0 || i >= images) {
        std::printf("image %ld: out of range (%ld images)\n", i, images);
        return 1;
      }
      ++count[b.epoch][i];
    }
  }
  bool ok = true;
  for (long e = 0; e < epochs; ++e) {
    long missing = 0, twice = 0, first_missing = -1, first_twice = -1;
    for (long i = 0; i < images; ++i) {
      const int c = count[e][i];
      if (c == 0 && missing++ == 0) first_missing = i;
      if (c > 1 && twice++ == 0) first_twice = i;
    }
    std::printf("epoch %ld: %ld images, %ld never trained on (first %ld), %ld more than once "
                "(first %ld)\n",
                e + 1, images, missing, first_missing, twice, first_twice);
    ok = ok && missing == 0 && twice == 0;
  }
  std::printf("%ld images of steps after the last commit were rolled back and done again\n",
              rolled_back);
  if (!ok) return 1;
  std::printf("samples ok\n");
  return 0;
}
