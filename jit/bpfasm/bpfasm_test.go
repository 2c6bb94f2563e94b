package bpfasm

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf/asm"
)

func marshal(t *testing.T, insns asm.Instructions) string {
	t.Helper()
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return hex.EncodeToString(buf.Bytes())
}

func TestAssembleEncodings(t *testing.T) {
	tests := []struct {
		src  string
		want string // hex of the instruction bytes, exit excluded
	}{
		{"mov32 %r0, 1", "b400000001000000"},
		{"mov %r0, -1", "b7000000ffffffff"},
		{"mov64 %r1, %r2", "bf21000000000000"},
		{"add32 %r0, -3", "04000000fdffffff"},
		{"mov32 %r0, 0xffffffff", "b4000000ffffffff"},
		{"mov32 %r0, -2147483648", "b400000000000080"},
		{"sdiv32 %r0, %r1", "3c10010000000000"},
		{"smod %r0, 3", "9700010003000000"},
		{"neg %r0", "8700000000000000"},
		{"neg32 %r3", "8403000000000000"},
		{"movsx832 %r0, %r1", "bc10080000000000"},
		{"movsx3264 %r0, %r1", "bf10200000000000"},
		{"be16 %r0", "dc00000010000000"},
		{"le64 %r0", "d400000040000000"},
		{"swap32 %r0", "d700000020000000"},
		{"bswap64 %r2", "d702000040000000"},
		{"lddw %r0, 0x1122334455667788", "1800000088776655" + "0000000044332211"},
		{"lddw %r0, -1", "18000000ffffffff" + "00000000ffffffff"},
		{"lddw %r0, 2147483648", "1800000000000080" + "0000000000000000"},
		{"ldxb %r0, [%r1+2]", "7110020000000000"},
		{"ldxdw %r0, [%r10-8]", "79a0f8ff00000000"},
		{"ldxh %r0, [%r1]", "6910000000000000"},
		{"ldxsw %r0, [%r1+4]", "8110040000000000"},
		{"ldxsb %r0, [%r1]", "9110000000000000"},
		{"stw [%r1+0x4], 0x11223344", "6201040044332211"},
		{"stxdw [%r10-16], %r3", "7b3af0ff00000000"},
		{"lock add [%r10-8], %r1", "db1af8ff00000000"},
		{"lock fetch add32 [%r10-8], %r1", "c31af8ff01000000"},
		{"lock xchg [%r1], %r2", "db210000e1000000"},
		{"lock cmpxchg32 [%r10-4], %r1", "c31afcfff1000000"},
		{"jeq %r1, 0x80000000, +1", "1501010000000080"},
		{"jne32 %r1, %r2, -1", "5e21ffff00000000"},
		{"ja +0", "0500000000000000"},
		{"ja32 +3", "0600000003000000"},
		{"call 5", "8500000005000000"},
		{"call helper 6", "8500000006000000"},
		{"call %r2", "8d02000000000000"},
		{"jsle %r1, 0, exit", "d501000000000000"}, // exit is the next slot
	}
	for _, tt := range tests {
		t.Run(tt.src, func(t *testing.T) {
			insns, err := Assemble(tt.src + "\nexit # end\n")
			if err != nil {
				t.Fatalf("Assemble: %v", err)
			}
			got := marshal(t, insns)
			if want := tt.want + "9500000000000000"; got != want {
				t.Fatalf("encoding:\n got %s\nwant %s", got, want)
			}
			if src := insns[0].Source(); src == nil || !strings.Contains(src.String(), "line 1: ") {
				t.Fatalf("source of insn 0 = %v, want line 1", src)
			}
		})
	}
}

func TestAssembleLabels(t *testing.T) {
	src := `
mov %r0, 0
call local func1   # bpf-to-bpf
jne %r0, 15, failed
lddw %r1, 0x100000000
ja exit
failed:
mov %r0, -1
exit
func1: mov %r0, 15
exit
`
	insns, err := Assemble(src)
	if err != nil {
		t.Fatal(err)
	}
	// Slots: 0 mov, 1 call, 2 jne, 3-4 lddw, 5 ja, 6 mov, 7 exit, 8 mov, 9 exit.
	if c := insns[1]; !c.IsFunctionCall() || c.Constant != 6 {
		t.Errorf("call local = %v (const %d), want pseudo call +6", c, c.Constant)
	}
	if j := insns[2]; j.Offset != 3 {
		t.Errorf("jne offset = %d, want 3", j.Offset)
	}
	if j := insns[4]; j.Offset != 1 {
		t.Errorf("ja exit offset = %d, want 1 (first exit)", j.Offset)
	}
}

func TestAssembleErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"mnemonic", "ldxq %r0, %r1", `line 1 "ldxq %r0, %r1": unknown mnemonic "ldxq"`},
		{"register", "or %r0, %r50", "invalid register"},
		{"register r11", "mov %r11, 1", "invalid register"},
		{"no brackets", "ldxb %r0, %r1", "invalid memory operand"},
		{"offset range", "ldxb %r0, [%r1+0x10000]", "16-bit range"},
		{"offset range neg", "stb [%r1-32769], 1", "16-bit range"},
		{"operands", "lddw %r0", "lddw takes 2 operand(s), got 1"},
		{"imm dec", "mov32 %r0, 2147483648", "does not fit in 32 bits"},
		{"imm hex", "mov32 %r0, 0x100000000", "does not fit in 32 bits"},
		{"imm neg", "mov32 %r0, -2147483649", "does not fit in 32 bits"},
		{"imm junk", "mov %r0, 12ab", "invalid immediate"},
		{"label", "ja NOT_A_LABEL", `undefined label "NOT_A_LABEL"`},
		{"dup label", "a:\na:\nexit", "defined twice"},
		{"lock one operand", "lock or [%r10-8]", "invalid number of operands for lock"},
		{"lock bare", "lock", "invalid number of operands for lock"},
		{"lock op", "lock sub [%r10-8], %r1", "unknown atomic operation"},
		{"lock fetch xchg", "lock fetch xchg [%r10-8], %r1", "always fetches"},
		{"jump range", "ja +40000", "16 bits"},
		{"call mode", "call far 3", "unknown call mode"},
		{"kfunc", "call runtime 3", "not supported"},
		{"movsx", "movsx3232 %r0, %r1", "unknown mnemonic"},
		{"ldxsdw", "ldxsdw %r0, [%r1]", "no sign-extending 64-bit load"},
		{"empty", "# nothing\n\n", "no instructions"},
		{"jmp64 suffix", "jeq64 %r0, 1, +1", "unknown mnemonic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Assemble(tt.src + "\n")
			if err == nil {
				t.Fatalf("Assemble(%q) succeeded, want error containing %q", tt.src, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not contain %q", err, tt.want)
			}
			var ae *Error
			if tt.name != "empty" && (!errors.As(err, &ae) || ae.Line < 1) {
				t.Fatalf("error %T %v does not carry a line", err, err)
			}
		})
	}
}

