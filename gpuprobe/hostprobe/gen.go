package hostprobe

// The eBPF program and its Go bindings (cudahost_x86_bpfel.go/.o) are
// generated and committed; `make generate` regenerates them and CI checks
// that they are current. x86-64 only.
//go:generate go tool bpf2go -target amd64 -cflags "-O2 -g -Wall -Werror" cudahost bpf/cudahost.bpf.c
