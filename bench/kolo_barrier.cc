// kolo_barrier: the smallest kolo job: kolo::init(), one barrier, kolo::shutdown(). Its
// wall time under a launcher is the job's start-up cost (bench/startup.sh compares
// kolorun, kolorun --mpi and torchrun with torch.distributed).
#include <kolo/kolo.h>

int main() {
  kolo::init();
  kolo::barrier();
  kolo::shutdown();
  return 0;
}
