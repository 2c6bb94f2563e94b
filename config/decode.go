package config

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"
	"time"

	"go.opentelemetry.io/collector/confmap"
)

// Unmarshal decodes conf into c after checking that every integer value
// fits its field's type: mapstructure converts with Go's conversions, so
// ring_slots: 4294967360 would otherwise become 64 and a value beyond
// uint64 a negative int. It implements confmap.Unmarshaler.
func (c *Config) Unmarshal(conf *confmap.Conf) error {
	var l errs
	checkFits(&l, "", conf.ToStringMap(), reflect.TypeOf(c).Elem())
	if len(l) > 0 {
		return errors.Join(l...)
	}
	if err := conf.Unmarshal(c); err != nil {
		return fmt.Errorf("gpuprobe config: %w", err)
	}
	return nil
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
