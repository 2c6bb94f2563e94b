package progmaps

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/gpuprobe/gpuprobe/config"
	"github.com/gpuprobe/gpuprobe/shm"
)

// TestRingAccounting: every record an application produced into a ring
// map is read, dropped or corrupt, exactly; a corrupt one also names the
// broken invariant (it is not folded into Dropped).
func TestRingAccounting(t *testing.T) {
	obj := buildObject(t, "usermaps")
	defs, err := loadFiles([]config.ProgramConfig{{Path: obj}}, Options{MaxThreads: 64})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name                   string
		produce                int
		lie                    bool // the last record's length lies
		readMax                int  // then the application goes (DrainRings)
		read, dropped, corrupt uint64
	}{
		{name: "a record longer than its slot", produce: 3, lie: true, read: 2, corrupt: 1},
		{name: "gone with records left", produce: 10, readMax: 4, read: 4, dropped: 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := NewInstance(defs, 42, 7, "app", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			defer in.Close()
			exits := in.Ring("exits")
			for range tt.produce {
				if r := exits.Produce(0, make([]byte, 16)); r != shm.Published {
					t.Fatal(r)
				}
			}
			if tt.lie {
				slot := shm.DataOffset + (tt.produce-1)*(exits.MaxPayload()+shm.SlotHeaderSize)
				binary.LittleEndian.PutUint32(exits.Region().Bytes()[slot+8:], 1<<20)
			}
			c := NewCollector(CollectorOptions{})
			c.ReadRings(in, time.Now(), tt.readMax)
			if tt.readMax > 0 {
				if in.Empty() {
					t.Fatal("Empty with records left")
				}
				if !c.DrainRings(in) || !in.Empty() {
					t.Fatal("DrainRings left records")
				}
			}
			cs := c.Counters()
			if cs.Records != tt.read || cs.Dropped != tt.dropped || cs.Corrupt != tt.corrupt {
				t.Fatalf("read %d, dropped %d, corrupt %d; want %d, %d, %d", cs.Records, cs.Dropped, cs.Corrupt, tt.read, tt.dropped, tt.corrupt)
			}
			var v *shm.ViolationError
			if got := errors.As(in.Err(), &v) && v.Reason == shm.BadLength; got != tt.lie {
				t.Fatalf("Err() = %v", in.Err())
			}
		})
	}
}
