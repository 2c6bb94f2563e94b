package discover

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuprobe/gpuprobe/gpuprobe/hostprobe/internal/libfile"
)

// configKey names entry i of host_probes::library_paths.
func configKey(i int) string { return fmt.Sprintf("host_probes::library_paths[%d]", i) }

// FromConfig resolves host_probes::library_paths. A directory contributes
// its libcuda.so* and libcudart.so* entries (not recursively; symlinks
// resolved, one Library per file). A file is classified by its name, else
// by the CUDA entry points it defines. Paths must be absolute (the config
// validation rejects others).
//
// Every path is tried: the result holds what was found and the error joins
// one error per bad path, each naming the config key and the path. A
// directory without any CUDA library is an error too: the operator named it
// to find one.
func FromConfig(paths []string) ([]Library, error) {
	var (
		libs []Library
		errs []error
		seen = map[Key]bool{}
	)
	add := func(l Library) {
		if !seen[l.Key()] {
			seen[l.Key()] = true
			libs = append(libs, l)
		}
	}
	for i, p := range paths {
		key := configKey(i)
		found, err := fromConfigPath(key, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", key, err))
		}
		for _, l := range found {
			add(l)
		}
	}
	sortLibraries(libs)
	return libs, errors.Join(errs...)
}

func fromConfigPath(key, p string) ([]Library, error) {
	if !filepath.IsAbs(p) {
		return nil, fmt.Errorf("%q: must be an absolute path", p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	source := "config " + key
	if !fi.IsDir() {
		l, err := libraryFile(p, source, KindUnknown, true)
		if err != nil {
			return nil, err
		}
		return []Library{l}, nil
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		return nil, err
	}
	var (
		libs []Library
		errs []error
		seen = map[Key]bool{}
	)
	for _, e := range entries {
		if KindOfName(e.Name()) == KindUnknown {
			continue
		}
		l, err := libraryFile(filepath.Join(p, e.Name()), source, KindUnknown, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !seen[l.Key()] {
			seen[l.Key()] = true
			libs = append(libs, l)
		}
	}
	if len(libs) == 0 && len(errs) == 0 {
		return nil, fmt.Errorf("%s: directory holds no libcuda.so* or libcudart.so* file", p)
	}
	return libs, errors.Join(errs...)
}

// testHookChecked, when set by a test, runs between the identity and
// owner checks of a file and the reading of its ELF.
var testHookChecked func(path string)

// libraryFile resolves symlinks in path, opens the file once (refusing a
// symlink put in its place meanwhile, a file not owned by root (or the
// collector's user) and one writable by every user) and classifies it: as hint
// when that is known (ldconfig's soname), else by its name (the link's or
// the target's), else, when bySymbols, by the CUDA entry points it defines.
func libraryFile(path, source string, hint Kind, bySymbols bool) (Library, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return Library{}, err
	}
	f, err := libfile.Open(real)
	if err != nil {
		return Library{}, err
	}
	defer f.Close()
	if err := f.CheckOwner(); err != nil {
		return Library{}, err
	}
	id := idOfFile(f)
	kind := hint
	if kind == KindUnknown {
		kind = KindOfName(path)
	}
	if kind == KindUnknown {
		kind = KindOfName(real)
	}
	if testHookChecked != nil {
		testHookChecked(real)
	}
	info, err := inspectELF(f)
	if err != nil {
		return Library{}, err
	}
	if kind == KindUnknown && bySymbols {
		kind = info.kind()
	}
	if kind == KindUnknown {
		return Library{}, fmt.Errorf("%s: not a CUDA library: the name is not libcuda.so* or libcudart.so* and it defines neither %s nor %s", real, runtimeSymbol, driverSymbol)
	}
	return Library{Path: real, Dev: id.dev, Ino: id.ino, Kind: kind, Source: source}, nil
}
