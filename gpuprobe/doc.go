// Package gpuprobe holds no code: its folder gathers the packages that put
// probes into CUDA applications and talk to the shim that runs them.
//
// Into kernels (the device side), from the bottom up:
//
//   - fatbin reads the driver's fat-binary containers and their compressed
//     entries, to find a module's PTX;
//   - ptxmod parses PTX into a tree it can edit and print;
//   - probes holds the built-in GPU programs (kernel_phases);
//   - inject splices verified programs (package jit) into PTX kernels;
//   - sanpatch builds the SASS route's patch module, for kernels that ship
//     as machine code only (Compute Sanitizer);
//   - patcher answers a shim's PATCH: the image in, the patched module and
//     its description out, within a memory budget.
//
// Between the collector and the shim:
//
//   - agentwire is the agent protocol's schema: frames, byte layouts,
//     encoders and decoders, constants and the PATCH memory budget, a leaf
//     that patcher, sanpatch, config and the receiver import;
//   - agent is the socket itself: the collector's server (admission,
//     handshake, PATCH service) and a Go client, used by the receiver, the
//     harness command and the end-to-end tests.
//
// Beside them, hostprobe (with discover and userprog) probes the same CUDA
// applications from the host: eBPF uprobes on libcudart and libcuda,
// loaded into Linux through cilium/ebpf, for the processes the shim is not
// in and for the entry points it does not wrap. It shares none of the
// device-side code (it imports only record and, for user uprobe programs,
// jit's ELF reader) and none of the socket: it sits here because it
// answers the same question, what a CUDA process does, at the other end
// of the same calls, and its records meet the shim's in the receiver's
// translator.
package gpuprobe
