// launchlate_ks: launchlate.c with its launch clock declared as bpftime's
// kernel-shared array (1504), as in bpftime's
// launchlate-kernel-gpu-shared-map example. A host program uses the map,
// so it is the same kernel map: the values and metrics are launchlate's.
#define LAUNCH_CLOCK_TYPE BPF_MAP_TYPE_GPU_KERNEL_SHARED_ARRAY_MAP
#include "launchlate.c"
