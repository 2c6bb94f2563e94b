package config

import (
	"fmt"
	"math"
	"sort"
	"strconv"
)

// MapSeed is one initial value of programs[i]::map_values.
type MapSeed struct {
	Key   string   // the config key: programs[i]::map_values::<map>::<key>
	Map   string   // map name
	Index uint32   // array key
	Words []uint64 // little-endian words from the value's first byte
}

// MapSeeds parses p.MapValues, sorted by map and key; key is the program's
// config key ("programs[i]"). Every error names the key of its value.
func (p *ProgramConfig) MapSeeds(key string) ([]MapSeed, error) {
	var l errs
	seeds := p.mapSeeds(&l, key)
	if len(l) > 0 {
		return nil, l[0]
	}
	return seeds, nil
}

func (p *ProgramConfig) mapSeeds(l *errs, key string) []MapSeed {
	var out []MapSeed
	for _, m := range sortedKeys(p.MapValues) {
		mk := key + "::map_values::" + m
		if !identifier.MatchString(m) {
			l.add(mk, "map name must be a C identifier, got %q", m)
			continue
		}
		switch n := len(p.MapValues[m]); {
		case n == 0:
			l.add(mk, "must give at least one key")
		case n > maxSeedKeys:
			l.add(mk, "must give at most %d keys, got %d", maxSeedKeys, n)
			continue
		}
		for _, k := range sortedKeys(p.MapValues[m]) {
			s := MapSeed{Key: mk + "::" + k, Map: m}
			idx, err := strconv.ParseUint(k, 0, 32)
			if err != nil {
				l.add(s.Key, "key must be an unsigned 32-bit number, got %q", k)
				continue
			}
			s.Index = uint32(idx)
			if s.Words, err = words(p.MapValues[m][k]); err != nil {
				l.add(s.Key, "%v", err)
				continue
			}
			out = append(out, s)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return out[i].Map < out[j].Map || out[i].Map == out[j].Map && out[i].Index < out[j].Index
	})
	return out
}

// words reads a value: one word or a non-empty list of them.
func words(v any) ([]uint64, error) {
	list, ok := v.([]any)
	if !ok {
		w, err := word(v)
		if err != nil {
			return nil, err
		}
		return []uint64{w}, nil
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("must be an unsigned 64-bit number or a non-empty list of them, got []")
	}
	out := make([]uint64, len(list))
	for i, e := range list {
		w, err := word(e)
		if err != nil {
			return nil, fmt.Errorf("word [%d]: %w", i, err)
		}
		out[i] = w
	}
	return out, nil
}

// word reads one unsigned 64-bit number (YAML integer or numeric string).
func word(v any) (uint64, error) {
	switch x := v.(type) {
	case int:
		if x >= 0 {
			return uint64(x), nil
		}
	case int64:
		if x >= 0 {
			return uint64(x), nil
		}
	case uint64:
		return x, nil
	case uint:
		return uint64(x), nil
	case float64:
		if x >= 0 && x < math.MaxUint64 && x == math.Trunc(x) {
			return uint64(x), nil
		}
	case string:
		if w, err := strconv.ParseUint(x, 0, 64); err == nil {
			return w, nil
		}
	}
	return 0, fmt.Errorf("must be an unsigned 64-bit number (or a list of them), got %v (%T)", v, v)
}
