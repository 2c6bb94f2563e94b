// Package conformance reads bpf_conformance .data files and runs them
// through a Runner: the reference interpreter here, or the GPU through a
// runner that another package registers with RegisterGPURunner.
package conformance

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gpuprobe/gpuprobe/jit"
	"github.com/gpuprobe/gpuprobe/jit/bpfasm"
)

// Case is one parsed .data file.
type Case struct {
	Path   string   // file name, for messages
	Header []string // the comment lines before the first section, verbatim

	Asm    string // -- asm, with every other line blanked so line numbers match the file
	HasAsm bool
	Raw    string // -- raw: hex instruction words or bytes
	HasRaw bool
	C      string // -- c: the C source the assembly came from (informational)

	Mem    []byte // -- mem: the bytes r1 points to; r2 = len(Mem)
	HasMem bool

	Result    uint64 // -- result: the expected r0
	HasResult bool
	Error     string // -- error: the expected error text (may be empty)
	HasError  bool
}

// ParseFile reads and parses the .data file at path.
func ParseFile(path string) (*Case, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read test data: %w", err)
	}
	return Parse(path, b)
}

// Parse parses the text of a .data file: `-- asm`, `-- raw`, `-- mem`,
// `-- result`, `-- error`, `-- c` and the informational `-- no register
// offset` sections. An unknown section, a file with no program, or one with
// neither result nor error is an error naming the file and line.
func Parse(path string, data []byte) (*Case, error) {
	c := &Case{Path: path}
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	asmLines := make([]string, len(lines))
	var raw, mem, result, errText, csrc []string
	section := ""
	seen := map[string]bool{}
	for n, line := range lines {
		at := fmt.Sprintf("%s:%d", path, n+1)
		if name, ok := strings.CutPrefix(line, "--"); ok {
			name = strings.TrimSpace(name)
			switch name {
			case "asm", "raw", "mem", "result", "error", "c", "no register offset":
			default:
				return nil, fmt.Errorf("%s: unknown section %q", at, "-- "+name)
			}
			if seen[name] {
				return nil, fmt.Errorf("%s: section %q appears twice", at, "-- "+name)
			}
			seen[name], section = true, name
			continue
		}
		switch section {
		case "":
			if t := strings.TrimSpace(line); t != "" {
				if !strings.HasPrefix(t, "#") {
					return nil, fmt.Errorf("%s: text %q before the first section", at, t)
				}
				c.Header = append(c.Header, line)
			}
		case "asm":
			asmLines[n] = line
		case "raw":
			raw = append(raw, line)
		case "mem":
			mem = append(mem, line)
		case "result":
			result = append(result, line)
		case "error":
			errText = append(errText, line)
		case "c":
			csrc = append(csrc, line)
		}
	}
	c.HasAsm, c.HasRaw, c.HasMem, c.HasResult, c.HasError = seen["asm"], seen["raw"], seen["mem"], seen["result"], seen["error"]
	c.Asm = strings.Join(asmLines, "\n")
	c.Raw = strings.Join(raw, "\n")
	c.C = strings.Join(csrc, "\n")
	c.Error = strings.TrimSpace(strings.Join(errText, "\n"))
	if !c.HasAsm && !c.HasRaw {
		return nil, fmt.Errorf("%s: no program (neither -- asm nor -- raw)", path)
	}
	if !c.HasResult && !c.HasError {
		return nil, fmt.Errorf("%s: neither -- result nor -- error", path)
	}
	if c.HasResult {
		v, err := parseResult(strings.TrimSpace(strings.Join(result, " ")))
		if err != nil {
			return nil, fmt.Errorf("%s: -- result: %w", path, err)
		}
		c.Result = v
	}
	if c.HasMem {
		b, err := parseMem(mem)
		if err != nil {
			return nil, fmt.Errorf("%s: -- mem: %w", path, err)
		}
		c.Mem = b
	}
	return c, nil
}

func parseResult(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("empty")
	}
	if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
		return strconv.ParseUint(h, 16, 64)
	}
	if strings.HasPrefix(s, "-") {
		v, err := strconv.ParseInt(s, 10, 64)
		return uint64(v), err
	}
	return strconv.ParseUint(s, 10, 64)
}

func parseMem(lines []string) ([]byte, error) {
	var out []byte
	for i, line := range lines {
		for _, f := range strings.Fields(line) {
			v, err := strconv.ParseUint(f, 16, 8)
			if err != nil {
				return nil, fmt.Errorf("line %d of the section: %q is not a hex byte", i+1, f)
			}
			out = append(out, byte(v))
		}
	}
	return out, nil
}

// Program assembles (or decodes) the case into a jit.Program. With both
// -- asm and -- raw, the two must encode the same instructions.
func (c *Case) Program() (*jit.Program, error) {
	p := &jit.Program{Name: programName(c.Path), Section: "conformance"}
	if c.HasRaw {
		b, err := bpfasm.ParseHex(c.Raw)
		if err != nil {
			return nil, fmt.Errorf("-- raw: %w", err)
		}
		insns, err := bpfasm.Decode(b)
		if err != nil {
			return nil, fmt.Errorf("-- raw: %w", err)
		}
		p.Insns = insns
	}
	if c.HasAsm {
		insns, err := bpfasm.Assemble(c.Asm)
		if err != nil {
			return nil, fmt.Errorf("-- asm: %w", err)
		}
		if p.Insns != nil && !sameEncoding(p.Insns, insns) {
			return nil, fmt.Errorf("-- asm and -- raw encode different programs")
		}
		p.Insns = insns
	}
	return p, nil
}

func programName(path string) string {
	base := path[strings.LastIndexAny(path, `/\`)+1:]
	base = strings.TrimSuffix(base, ".data")
	return strings.Map(func(r rune) rune {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			return r
		}
		return '_'
	}, base)
}
