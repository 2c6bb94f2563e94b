package sanpatch

import (
	_ "embed"
	"fmt"
	"strconv"
	"strings"
)

// phasesPTX is kernel_phases' patch functions (shim/patch/sass_phases.cu)
// as PTX, written by shim/patch/gen.go: the same code as the shim's
// built-in patch image, for a module that also carries user programs (the
// shim loads one patch image per CUDA context).
//
//go:embed phases.ptx
var phasesPTX string

// Names of kernel_phases' patch functions and globals in a module built
// with Options.Phases: sass_phases.cu's gp_sp_ names with the prefix
// phasesPrefix instead.
const (
	PhasesEnterFunc = "__gpuprobe_kp_enter" // BLOCK_ENTER half of kernel_phases; EnterFunc calls it first
	PhasesExitFunc  = "__gpuprobe_kp_exit"  // BLOCK_EXIT half of kernel_phases; ExitFunc calls it first
	phasesPrefix    = "__gpuprobe_kp_"
	phasesSrcPrefix = "gp_sp_"
)

// PhasesMagicBase is the initial value of kernel_phases' first global in
// a module built with Options.Phases (PhasesGlobals[i] starts as
// PhasesMagicBase + i): the built-in image's magics, which the shim binds
// as it does there (shim/src/sass.c).
const PhasesMagicBase uint64 = 0x4750535053435230

// PhasesGlobals are kernel_phases' globals in a module built with
// Options.Phases, in the order of their magics.
var PhasesGlobals = []string{phasesPrefix + "scratch", phasesPrefix + "table", phasesPrefix + "ring"}

// phases returns the .version of the phases PTX and its body (everything
// after the .address_size line) with every gp_sp_ identifier renamed to
// phasesPrefix.
func phases() (version, body string, err error) {
	for line := range strings.Lines(phasesPTX) {
		if v, ok := strings.CutPrefix(line, ".version "); ok {
			version = strings.TrimSpace(v)
		}
	}
	_, after, ok := strings.Cut(phasesPTX, "\n.address_size ")
	if version == "" || !ok {
		return "", "", fmt.Errorf("sanpatch: phases.ptx has no .version or .address_size line (run `make shim-patch`)")
	}
	_, after, _ = strings.Cut(after, "\n")
	return version, strings.ReplaceAll(after, phasesSrcPrefix, phasesPrefix), nil
}

// maxVersion returns the higher of two PTX ISA versions ("7.8").
func maxVersion(a, b string) (string, error) {
	va, err := parseVersion(a)
	if err != nil {
		return "", err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return "", err
	}
	if va[0] > vb[0] || (va[0] == vb[0] && va[1] >= vb[1]) {
		return a, nil
	}
	return b, nil
}

// parseVersion parses a PTX ISA version "MAJOR.MINOR".
func parseVersion(s string) ([2]int, error) {
	maj, min, ok := strings.Cut(s, ".")
	a, err1 := strconv.Atoi(maj)
	b, err2 := strconv.Atoi(min)
	if !ok || err1 != nil || err2 != nil {
		return [2]int{}, fmt.Errorf("sanpatch: PTX version %q is not MAJOR.MINOR", s)
	}
	return [2]int{a, b}, nil
}
