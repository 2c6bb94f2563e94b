package conformance

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/cilium/ebpf/asm"

	"github.com/gpuprobe/gpuprobe/jit"
)

// Runner executes a verified conformance program and returns r0.
type Runner interface {
	Name() string
	Run(c *Case, p *jit.Program) (uint64, error)
}

// VerifyFunc checks a program before it runs; ctxSize is len(Case.Mem).
// The command wires it to verifier.Verify.
type VerifyFunc func(p *jit.Program, ctxSize int) error

var (
	gpuMu      sync.Mutex
	gpuFactory func() (Runner, error)
)

// RegisterGPURunner installs the constructor of the GPU runner that
// `gpuprobe conformance -gpu` uses (called from an init function of the
// package that drives the GPU).
func RegisterGPURunner(f func() (Runner, error)) {
	gpuMu.Lock()
	defer gpuMu.Unlock()
	gpuFactory = f
}

// GPURunner builds the registered GPU runner.
func GPURunner() (Runner, error) {
	gpuMu.Lock()
	f := gpuFactory
	gpuMu.Unlock()
	if f == nil {
		return nil, errors.New("no GPU runner is built into this binary")
	}
	return f()
}

// Stage says how far a case got.
type Stage string

// Stages of a case, in order.
const (
	StageParse    Stage = "parse"
	StageAssemble Stage = "assemble"
	StageVerify   Stage = "verify"
	StageRun      Stage = "run"
	StageResult   Stage = "result"
)

// Outcome is what happened to one case.
type Outcome struct {
	Path  string
	Stage Stage  // the stage that failed, or StageResult when all ran
	Err   error  // nil when the case passed
	R0    uint64 // r0, when the program ran
	Ran   bool   // the program ran to completion

	rejectErr error // why the toolchain refused the case
	mismatch  bool  // it ran and r0 differs from -- result
}

// Passed reports whether the case did what its file expects: the expected
// r0, or a rejection when the file has `-- error`.
func (o Outcome) Passed() bool { return o.Err == nil }

// Rejected reports whether the toolchain refused the case: a parse,
// assembly, verification or run-time error, or a wrong r0. This is what
// every file of the negative suite must produce.
func (o Outcome) Rejected() bool { return !o.Ran || o.mismatch }

// Evaluate runs one case through verify (may be nil) and r.
func Evaluate(c *Case, r Runner, verify VerifyFunc) Outcome {
	o := Outcome{Path: c.Path}
	rejected := func(stage Stage, err error) Outcome {
		o.Stage = stage
		if !c.HasError {
			o.Err = err
		} else {
			o.Err = nil // rejected, as the file expects
		}
		o.rejectErr = err
		return o
	}
	p, err := c.Program()
	if err != nil {
		return rejected(StageAssemble, err)
	}
	if verify != nil {
		if err := verify(p, len(c.Mem)); err != nil {
			return rejected(StageVerify, fmt.Errorf("verifier: %w", err))
		}
	}
	r0, err := r.Run(c, p)
	if err != nil {
		return rejected(StageRun, fmt.Errorf("%s: %w", r.Name(), err))
	}
	o.Stage, o.R0, o.Ran = StageResult, r0, true
	switch {
	case c.HasError:
		o.Err = fmt.Errorf("expected an error (%q), but the program ran and returned %#x", c.Error, r0)
	case r0 != c.Result:
		o.Err = fmt.Errorf("%s: r0 = %#x, want %#x", r.Name(), r0, c.Result)
		o.mismatch = true
	}
	return o
}

// Reason is the error that rejected the case, for negative runs.
func (o Outcome) Reason() error {
	if o.rejectErr != nil {
		return o.rejectErr
	}
	return o.Err
}

// EvaluateFile parses and evaluates one file.
func EvaluateFile(path string, r Runner, verify VerifyFunc) Outcome {
	c, err := ParseFile(path)
	if err != nil {
		return Outcome{Path: path, Stage: StageParse, Err: err}
	}
	return Evaluate(c, r, verify)
}

// Files expands paths: files are taken as they are, directories give
// every *.data file below them, sorted.
func Files(paths []string) ([]string, error) {
	var out []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("conformance path: %w", err)
		}
		if !st.IsDir() {
			out = append(out, p)
			continue
		}
		var found []string
		err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && strings.HasSuffix(path, ".data") {
				found = append(found, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("walk %s: %w", p, err)
		}
		if len(found) == 0 {
			return nil, fmt.Errorf("%s: no .data files", p)
		}
		sort.Strings(found)
		out = append(out, found...)
	}
	return out, nil
}

// Report runs every file and writes one line per failure to w. With
// negative set, a file passes when it is rejected (see Outcome.Rejected),
// and verbose also prints each rejection's reason. It returns the counts.
func Report(w io.Writer, files []string, r Runner, verify VerifyFunc, negative, verbose bool) (passed, failed int) {
	for _, f := range files {
		o := EvaluateFile(f, r, verify)
		ok := o.Passed()
		if negative {
			ok = o.Rejected()
		}
		switch {
		case ok && negative && verbose:
			fmt.Fprintf(w, "%s: rejected at %s: %v\n", f, o.Stage, o.Reason())
		case ok && verbose:
			fmt.Fprintf(w, "%s: ok\n", f)
		case !ok && negative:
			fmt.Fprintf(w, "%s: FAIL: accepted (r0 = %#x), want a rejection\n", f, o.R0)
		case !ok:
			fmt.Fprintf(w, "%s: FAIL: %v\n", f, o.Err)
		}
		if ok {
			passed++
		} else {
			failed++
		}
	}
	fmt.Fprintf(w, "%d passed, %d failed\n", passed, failed)
	return passed, failed
}

func sameEncoding(a, b asm.Instructions) bool {
	var ba, bb bytes.Buffer
	if a.Marshal(&ba, binary.LittleEndian) != nil || b.Marshal(&bb, binary.LittleEndian) != nil {
		return false
	}
	return bytes.Equal(ba.Bytes(), bb.Bytes())
}
