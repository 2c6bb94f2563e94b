package fatbin

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzParse feeds arbitrary bytes to every entry point. None may panic;
// whatever parses must describe bytes inside the input.
func FuzzParse(f *testing.F) {
	ptx := append([]byte(samplePTX), 0)
	f.Add(buildContainer(f, testEntry{kind: KindPTX, arch: 80, flags: 0x11, data: ptx}))
	f.Add(buildContainer(f, testEntry{kind: KindPTX, arch: 80, flags: 0x2011, name: "a.cu", options: "-O3", data: ptx},
		testEntry{kind: KindELF, arch: 90, flags: 0x8011, data: bytes.Repeat([]byte("cubin"), 300)}))
	f.Add(append(buildContainer(f), buildContainer(f, testEntry{kind: KindELF, arch: 52, flags: 0x2013, data: make([]byte, 100)})...))
	f.Add([]byte(samplePTX))
	w := make([]byte, WrapperSize)
	binary.LittleEndian.PutUint32(w, WrapperMagic)
	f.Add(w)
	f.Add([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x3e\x00"))
	f.Add(newTestCubin("_Z1kv", "helper", "obj").data)

	f.Fuzz(func(t *testing.T, b []byte) {
		_ = Classify(b)
		if file, err := ParseImage(b); err == nil {
			for _, e := range file.Entries() {
				checkEntry(t, b, e)
			}
		}
		for _, c := range Scan(b, 0) {
			if c.Offset < 0 || c.End() > int64(len(b)) {
				t.Fatalf("Scan: container [%#x, %#x) outside %d bytes", c.Offset, c.End(), len(b))
			}
			for _, e := range c.Entries {
				checkEntry(t, b, e)
			}
		}
		_, _ = NewFile(bytes.NewReader(b))
		_, _ = CubinKernels(b)
	})
}

func checkEntry(t *testing.T, in []byte, e *Entry) {
	if e.Offset < 0 || e.Offset+int64(e.HeaderSize)+int64(e.PayloadSize) > int64(len(in)) {
		t.Fatalf("entry at %#x (%d+%d bytes) outside %d bytes", e.Offset, e.HeaderSize, e.PayloadSize, len(in))
	}
	data, err := e.Data()
	if err == nil && e.Compression() != CompressionNone && uint64(len(data)) > e.UncompressedSize {
		t.Fatalf("entry at %#x inflated to %d bytes, more than the %d announced", e.Offset, len(data), e.UncompressedSize)
	}
}
