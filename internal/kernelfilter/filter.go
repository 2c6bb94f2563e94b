// Package kernelfilter decides which kernels are probed by name: the
// compiled kernels::include and kernels::exclude patterns of the
// configuration (package config), which the receiver's translator and the
// SASS route's kernel queries both apply.
package kernelfilter

import (
	"fmt"
	"regexp"
)

// Filter decides which kernels are probed: the compiled patterns of
// kernels::include and kernels::exclude.
type Filter struct {
	include []*regexp.Regexp
	exclude []*regexp.Regexp
}

// New compiles the include and exclude patterns; an error names the
// pattern's key and index (kernels::include[1]).
func New(include, exclude []string) (*Filter, error) {
	f := &Filter{}
	for i, p := range include {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("kernels::include[%d]: %w", i, err)
		}
		f.include = append(f.include, re)
	}
	for i, p := range exclude {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("kernels::exclude[%d]: %w", i, err)
		}
		f.exclude = append(f.exclude, re)
	}
	return f, nil
}

// Match reports whether any of names (e.g. mangled and demangled) is
// included and none is excluded.
func (f *Filter) Match(names ...string) bool {
	if f == nil {
		return true
	}
	for _, re := range f.exclude {
		for _, n := range names {
			if re.MatchString(n) {
				return false
			}
		}
	}
	if len(f.include) == 0 {
		return true
	}
	for _, re := range f.include {
		for _, n := range names {
			if re.MatchString(n) {
				return true
			}
		}
	}
	return false
}
