#!/usr/bin/env bash
# bench.sh: the probes' and the shim's performance figures on the GPU machine, from
# prebuilt bin/gpuprobe-gpucheck (CGO_ENABLED=1 go build -o
# bin/gpuprobe-gpucheck ./cmd/gpuprobe-gpucheck), bin/gpuprobe,
# bin/libgpuprobe.so and testdata/bpf/{kernelretsnoop,threadhist,kernelshared}.o,
# testdata/bpf/compat/{hostmaps,hashcount}.o.
#
#  1. Kernel time: nvcc -ptx of testdata/cuda/inject (vectorAddN on 2^24
#     floats, vectorAddGS, a tiled SGEMM 2048), then gpuprobe-gpucheck
#     -nocheck: configs uninstrumented, empty probe, kernel_phases (device
#     ring), kernelretsnoop and threadhist (retargeted to the kernel),
#     ROUNDS interleaved rounds of BATCH launches, medians, ratios vs
#     uninstrumented in the same run; configs slower than 50 ms a launch are
#     capped (1 launch x 3 rounds). Module-load latency per config: injection
#     first and from the cache, plus the patched module's load (driver JIT;
#     CUDA_CACHE_DISABLE=1, so every load compiles) minus the original's.
#  2. The physical limits (part model): testdata/cuda/model/maps_model.cu,
#     threadhist's and kernelretsnoop's shapes written by hand in CUDA C at
#     the exit of vectorAddN 2^24 and SGEMM 2048 (device maps, a
#     warp-aggregated threadhist, the ring and a counter in host-mapped
#     memory), in one process (needs only nvcc): CUDA events around each
#     launch, ROUNDS interleaved rounds of BATCH launches, medians, ratios
#     vs the plain kernel of the same run, the same 50 ms cap. Beside each
#     target, the compiled probe's ratio from $out/bench.csv (configs
#     threadhist and kernelretsnoop, maps in device memory) and the
#     model's; then the configs without a target beside the model shapes
#     of the same operation (model_pairs below: gpuhash beside the CUDA C
#     hash map of testdata/cuda/model/gpuhash_model.cuh).
#  3. Shim host cost per launch: scripts/gpu/launch-cost.sh (plain / shim
#     forwarding / shim recording, interleaved rounds, medians; the target
#     is checked on its ab figure, the same process launching through the
#     shim and around it).
# Prints the tables and the targets; writes $out/bench.csv, $out/model.csv
# (workload,shape,plain_us,probe_us,ratio), $out/model.txt and
# $out/launch-cost.txt (copied to $OUT when set). Exit non-zero only when a
# step failed to run (a missed target is reported, not an error).
#
# Environment: ROUNDS (default 7), BATCH (default 10), NVCC, GPU_ARCH (e.g.
# sm_90; default from nvidia-smi), BENCH_OUT (default build/gpu-bench),
# LAUNCH_ROUNDS / LAUNCH_N / LAUNCH_PARTS (launch-cost.sh's ROUNDS, N and
# PARTS; defaults 5, 100000, cross,ab), PARTS (kernels,model,launch; default
# all; gpu-test.sh passes its BENCH_PARTS), BENCH_CONFIGS (gpucheck
# -configs; default all eleven: kernelshared is bpftime's kernel-shared array
# (1504) counted per thread in host memory, hostmaps its host-memory arrays
# (1512, 1513, compat/hostmaps.o), gpuhash its GPU hash map (1501, device
# memory, compat/hashcount.o: a lookup, an insert the first time, and an
# atomic add per thread); kernel_phases_call is kernel_phases with its
# entry and exit called instead of inlined, for the inlining's effect;
# kernel_phases_1in8 and threadhist_1in8 pass the launch id to 1 launch in
# 8 and 0 to the others, with the probe sites skipped when it is 0, as
# sampling::device_one_in: 8 has the collector and the shim do).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
out=${BENCH_OUT:-$root/build/gpu-bench}
bin=${GPUCHECK_BIN:-$root/bin/gpuprobe-gpucheck}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
parts=${PARTS:-kernels,model,launch}
for p in ${parts//,/ }; do
	[[ ,kernels,model,launch, == *,$p,* ]] || { echo "gpu-bench: unknown part '$p' in PARTS (have kernels,model,launch)" >&2; exit 2; }
done
mkdir -p "$out"
status=0

if [[ -z ${GPU_ARCH:-} ]]; then
	cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
	GPU_ARCH=sm_${cap:-90}
fi

if [[ ,$parts, == *,kernels,* ]]; then
	if [[ ! -x $bin ]]; then
		echo "gpu-bench: $bin missing: CGO_ENABLED=1 go build -o bin/gpuprobe-gpucheck ./cmd/gpuprobe-gpucheck" >&2
		status=1
	else
		for s in vectoradd gemm exits; do
			"$nvcc" -ptx -O3 -arch="$GPU_ARCH" -o "$out/$s.ptx" "testdata/cuda/inject/$s.cu" || status=1
		done
		CUDA_CACHE_DISABLE=1 "$bin" -ptx "$out" -bpf testdata/bpf -nocheck -ringmode device \
			-configs "${BENCH_CONFIGS:-uninstrumented,empty,kernel_phases,kernel_phases_call,kernel_phases_1in8,kernelretsnoop,threadhist,threadhist_1in8,kernelshared,hostmaps,gpuhash}" \
			-rounds "${ROUNDS:-7}" -batch "${BATCH:-10}" -csv "$out/bench.csv" >"$out/gpucheck.log" 2>&1 || status=1
		sed -n '/^== bench on/,$p' "$out/gpucheck.log"
		if [[ -s $out/bench.csv ]]; then
			echo
			echo "targets (probe overhead):"
			awk -F, 'NR > 1 {
				if ($2 ~ /^vectorAddN/ && $3 == "kernel_phases device") printf "  kernel_phases <= 1.05x on vectorAdd 2^24: %.3fx %s\n", $5, ($5 <= 1.05 ? "met" : "MISSED")
				if ($2 ~ /^vectorAddN/ && $3 == "kernel_phases 1 in 8") printf "  (the same, averaged over launches with sampling::device_one_in 8: %.3fx %s)\n", $5, ($5 <= 1.05 ? "met" : "MISSED")
				if ($2 ~ /^sgemm/ && $3 == "empty probe") printf "  empty probe <= 1.01x on the GEMM: %.3fx %s\n", $5, ($5 <= 1.01 ? "met" : "MISSED")
			}' "$out/bench.csv"
		else
			echo "gpu-bench: no CSV; see $out/gpucheck.log" >&2
			tail -20 "$out/gpucheck.log" >&2
			status=1
		fi
	fi
