package inject

import (
	"strings"
	"testing"
)

func TestKernelNames(t *testing.T) {
	tests := []struct {
		symbol string
		want   []string
	}{
		{"vectorAdd", []string{"vectorAdd"}},
		{"_Z9vectorAddPKfS0_Pf", []string{"_Z9vectorAddPKfS0_Pf", "vectorAdd"}},
		{"_ZN6sample9multiExitEPKiPii", []string{"_ZN6sample9multiExitEPKiPii", "sample::multiExit", "multiExit"}},
		{"_ZN2ns5inner6kernelIfEEvPT_", []string{"_ZN2ns5inner6kernelIfEEvPT_", "ns::inner::kernel", "kernel"}},
		{"_Z6kernelILi256EEvPf", []string{"_Z6kernelILi256EEvPf", "kernel"}},
		{"_ZNK3Foo3barEv", []string{"_ZNK3Foo3barEv", "Foo::bar", "bar"}},
		{"_Z99short", []string{"_Z99short"}},
		{"_Z", []string{"_Z"}},
	}
	for _, tc := range tests {
		t.Run(tc.symbol, func(t *testing.T) {
			if got := kernelNames(tc.symbol); strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMatchKernel(t *testing.T) {
	tests := []struct {
		target, symbol string
		want           bool
	}{
		{"_Z9vectorAddPKfS0_Pf", "_Z9vectorAddPKfS0_Pf", true},
		{"vectorAdd", "_Z9vectorAddPKfS0_Pf", true},
		{"vectorAdd", "_Z10vectorAddNPKfS0_Pfi", false},
		{"vectorAdd*", "_Z10vectorAddNPKfS0_Pfi", true},
		{"*", "anything", true},
		{"sample::multiExit", "_ZN6sample9multiExitEPKiPii", true},
		{"multiExit", "_ZN6sample9multiExitEPKiPii", true},
		{"sample::*", "_ZN6sample9multiExitEPKiPii", true},
		{"other::*", "_ZN6sample9multiExitEPKiPii", false},
		{"_Z9vectorAdd*", "_Z9vectorAddPKfS0_Pf", true},
		{"vectorAddC", "vectorAddC", true},
		{"vectoradd", "vectorAddC", false},
		{"cuda__Z9vectorAddPKfS0_Pf", "_Z9vectorAddPKfS0_Pf", true},
		{"cuda_vectorAdd", "_Z9vectorAddPKfS0_Pf", true},
		{"cuda_kernel", "cuda_kernel", true},
		{"cuda_", "_Z9vectorAddPKfS0_Pf", false},
		{"cuda__Z9vectorAddPKfS0_Pf", "_Z10vectorAddNPKfS0_Pfi", false},
	}
	for _, tc := range tests {
		if got := matchKernel(tc.target, tc.symbol); got != tc.want {
			t.Errorf("matchKernel(%q, %q) = %v, want %v", tc.target, tc.symbol, got, tc.want)
		}
	}
}
