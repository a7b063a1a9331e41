/* kolo_mpi_idle: an MPI program for kolorun's tests. It initializes MPI (so OpenMPI's
 * shared-memory transport creates its segment files), prints the segment files it has
 * mapped ("segment PATH", from /proc/self/maps) and "ready", then sleeps until killed
 * (at most 60 s). Not for: testing MPI itself. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  FILE* maps = fopen("/proc/self/maps", "r");
  char line[4096];
  while (maps != NULL && fgets(line, sizeof line, maps) != NULL) {
    const char* path = strchr(line, '/');
    if (path != NULL && strstr(path, "vader_segment") != NULL) printf("segment %s", path);
  }
  if (maps != NULL) fclose(maps);
  printf("ready\n");
  fflush(stdout);
  sleep(60);
  MPI_Finalize();
  return 0;
}