fi

if [[ ,$parts, == *,model,* ]]; then
	echo
	rm -f "$out/model.csv"
	if "$nvcc" -O3 -arch="$GPU_ARCH" -o "$out/maps_model" testdata/cuda/model/maps_model.cu >"$out/model.txt" 2>&1 &&
		ROUNDS=${ROUNDS:-7} BATCH=${BATCH:-10} timeout 600 "$out/maps_model" "$out/model.csv" >>"$out/model.txt" 2>&1; then
		sed -n '/^== maps model/,$p' "$out/model.txt"
	else
		echo "gpu-bench: maps_model failed; see $out/model.txt:" >&2
		tail -20 "$out/model.txt" >&2
		status=1
	fi
	if [[ -s $out/bench.csv && -s $out/model.csv ]]; then
		echo
		[[ ,$parts, == *,kernels,* ]] || echo "(bench.csv from an earlier run: $(date -r "$out/bench.csv" '+%F %T'))"
		echo "targets, compiled probe beside the CUDA C model's limit:"
		# model.csv first (its ratios by kernel and shape), then bench.csv;
		# a kernel is named by its first word (vectorAddN, sgemm).
		awk -F, '
			BEGIN {
				target["threadhist", "sgemm"] = 1.02; target["threadhist", "vectorAddN"] = 2.4
				target["kernelretsnoop", "sgemm"] = 1.03; target["kernelretsnoop", "vectorAddN"] = 8
			}
			function kernel(s) { split(s, w, " "); return w[1] }
			function lim(k, shape) { return ((k, shape) in model) ? sprintf("%.3fx", model[k, shape]) : "n/a" }
			NR == FNR { if (FNR > 1) model[kernel($1), $2] = $5; next }
			FNR > 1 && (($3, kernel($2)) in target) {
				k = kernel($2); t = target[$3, k]; seen[$3, k] = 1
				extra = ($3 == "threadhist") ? "; warp-aggregated " lim(k, "threadhist_warpagg") : ""
				printf "  %s on %s (target <= %gx): %.3fx (limit from the CUDA C model: %s%s) %s\n",
					$3, $2, t, $5, lim(k, $3), extra, ($5 <= t ? "met" : "MISSED")
			}
			END {
				for (c in target) if (!(c in seen)) {
					split(c, p, SUBSEP)
					printf "  %s on %s: not in bench.csv (limit from the CUDA C model: %s)\n", p[1], p[2], lim(p[2], p[1])
				}
			}' "$out/model.csv" "$out/bench.csv"
		# CONFIG=SHAPE+SHAPE: a config with no target and the model shapes
		# of the same operation.
		model_pairs="gpuhash=gpuhash+gpuhash_warpagg kernelshared=shared_host hostmaps=shared_host+counter_host"
		echo "compiled probe beside the CUDA C model of the same operation:"
		awk -F, -v pairs="$model_pairs" '
			BEGIN { n = split(pairs, p, " "); for (i = 1; i <= n; i++) { split(p[i], kv, "="); shapes[kv[1]] = kv[2] } }
			function kernel(s) { split(s, w, " "); return w[1] }
			NR == FNR { if (FNR > 1) model[kernel($1), $2] = $5; next }
			FNR > 1 && ($3 in shapes) {
				m = split(shapes[$3], sh, "+"); lims = ""
				for (i = 1; i <= m; i++)
					lims = lims (i > 1 ? ", " : "") sh[i] " " ((kernel($2), sh[i]) in model ? sprintf("%.3fx", model[kernel($2), sh[i]]) : "n/a")
				printf "  %s on %s: %.3fx (CUDA C model: %s)\n", $3, $2, $5, lims
			}' "$out/model.csv" "$out/bench.csv"
	fi
