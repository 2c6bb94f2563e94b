package shm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Child processes: the test binary re-executed with GPUPROBE_SHM_CHILD set
// and the region's memfd as fd 3.
const childEnv = "GPUPROBE_SHM_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(childMain(mode))
	}
	os.Exit(m.Run())
}

func childMain(mode string) int {
	switch mode {
	case "produce":
		id, _ := strconv.ParseUint(os.Getenv("GPUPROBE_SHM_ID"), 10, 32)
		count, _ := strconv.ParseUint(os.Getenv("GPUPROBE_SHM_COUNT"), 10, 64)
		r, err := Map(3, KindRing)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		g, err := NewRing(r)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		var n [3]uint64
		buf := make([]byte, 64)
		for seq := uint64(0); seq < count; seq++ {
			n[g.Produce(7, testRecord(buf, uint32(id), seq))]++
		}
		fmt.Printf("%d %d %d\n", n[0], n[1], n[2])
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
	return 2
}

// testRecord builds the payload both Go and C test producers write: u32 id,
// u32 length, u64 seq, filler, u64 FNV-1a of the bytes before it.
func testRecord(buf []byte, id uint32, seq uint64) []byte {
	l := 24 + int(seq%40)
	b := buf[:l]
	binary.LittleEndian.PutUint32(b[0:], id)
	binary.LittleEndian.PutUint32(b[4:], uint32(l))
	binary.LittleEndian.PutUint64(b[8:], seq)
	for i := 16; i < l-8; i++ {
		b[i] = byte(seq + uint64(i))
	}
	h := fnv.New64a()
	h.Write(b[:l-8])
	binary.LittleEndian.PutUint64(b[l-8:], h.Sum64())
	return b
}

// checkRecord verifies a delivered payload and returns its producer and seq.
func checkRecord(p []byte) (uint32, uint64, error) {
	if len(p) < 24 {
		return 0, 0, fmt.Errorf("payload of %d bytes", len(p))
	}
	id := binary.LittleEndian.Uint32(p)
	if l := binary.LittleEndian.Uint32(p[4:]); int(l) != len(p) {
		return 0, 0, fmt.Errorf("length field %d, payload %d bytes", l, len(p))
	}
	seq := binary.LittleEndian.Uint64(p[8:])
	h := fnv.New64a()
	h.Write(p[:len(p)-8])
	if h.Sum64() != binary.LittleEndian.Uint64(p[len(p)-8:]) {
		return 0, 0, fmt.Errorf("producer %d seq %d: checksum mismatch (torn record)", id, seq)
	}
	return id, seq, nil
}

type producerProc struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func goProducer(t *testing.T, g *Ring, id int, count uint64) *producerProc {
	p := &producerProc{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	p.cmd.Env = append(os.Environ(), childEnv+"=produce",
		"GPUPROBE_SHM_ID="+strconv.Itoa(id), "GPUPROBE_SHM_COUNT="+strconv.FormatUint(count, 10))
	p.cmd.ExtraFiles = []*os.File{g.Region().File()}
	return p
}

func cProducer(bin string, g *Ring, id int, count uint64) *producerProc {
	p := &producerProc{cmd: exec.Command(bin, "produce", "3", strconv.Itoa(id), strconv.FormatUint(count, 10))}
	p.cmd.ExtraFiles = []*os.File{g.Region().File()}
	return p
}

// buildCProducer compiles testdata/cproducer.c against the C header.
func buildCProducer(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		if cc, err = exec.LookPath("cc"); err != nil {
			t.Fatal("no C compiler: the C producer test needs gcc")
		}
	}
	bin := filepath.Join(t.TempDir(), "cproducer")
	out, err := exec.Command(cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror",
		"-Iinclude", "testdata/cproducer.c", "-o", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("compiling the C producer: %v\n%s", err, out)
	}
	return bin
}

// hammer runs the producer processes concurrently against g while this
// process consumes, then checks that every record was delivered once and
// intact, in per-producer order, or counted as dropped.
func hammer(t *testing.T, g *Ring, procs []*producerProc, count uint64) {
	for _, p := range procs {
		p.cmd.Stdout = &p.out
		p.cmd.Stderr = os.Stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, len(procs))
	for _, p := range procs {
		go func(p *producerProc) { done <- p.cmd.Wait() }(p)
	}
	c := g.NewConsumer(ConsumerOptions{})
	next := make([]uint64, len(procs)) // lowest seq still acceptable per producer
	delivered := make([]uint64, len(procs))
	var bad error
	check := func(r Record) {
		id, seq, err := checkRecord(r.Payload)
		if err == nil && int(id) >= len(procs) {
			err = fmt.Errorf("unknown producer %d", id)
		}
		if err == nil && seq < next[id] {
			err = fmt.Errorf("producer %d: seq %d after %d: duplicate or reordered", id, seq, next[id])
		}
		if err != nil {
			if bad == nil {
				bad = fmt.Errorf("ticket %d: %w", r.Ticket, err)
			}
			return
		}
		next[id] = seq + 1
		delivered[id]++
	}
	exited, reads := 0, 0
	for exited < len(procs) {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("producer: %v", err)
			}
			exited++
		default:
		}
		c.Read(0, check)
		// A slow consumer now and then, so the ring fills and drops.
		if reads++; reads%8 == 0 {
			time.Sleep(200 * time.Microsecond)
		}
	}
	for c.Position() < g.Stats().Head {
		if c.Read(0, check) == 0 && c.Position() < g.Stats().Head {
			t.Fatalf("consumer stuck at %d with head %d after all producers exited", c.Position(), g.Stats().Head)
		}
	}
	if bad != nil {
		t.Fatal(bad)
	}
	var published, dropped, total uint64
	for i, p := range procs {
		var n [3]uint64
		if _, err := fmt.Sscan(strings.TrimSpace(p.out.String()), &n[0], &n[1], &n[2]); err != nil {
			t.Fatalf("producer %d printed %q: %v", i, p.out.String(), err)
		}
		if n[0]+n[1]+n[2] != count {
			t.Fatalf("producer %d accounted %v of %d records", i, n, count)
		}
		if n[0] != delivered[i] {
			t.Errorf("producer %d published %d, consumer got %d", i, n[0], delivered[i])
		}
		published += n[0]
		dropped += n[1]
		total += count
	}
	s, cs := g.Stats(), c.Stats()
	if s.Dropped != dropped || s.Oversize != 0 || s.Stalled != 0 {
		t.Errorf("ring counters %+v, producers dropped %d", s, dropped)
	}
	var sum uint64
	for _, d := range delivered {
		sum += d
	}
	if total != sum+s.Dropped {
		t.Errorf("produced %d != delivered %d + dropped %d", total, sum, s.Dropped)
	}
	if s.Head != cs.Delivered+cs.Skipped {
		t.Errorf("head %d != delivered %d + skipped holes %d", s.Head, cs.Delivered, cs.Skipped)
	}
	t.Logf("%d records: %d delivered, %d dropped (%d of them holes after a ticket)", total, sum, s.Dropped, cs.Skipped)
	if sum == 0 || s.Dropped == 0 {
		t.Errorf("the test should both deliver and drop records: delivered %d dropped %d", sum, s.Dropped)
	}
}

