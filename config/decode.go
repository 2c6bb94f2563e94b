package config

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

// Unmarshal decodes conf into c after checking that every integer value
// fits its field's type: mapstructure converts with Go's conversions, so
// ring_slots: 4294967360 would otherwise become 64 and a value beyond
// uint64 a negative int. It implements confmap.Unmarshaler.
//
// Every problem is reported once, on its own line, under its "::" key:
// mapstructure's own errors (unknown keys, wrong types) are rewritten from
// its "a.b" names and nested "decoding failed" wrappers.
func (c *Config) Unmarshal(conf *confmap.Conf) error {
	var l errs
	checkFits(&l, "", conf.ToStringMap(), reflect.TypeOf(c).Elem())
	if err := conf.Unmarshal(c); err != nil {
		seen := map[string]bool{}
		for _, e := range l {
			seen[e.(*keyError).key] = true
		}
		for _, e := range decodeErrors(err, reflect.TypeOf(*c).String()) {
			if !seen[e.key] {
				l = append(l, e)
			}
		}
	}
	if len(l) > 0 {
		return &configErrors{l}
	}
	return nil
}

// configErrors are the problems Unmarshal found, one a line under a
// heading: mapstructure prints the error after the empty name of the
// top-level value.
type configErrors struct{ list errs }

func (e *configErrors) Error() string {
	lines := make([]string, len(e.list))
	for i, err := range e.list {
		lines[i] = err.Error()
	}
	return "gpuprobe config:\n" + strings.Join(lines, "\n")
}

func (e *configErrors) Unwrap() []error { return e.list }

// namedError is mapstructure's DecodeError: a field name and its problem.
type namedError interface {
	error
	Name() string
	Unwrap() error
}

// decodeErrors flattens a mapstructure error into one keyError per
// problem: joined errors split, wrappers dropped, names rewritten as keys
// (root is the name mapstructure gives the top-level struct).
func decodeErrors(err error, root string) []*keyError {
	var out []*keyError
	var walk func(error)
	walk = func(err error) {
		switch x := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range x.Unwrap() {
				walk(e)
			}
		case *keyError:
			out = append(out, x)
		case namedError:
			key := decodeKey(x.Name(), root)
			if inner := x.Unwrap(); nested(inner) {
				walk(inner)
			} else if msg := inner.Error(); strings.HasPrefix(msg, "has invalid keys: ") {
				for _, k := range strings.Split(strings.TrimPrefix(msg, "has invalid keys: "), ", ") {
					out = append(out, &keyError{key: joinKey(key, k), reason: "unknown key"})
				}
			} else {
				out = append(out, &keyError{key: key, reason: msg})
			}
		default:
			if inner := errors.Unwrap(err); inner != nil && nested(inner) {
				walk(inner)
				return
			}
			out = append(out, &keyError{reason: err.Error()})
		}
	}
	walk(err)
	return out
}

// nested reports whether err holds further named or joined errors (rather
// than being one problem's reason).
func nested(err error) bool {
	var n namedError
	var j interface{ Unwrap() []error }
	var k *keyError
	return errors.As(err, &n) || errors.As(err, &j) || errors.As(err, &k)
}

// mapIndex matches a map key in a mapstructure name ("[counts]"), not a
// list index ("[0]").
var mapIndex = regexp.MustCompile(`\[([^\]]*[^0-9\]][^\]]*)\]`)

// decodeKey turns a mapstructure name (sampling.one_in,
// programs[0].map_values[counts]) into a key (sampling::one_in,
// programs[0]::map_values::counts).
func decodeKey(name, root string) string {
	if name == root {
		return ""
	}
	return strings.ReplaceAll(mapIndex.ReplaceAllString(name, ".$1"), ".", "::")
}

var durationType = reflect.TypeOf(time.Duration(0))

// checkFits walks raw (the decoded YAML) along t and reports every integer
// field whose value does not fit t's integer type. Other mismatches are
// left to mapstructure, which reports them.
func checkFits(l *errs, key string, raw any, t reflect.Type) {
	if raw == nil {
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		checkFits(l, key, raw, t.Elem())
	case reflect.Struct:
		m, ok := raw.(map[string]any)
		if !ok {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if v, ok := m[name]; ok && name != "" && name != "-" {
				checkFits(l, joinKey(key, name), v, f.Type)
			}
		}
	case reflect.Slice, reflect.Array:
		list, ok := raw.([]any)
		if !ok {
			return
		}
		for i, v := range list {
			checkFits(l, fmt.Sprintf("%s[%d]", key, i), v, t.Elem())
		}
	case reflect.Map:
		m, ok := raw.(map[string]any)
		if !ok {
			return
		}
		for _, k := range sortedKeys(m) {
			checkFits(l, joinKey(key, k), m[k], t.Elem())
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if t == durationType {
			checkDuration(l, key, raw)
			return // strings have their own decode hook and range checks
		}
		checkInteger(l, key, raw, t)
	}
}

// checkDuration refuses a number in a duration key: mapstructure would
// read launch_timeout: 5 as 5 ns. Only 0 means the same in every unit.
func checkDuration(l *errs, key string, raw any) {
	if v, ok := integerValue(raw); ok && v.Sign() == 0 {
		return
	}
	switch raw.(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		l.add(key, "must be a duration with a unit (e.g. %vs or %vms), got the bare number %v", raw, raw, raw)
	}
}

func joinKey(key, name string) string {
	if key == "" {
		return name
	}
	return key + "::" + name
}

// checkInteger reports raw when it is a number that is not an integer or
// is outside t's range. Non-numbers are left to mapstructure.
func checkInteger(l *errs, key string, raw any, t reflect.Type) {
	v, ok := integerValue(raw)
	if !ok {
		if f, isFloat := raw.(float64); isFloat {
			l.add(key, "must be an integer, got %v", f)
		}
		return
	}
	lo, hi := typeRange(t)
	switch {
	case v.Cmp(lo) < 0:
		l.add(key, "must be ≥ %s (%s), got %s", lo, t, v)
	case v.Cmp(hi) > 0:
		l.add(key, "must be ≤ %s (%s), got %s", hi, t, v)
	}
}

// integerValue returns raw as an exact integer; floats count only when
// integral (YAML reads integers beyond uint64 as floats).
func integerValue(raw any) (*big.Int, bool) {
	switch x := raw.(type) {
	case int:
		return big.NewInt(int64(x)), true
	case int8, int16, int32, int64:
		return big.NewInt(reflect.ValueOf(x).Int()), true
	case uint, uint8, uint16, uint32, uint64:
		return new(big.Int).SetUint64(reflect.ValueOf(x).Uint()), true
	case float32:
		return integerValue(float64(x))
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) || x != math.Trunc(x) {
			return nil, false
		}
		v, _ := big.NewFloat(x).Int(nil)
		return v, true
	}
	return nil, false
}

// typeRange is the smallest and largest value of integer type t.
func typeRange(t reflect.Type) (lo, hi *big.Int) {
	bits := uint(t.Bits())
	one := big.NewInt(1)
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		return big.NewInt(0), new(big.Int).Sub(new(big.Int).Lsh(one, bits), one)
	}
	hi = new(big.Int).Sub(new(big.Int).Lsh(one, bits-1), one)
	return new(big.Int).Neg(new(big.Int).Add(hi, one)), hi
}
