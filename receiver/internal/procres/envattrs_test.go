package procres

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseResAttrs(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []Attr
		err  string // "": no error
	}{
		{"empty", "", nil, ""},
		{"one", "deployment.environment=prod", []Attr{{"deployment.environment", "prod"}}, ""},
		{"operator's", "k8s.pod.name=train-0,k8s.namespace.name=ml,k8s.node.name=gpu-7",
			[]Attr{{"k8s.pod.name", "train-0"}, {"k8s.namespace.name", "ml"}, {"k8s.node.name", "gpu-7"}}, ""},
		{"whitespace and empty members", " a = 1 ,, b=2 , ", []Attr{{"a", "1"}, {"b", "2"}}, ""},
		{"percent-encoded", "team%3Dx=a%2Cb%3Dc,path=%2Fopt%2Fmodel,sp=two%20words",
			[]Attr{{"team=x", "a,b=c"}, {"path", "/opt/model"}, {"sp", "two words"}}, ""},
		{"utf-8 encoded", "owner=J%C3%BCrgen,raw=Jürgen", []Attr{{"owner", "Jürgen"}, {"raw", "Jürgen"}}, ""},
		{"raw = in a value", "url=a=b", []Attr{{"url", "a=b"}}, ""},
		{"empty value", "a=", []Attr{{"a", ""}}, ""},
		{"last wins", "a=1,b=2,a=3", []Attr{{"b", "2"}, {"a", "3"}}, ""},
		{"no =", "a=1,justakey", nil, "OTEL_RESOURCE_ATTRIBUTES: pair 2: no '='"},
		{"empty key", "=v", nil, "pair 1: key: empty key"},
		{"bad escape", "a=50%", nil, `pair 1: value of "a": malformed percent-encoding at byte 2`},
		{"bad hex", "a=%zz", nil, "malformed percent-encoding at byte 0"},
		{"control char decoded", "a=x%0Ay", nil, `value of "a": control character U+000A at byte 1`},
		{"control char raw", "a=x\ty", nil, "control character U+0009"},
		{"escape sequence", "a=%1B[31m", nil, "control character U+001B"},
		{"c1 control", "a=%C2%9B", nil, "control character U+009B"},
		{"invalid utf-8", "a=%FF%FE", nil, "invalid UTF-8"},
		{"nul in key", "a%00=1", nil, "key: control character U+0000"},
		{"long key", strings.Repeat("k", MaxKeyLen+1) + "=v", nil, "key: longer than 256 bytes"},
		{"long value", "a=" + strings.Repeat("%41", MaxValueLen+1), nil, "longer than 1024 bytes"},
		{"too many", strings.Repeat("a=1,", MaxAttrs) + "b=2", nil, "more than 64 pairs"},
		{"many of one key", strings.Repeat("a=1,", MaxAttrs), []Attr{{"a", "1"}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseResAttrs(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), EnvResAttrs+": ") {
					t.Fatalf("error %v, want one naming %s and saying %q", err, EnvResAttrs, tc.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestParseServiceName(t *testing.T) {
	tests := []struct{ in, want, err string }{
		{"", "", ""},
		{"  trainer ", "trainer", ""},
		{"a%2Cb", "a%2Cb", ""}, // not percent-decoded
		{"bad\nname", "", "OTEL_SERVICE_NAME: control character U+000A at byte 3; the variable is ignored"},
		{"\xff", "", "OTEL_SERVICE_NAME: invalid UTF-8"},
	}
	for _, tc := range tests {
		got, err := ParseServiceName(tc.in)
		if tc.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// FuzzParseResAttrs: no input panics, and whatever is accepted is bounded
// valid text.
func FuzzParseResAttrs(f *testing.F) {
	f.Add("a=b,c=%2C")
	f.Add("k=%")
	f.Fuzz(func(t *testing.T, s string) {
		as, err := ParseResAttrs(s)
		if err != nil {
			return
		}
		if len(as) > MaxAttrs {
			t.Fatalf("%d pairs", len(as))
		}
		for _, a := range as {
			if a.Key == "" || checkText(a.Key, MaxKeyLen) != "" || checkText(a.Value, MaxValueLen) != "" {
				t.Fatalf("accepted %q", a)
			}
		}
	})
}
