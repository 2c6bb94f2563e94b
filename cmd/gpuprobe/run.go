package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpuprobe/gpuprobe/config"
)

func init() {
	Register(&Command{
		Name:    "run",
		Summary: "run a CUDA application with the gpuprobe shim (libgpuprobe.so) attached",
		Run:     runRun,
	})
}

// ShimName is the file name of the in-application shim.
const ShimName = "libgpuprobe.so"

// runOpts are the parsed flags of `gpuprobe run`.
type runOpts struct {
	socket string   // agent socket (GPUPROBE_SOCKET)
	shim   string   // path of libgpuprobe.so
	trace  string   // GPUPROBE_TRACE value ("" = leave as is)
	sass   bool     // opt in to the SASS route (GPUPROBE_SASS=1)
	argv   []string // the application and its arguments
}

func parseRun(args []string, stderr io.Writer) (*runOpts, error) {
	fs := newUsageFlags("run", "usage: gpuprobe run [--socket PATH] [--shim PATH] [--trace 1|FILE] [--sass] -- APP [ARGS...]", stderr)
	o := &runOpts{}
	defSocket := os.Getenv("GPUPROBE_SOCKET")
	if defSocket == "" {
		defSocket = config.DefaultSocket
	}
	fs.StringVar(&o.socket, "socket", defSocket, "agent socket of the gpuprobe receiver (default: $GPUPROBE_SOCKET, else the receiver's default)")
	fs.StringVar(&o.shim, "shim", "", "path of "+ShimName+" (default: $GPUPROBE_SHIM, else next to the gpuprobe binary)")
	fs.StringVar(&o.trace, "trace", "", "log what the shim intercepts: 1 = stderr, or a file path (sets GPUPROBE_TRACE)")
	fs.BoolVar(&o.sass, "sass", false, "opt in to the SASS route: probes in SASS-only kernels through the Compute Sanitizer API when the collector's probes::sass is on, instead of CUPTI's windows (sets GPUPROBE_SASS=1)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.argv = fs.Args()
	if len(o.argv) == 0 {
		fs.Usage()
		return nil, errors.New("no application given")
	}
	if o.socket == "" {
		return nil, errors.New("--socket: empty path")
	}
	return o, nil
}

// findShim returns the shim to preload: --shim, else $GPUPROBE_SHIM, else
// libgpuprobe.so in the directory of the gpuprobe executable (bin/).
func findShim(flagPath string, exe func() (string, error)) (string, error) {
	p := flagPath
	if p == "" {
		p = os.Getenv("GPUPROBE_SHIM")
	}
	if p == "" {
		self, err := exe()
		if err != nil {
			return "", fmt.Errorf("locating the gpuprobe binary to find %s next to it: %w", ShimName, err)
		}
		if r, err := filepath.EvalSymlinks(self); err == nil {
			self = r
		}
		p = filepath.Join(filepath.Dir(self), ShimName)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("shim path %s: %w", p, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("shim %s: %w (build it with `make bin/%s`, or pass --shim)", abs, err, ShimName)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("shim %s is not a regular file", abs)
	}
	return abs, nil
}

// optInSASS returns env with GPUPROBE_SASS=1 in place of any value it had
// (getenv takes the first).
func optInSASS(env []string) []string {
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GPUPROBE_SASS=") })
	return append(env, "GPUPROBE_SASS=1")
}

// runEnv returns environ with the shim preloaded (appended to an existing
// LD_PRELOAD, once) and the socket (and trace) set.
func runEnv(environ []string, shim, socket, trace string) []string {
	out := make([]string, 0, len(environ)+3)
	preload := ""
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "LD_PRELOAD":
			preload = v
			continue
		case "GPUPROBE_SOCKET":
			continue
		case "GPUPROBE_TRACE":
			if trace != "" {
				continue
			}
		}
		out = append(out, kv)
	}
	has := false
	for _, p := range strings.FieldsFunc(preload, func(r rune) bool { return r == ':' || r == ' ' }) {
		if p == shim {
			has = true
		}
	}
	switch {
	case preload == "":
		preload = shim
	case !has:
		preload += ":" + shim
	}
	out = append(out, "LD_PRELOAD="+preload, "GPUPROBE_SOCKET="+socket)
	if trace != "" {
		out = append(out, "GPUPROBE_TRACE="+trace)
	}
	// The shim trusts a collector running as root, or as the uid named
	// here: whoever runs `gpuprobe run` may trust a collector of their
	// own (root gains nothing from it), unless the environment names one.
	if !slices.ContainsFunc(out, func(kv string) bool { return strings.HasPrefix(kv, "GPUPROBE_SERVER_UID=") }) {
		if uid := os.Getuid(); uid != 0 {
			out = append(out, "GPUPROBE_SERVER_UID="+strconv.Itoa(uid))
		}
	}
	return out
}

// checkSocket returns the socket path to pass to the shim (absolute: the
// application may change its working directory) and what makes a collector
// there impossible, or "" when a socket is there (a relative path that
// names one is passed resolved, without a word). Whether a collector
// answers on it is the shim's to find out at its handshake: connecting
// here would count as a failed handshake in the collector.
func checkSocket(path string) (string, string) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return path, fmt.Sprintf("socket path %q: %v", path, err)
	}
	rel := ""
	if !filepath.IsAbs(path) {
		rel = fmt.Sprintf(" (relative path %q, resolved from the working directory)", path)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return abs, fmt.Sprintf("no collector socket at %s%s: no such file; is the collector running, with agent::socket set to this path?", abs, rel)
	case err != nil:
		return abs, fmt.Sprintf("collector socket %s%s: %v", abs, rel, errors.Unwrap(err))
	case st.Mode().Type() != fs.ModeSocket:
		return abs, fmt.Sprintf("%s%s is not a socket (%s)", abs, rel, st.Mode().Type())
	}
	return abs, ""
}

// quiet reports whether env silences the one-line notice of a missing
// collector (GPUPROBE_QUIET, set and not 0), as the shim reads it.
func quiet(env []string) bool {
	v, n := "", 0
	for _, kv := range env {
		if k, val, _ := strings.Cut(kv, "="); k == "GPUPROBE_QUIET" && n == 0 {
			v, n = val, 1
		}
	}
	return v != "" && v != "0"
}

// execApp replaces this process with the application (tests replace it).
var execApp = func(path string, argv, env []string) error { return syscall.Exec(path, argv, env) }

func runRun(args []string, stdout, stderr io.Writer) int {
	o, err := parseRun(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "gpuprobe run:", err)
		}
		return usageStatus(err)
	}
	shim, err := findShim(o.shim, os.Executable)
	if err != nil {
		fmt.Fprintln(stderr, "gpuprobe run:", err)
		return 1
	}
	path, err := exec.LookPath(o.argv[0])
	if err != nil {
		fmt.Fprintf(stderr, "gpuprobe run: application %q: %v\n", o.argv[0], err)
		return 127
	}
	socket, problem := checkSocket(o.socket)
	env := runEnv(os.Environ(), shim, socket, o.trace)
	if problem != "" && !quiet(env) {
		// Said once here; the shim's own line would repeat it.
		fmt.Fprintf(stderr, "gpuprobe run: %s; running %s unprobed (GPUPROBE_QUIET=1 silences this)\n", problem, o.argv[0])
		env = append(env, "GPUPROBE_QUIET=1")
	}
	if o.sass {
		env = optInSASS(env)
	}
	if err := execApp(path, o.argv, env); err != nil {
		fmt.Fprintf(stderr, "gpuprobe run: exec %s: %v\n", path, err)
		return 126
	}
	return 0
}