func TestRingMultiProcess(t *testing.T) {
	const count = 100000
	tests := []struct {
		name     string
		goProcs  int
		cProcs   int
		slots    uint32
		slotSize uint32
	}{
		{"4 Go processes", 4, 0, 1024, 80},
		{"2 Go and 2 C processes", 2, 2, 256, 80},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newRing(t, tc.slotSize, tc.slots)
			var procs []*producerProc
			for i := 0; i < tc.goProcs; i++ {
				procs = append(procs, goProducer(t, g, len(procs), count))
			}
			if tc.cProcs > 0 {
				bin := buildCProducer(t)
				for i := 0; i < tc.cProcs; i++ {
					procs = append(procs, cProducer(bin, g, len(procs), count))
				}
			}
			hammer(t, g, procs, count)
		})
	}
}

// TestCHeaderAgrees checks gpbr_check on regions Go created, of every kind,
// and on a corrupted one.
func TestCHeaderAgrees(t *testing.T) {
	bin := buildCProducer(t)
	tests := []struct {
		spec    Spec
		corrupt func([]byte)
		want    string
	}{
		{Spec{Kind: KindRing, ValueSize: 64, MaxEntries: 32}, nil, "0"},
		{Spec{Kind: KindArray, ValueSize: 12, MaxEntries: 7}, nil, "0"},
		{Spec{Kind: KindPerThreadArray, ValueSize: 4, MaxEntries: 3, Lanes: 96}, nil, "0"},
		{Spec{Kind: KindPerWarpArray, ValueSize: 8, MaxEntries: 3, Lanes: 3}, nil, "0"},
		{Spec{Kind: KindMailbox, MaxEntries: 16}, nil, "0"},
		{Spec{Kind: KindRing, ValueSize: 64, MaxEntries: 32}, func(b []byte) { b[0] = 'X' }, "-2"},
		{Spec{Kind: KindRing, ValueSize: 64, MaxEntries: 32}, func(b []byte) { b[4] = 9 }, "-3"},
		{Spec{Kind: KindRing, ValueSize: 64, MaxEntries: 32}, func(b []byte) { b[40] = 72 }, "-5"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v/%v", tc.spec.Kind, tc.corrupt != nil), func(t *testing.T) {
			r, err := Create(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if tc.corrupt != nil {
				tc.corrupt(r.Bytes())
			}
			cmd := exec.Command(bin, "check", "3", strconv.Itoa(int(tc.spec.Kind)))
			cmd.ExtraFiles = []*os.File{r.File()}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tc.want {
				t.Fatalf("gpbr_check = %s, want %s", got, tc.want)
			}
			if _, err := ParseHeader(r.Bytes(), int64(len(r.Bytes())), tc.spec.Kind); (err == nil) != (tc.want == "0") {
				t.Fatalf("Go and C disagree: ParseHeader error %v, C %s", err, tc.want)
			}
		})
	}
}