func TestDecodeReserved(t *testing.T) {
	exit := "95 00 00 00 00 00 00 00"
	tests := []struct {
		name, hex, want string // want == "" means accepted
	}{
		{"add imm ok", "07 00 00 00 01 00 00 00", ""},
		{"add imm offset", "07 00 01 00 01 00 00 00", "insn 0 (07 00 01 00 01 00 00 00): reserved field offset is 1"},
		{"add imm src", "07 10 00 00 01 00 00 00", "reserved field src is 1"},
		{"add reg imm", "0f 00 00 00 01 00 00 00", "reserved field imm is 1"},
		{"add32 reg offset", "0c 00 01 00 00 00 00 00", "reserved field offset"},
		{"sdiv ok", "3f 10 01 00 00 00 00 00", ""},
		{"sdiv offset 2", "3f 10 02 00 00 00 00 00", "reserved field offset is 2"},
		{"movsx ok", "bf 10 20 00 00 00 00 00", ""},
		{"movsx32 by 32", "bc 10 20 00 00 00 00 00", "reserved field offset is 32"},
		{"mov imm offset", "b7 00 08 00 01 00 00 00", "reserved field offset is 8"},
		{"be16 offset", "dc 00 01 00 10 00 00 00", "reserved field offset"},
		{"le16 src", "d4 10 00 00 10 00 00 00", "reserved field src"},
		{"be width", "dc 00 00 00 11 00 00 00", "width imm is 17"},
		{"bswap reg", "df 00 00 00 10 00 00 00", "unknown byte swap"},
		{"neg imm", "84 00 00 00 01 00 00 00", "reserved field imm"},
		{"neg src reg", "8c 00 00 00 00 00 00 00", "neg takes no source"},
		{"call dst", "85 01 00 00 00 00 00 00", "reserved field dst"},
		{"call offset", "85 00 01 00 00 00 00 00", "reserved field offset"},
		{"call kfunc", "85 20 00 00 00 00 00 00", "kfunc"},
		{"call negative helper", "85 00 00 00 30 00 30 e2", "helper id -500170704 is out of range"},
		{"callx ok", "8d 02 00 00 00 00 00 00", ""},
		{"callx imm", "8d 02 00 00 01 00 00 00", "reserved field imm"},
		{"exit dst", "95 01 00 00 00 00 00 00", "reserved field dst"},
		{"exit imm", "95 00 00 00 01 00 00 00", "reserved field imm"},
		{"ja imm", "05 00 00 00 01 00 00 00", "reserved field imm"},
		{"ja32 ok", "06 00 00 00 00 00 00 00", ""},
		{"ja32 offset", "06 00 01 00 00 00 00 00", "reserved field offset"},
		{"jeq imm src", "15 10 00 00 00 00 00 00", "reserved field src"},
		{"jgt reg imm", "2d 00 00 00 01 00 00 00", "reserved field imm"},
		{"ldxdw imm", "79 a0 f8 ff 01 00 00 00", "reserved field imm"},
		{"ldxsdw", "99 10 00 00 00 00 00 00", "unknown load mode"},
		{"stdw src", "7a 1a f8 ff 00 00 00 00", "reserved field src"},
		{"stxw imm", "63 0a fc ff 01 00 00 00", "reserved field imm"},
		{"atomic byte", "d3 1a f8 ff 00 00 00 00", "32 or 64 bits"},
		{"atomic op", "db 1a f8 ff 02 00 00 00", "unknown atomic operation"},
		{"register 11", "b7 0b 00 00 00 00 00 00", "dst register r11"},
		{"legacy ld abs", "20 00 00 00 00 00 00 00", "legacy packet loads"},
		{"jmp32 call", "86 00 00 00 00 00 00 00", "not a JMP32"},
		{"alu op 0xe0", "e7 00 00 00 00 00 00 00", "unknown ALU operation"},
		{"lddw second slot", "18 00 00 00 01 00 00 00 01 00 00 00 00 00 00 00", "second slot"},
		{"lddw truncated", "18 00 00 00 01 00 00 00", ""}, // followed by exit: second slot is exit -> error below
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ParseHex(tt.hex + "\n" + exit)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Decode(b)
			if tt.name == "lddw truncated" {
				if err == nil || !strings.Contains(err.Error(), "second slot") {
					t.Fatalf("Decode = %v, want second-slot error", err)
				}
				return
			}
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Decode error = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestParseHex(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"0x5566778800000018\n0x1122334400000000", "1800000088776655" + "0000000044332211", ""},
		{"95 00 00 00 00 00 00 00 # exit", "9500000000000000", ""},
		{"0xzz", "", "line 1"},
		{"95 0", "", `"0" is neither`},
		{"\n9g", "", "line 2"},
	}
	for _, tt := range tests {
		b, err := ParseHex(tt.in)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ParseHex(%q) error = %v, want %q", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || hex.EncodeToString(b) != tt.want {
			t.Errorf("ParseHex(%q) = %x, %v; want %s", tt.in, b, err, tt.want)
		}
	}
	if _, err := Decode([]byte{0x95, 0, 0}); err == nil || !strings.Contains(err.Error(), "multiple of 8") {
		t.Errorf("Decode of 3 bytes: %v", err)
	}
}

// TestRoundTrip checks that assembling a program and decoding its bytes give
// the same instructions.
func TestRoundTrip(t *testing.T) {
	src := "mov32 %r0, 0\nlddw %r1, 0x123456789\nlock fetch xor [%r10-8], %r1\nsdiv %r0, 3\nmovsx1664 %r2, %r0\nja32 +0\nexit"
	insns, err := Assemble(src)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	back, err := Decode(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := marshal(t, back), marshal(t, insns); got != want {
		t.Fatalf("round trip: %s != %s", got, want)
	}
	if back[3].OpCode.ALUOp() != asm.SDiv || back[4].OpCode.ALUOp() != asm.MovSX16 {
		t.Fatalf("decoded ops %v %v", back[3].OpCode, back[4].OpCode)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte{0x95, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0x18, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		insns, err := Decode(b)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := insns.Marshal(&buf, binary.LittleEndian); err != nil {
			t.Fatalf("accepted program does not marshal: %v", err)
		}
	})
}

func FuzzAssemble(f *testing.F) {
	f.Add("mov32 %r0, 1\nexit")
	f.Add("lock fetch add [%r10-8], %r1\nja exit\nexit")
	f.Fuzz(func(t *testing.T, src string) {
		_, _ = Assemble(src)
	})
}