fi

if [[ ,$parts, == *,launch,* ]]; then
	echo
	if OUT_DIR=$out/launch-cost ROUNDS=${LAUNCH_ROUNDS:-5} N=${LAUNCH_N:-100000} PARTS=${LAUNCH_PARTS:-cross,ab} bash scripts/gpu/launch-cost.sh >"$out/launch-cost.txt" 2>&1; then
		tail -12 "$out/launch-cost.txt"
		# The target's figure: the in-process difference (ab), which
		# carries no process-to-process spread; the cudart table's
		# recording - plain beside it.
		ab=$(awk '$1 == "ab-recording" {print $4}' "$out/launch-cost.txt")
		rec=$(awk '$1 == "recording" {print $3}' "$out/launch-cost.txt")
		[[ -n $ab ]] && awk -v a="$ab" -v r="${rec:-nan}" 'BEGIN { printf "  shim host cost per launch (driver API, same process) <= 100 ns: %+.1f ns %s (cudart, recording - plain across processes: %+.1f ns)\n", a, (a <= 100 ? "met" : "MISSED"), r }'
	else
		echo "gpu-bench: launch-cost.sh failed: $(tail -3 "$out/launch-cost.txt")" >&2
		status=1
	fi
fi

[[ -n ${OUT:-} ]] && cp -r "$out" "$OUT/" 2>/dev/null
exit "$status"
