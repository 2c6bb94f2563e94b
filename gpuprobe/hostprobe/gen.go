package hostprobe

// The eBPF program and its Go bindings (cudahost_{x86,arm64}_bpfel.go/.o)
// are generated and committed; `make generate` regenerates them and CI
// checks that they are current. x86-64 and arm64 (GH200, GB200 nodes).
//go:generate go tool bpf2go -target amd64,arm64 -cflags "-O2 -g -Wall -Werror" cudahost bpf/cudahost.bpf.c
