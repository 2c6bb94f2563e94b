#!/bin/bash
# cupti-cost.sh - build and run cupti_cost.cu (an experiment) on the GPU
# machine; prints the activity record layout this CUPTI has and the per-launch
# cost of each way of tracing.
set -u
cd "$(dirname "$0")"
CUDA=${CUDA:-/usr/local/cuda}
INC=$(dirname "$(find "$CUDA"/ /usr/local/cuda*/extras -name cupti_activity.h 2>/dev/null | head -1)")
LIB=$(dirname "$(find "$CUDA"/ /usr/local/cuda*/extras -name 'libcupti.so*' 2>/dev/null | head -1)")
echo "cupti include: $INC lib: $LIB"
ls "$LIB" | grep -i cupti
KT=$(grep -o 'CUpti_ActivityKernel[0-9]*' "$INC"/cupti_activity*.h | sed 's/.*://' | sort -t l -k3 -V | uniq | tail -3 | tr '\n' ' ')
echo "kernel record types: $KT"
grep -n "cuptiActivityEnableDriverApi\|cuptiActivityRegisterTimestampCallback\|cuptiActivityEnableHWTrace\|CUPTI_API_VERSION " "$INC"/*.h | head
KLAST=$(echo $KT | tr ' ' '\n' | sort -V | tail -1)
KLAST=${KLAST:-CUpti_ActivityKernel}
cat > /tmp/off.c <<EOC
#include <stdio.h>
#include <stddef.h>
#include <cupti.h>
#define O(f) printf("  %-28s %zu\n", #f, offsetof($KLAST, f))
int main(void){ printf("$KLAST size %zu\n", sizeof($KLAST));
O(kind);O(start);O(end);O(completed);O(deviceId);O(contextId);O(streamId);O(gridX);O(blockX);O(correlationId);O(gridId);O(name);O(launchType);O(isSharedMemoryCarveoutRequested);O(graphNodeId);O(graphId);O(channelID);
printf("CUPTI_API_VERSION %d\n", CUPTI_API_VERSION); return 0; }
EOC
gcc -I"$CUDA/include" -I"$INC" /tmp/off.c -o /tmp/off && /tmp/off
nvcc -O2 -arch=sm_90 -DKT="$KLAST" -I"$INC" cupti_cost.cu -o /tmp/cupti_cost -L"$LIB" -lcupti -Xlinker -rpath="$LIB" || exit 1
for round in 1 2 3; do
  for m in plain act act-mono act-cb act-ext cb; do /tmp/cupti_cost $m 200000; done
done
