// Record types for btfdecode's tests, compiled with
//   clang -target bpf -O2 -g -c records.bpf.c
// The test writes records in this exact layout with encoding/binary.

typedef unsigned long long __u64;
typedef unsigned int __u32;
typedef unsigned char __u8;
typedef signed char __s8;
typedef short __s16;
typedef __u64 ts_t;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name

enum phase { PHASE_QUEUED = 1, PHASE_RUNNING = 2, PHASE_DONE = 3 };
enum delta { DELTA_NEG = -2, DELTA_ZERO = 0 };

struct dims { __u32 x, y, z; };

struct flags {
	unsigned int ready : 1;
	unsigned int kind : 3;
	int delta : 5;
	unsigned long long big : 40;
	enum delta d : 4;
};

union val { __u64 u; double d; };

struct event {
	ts_t start_ns;
	ts_t end_ns;
	__u32 pid;
	int tid;
	char comm[16];
	__u8 raw[4];
	enum phase phase;
	struct dims block;
	struct flags f;
	float ratio;
	double score;
	_Bool ok;
	const volatile __s16 small;
	__s8 tiny;
	union val v;
	__u32 hist[3];
	struct dims grid[2];
	void *ptr;
	struct { __u32 a; __u32 b; };
};

struct counter { __u64 begin; __u64 finish; __u64 count; };

struct big { __u64 slots[2000]; char tail[8]; };

struct {
	__uint(type, 2); /* BPF_MAP_TYPE_ARRAY */
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct event);
} events SEC(".maps");

struct {
	__uint(type, 2);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct counter);
} counters SEC(".maps");

struct {
	__uint(type, 2);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct big);
} bigs SEC(".maps");

static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;

SEC("kprobe/vectorAdd")
int probe(void *ctx)
{
	__u32 k = 0;
	struct event *e = bpf_map_lookup_elem(&events, &k);
	if (e)
		e->pid++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
