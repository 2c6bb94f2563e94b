// Package btfdecode decodes the raw bytes of users' eBPF map values and
// ring-buffer records field by field, driven by the record's BTF type.
//
// New compiles a btf.Type (usually a struct, from ebpf.MapSpec.Value or the
// program's btf.Spec) into a flat list of leaf fields once; Decode then walks
// that list over each record without touching BTF again. Nested structs and
// unions are flattened into dotted names ("block.x"), array elements into
// indexed names ("hist[2]"), char arrays become NUL-terminated strings, enums
// decode to their enumerator names, bitfields are extracted and
// sign-extended, and typedefs and qualifiers are resolved.
package btfdecode

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/cilium/ebpf/btf"
)

// Limits on the types New accepts, so a hostile or huge BTF type cannot make
// the decoder large or slow.
const (
	MaxFields = 1024 // leaf fields; larger arrays are decoded as one bytes field
	MaxDepth  = 32   // nesting of structs, unions, arrays and typedefs
)

// Kind says which member of Field holds the value.
type Kind uint8

// Field kinds.
const (
	KindInt    Kind = iota + 1 // signed integer: Int
	KindUint                   // unsigned integer or pointer: Uint
	KindFloat                  // float or double: Float
	KindBool                   // _Bool: Uint is 0 or 1
	KindString                 // char array up to its first NUL: Str
	KindBytes                  // raw bytes (other arrays, odd-sized types): Bytes
	KindEnum                   // enumerator: Str is its name (or the number), Int/Uint the value
)

var kindNames = [...]string{"", "int", "uint", "float", "bool", "string", "bytes", "enum"}

// String returns the kind's name.
func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Field is one decoded leaf value of a record.
type Field struct {
	Name  string // dotted path: "block.x", "hist[2]", "grid[1].z"
	Kind  Kind
	Int   int64   // KindInt, KindEnum
	Uint  uint64  // KindUint, KindBool, KindEnum
	Float float64 // KindFloat
	Str   string  // KindString, KindEnum
	Bytes []byte  // KindBytes; aliases the record passed to Decode
	// Absent is set by DecodePrefix on a field that the record does not
	// hold whole (it ends before the field or inside it); the value is zero.
	Absent bool
}

// Desc describes one leaf field of a decoder's layout.
type Desc struct {
	Name      string
	Kind      Kind
	Offset    int // byte offset of the first byte read
	Size      int // bytes read (for bitfields: bytes spanned)
	BitOffset int // bitfields: offset of the lowest bit within the bytes read
	BitSize   int // bitfields: width in bits; 0 for whole-byte fields
}

// leaf is a compiled field.
type leaf struct {
	Desc
	signed bool
	enum   *btf.Enum
	byName map[uint64]string
}

// Decoder decodes records of one BTF type.
type Decoder struct {
	name   string
	size   int
	leaves []leaf
	span   SpanHint
}

// New compiles a decoder for records of type t. It fails with an error that
// names the field path when t contains something that cannot be decoded
// (functions, forward declarations, void, types nested deeper than MaxDepth).
func New(t btf.Type) (*Decoder, error) {
	if t == nil {
		return nil, errors.New("btfdecode: nil type")
	}
	size, err := btf.Sizeof(t)
	if err != nil {
		return nil, fmt.Errorf("btfdecode: size of %s: %w", typeName(t), err)
	}
	d := &Decoder{name: typeName(t), size: size}
	c := &compiler{d: d}
	if err := c.add(t, "", 0, 0); err != nil {
		return nil, fmt.Errorf("btfdecode: type %s: %w", d.name, err)
	}
	d.span = findSpan(d.leaves)
	return d, nil
}

// Size is the record size in bytes that the type declares.
func (d *Decoder) Size() int { return d.size }

// TypeName is the name of the record's type ("" for anonymous types).
func (d *Decoder) TypeName() string { return d.name }

// Fields describes the leaf fields Decode returns, in the same order.
func (d *Decoder) Fields() []Desc {
	out := make([]Desc, len(d.leaves))
	for i := range d.leaves {
		out[i] = d.leaves[i].Desc
	}
	return out
}

func typeName(t btf.Type) string {
	if n := t.TypeName(); n != "" {
		return n
	}
	return fmt.Sprintf("%T", t)
}

type compiler struct {
	d *Decoder
}

// add flattens type t found at byte offset off under path name.
func (c *compiler) add(t btf.Type, name string, off int, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("field %q: nested deeper than %d", name, MaxDepth)
	}
	if len(c.d.leaves) >= MaxFields {
		return c.bytes(t, name, off)
	}
	t = skipQualifiers(t)
	switch v := t.(type) {
	case *btf.Typedef:
		return c.add(v.Type, name, off, depth+1)
	case *btf.Int:
		return c.scalar(name, off, int(v.Size), intKind(v), v.Encoding&btf.Signed != 0, nil)
	case *btf.Float:
		if v.Size != 4 && v.Size != 8 {
			return c.bytes(v, name, off)
		}
		return c.scalar(name, off, int(v.Size), KindFloat, false, nil)
	case *btf.Enum:
		return c.scalar(name, off, int(v.Size), KindEnum, enumSigned(v), v)
	case *btf.Pointer:
		return c.scalar(name, off, 8, KindUint, false, nil)
	case *btf.Struct:
		return c.members(v.Members, name, off, depth)
	case *btf.Union:
		return c.members(v.Members, name, off, depth)
	case *btf.Array:
		return c.array(v, name, off, depth)
	case *btf.Void:
		return fmt.Errorf("field %q: void has no size", name)
	case *btf.Fwd:
		return fmt.Errorf("field %q: %s is only declared, not defined", name, v.Name)
	default:
		return fmt.Errorf("field %q: cannot decode %T", name, t)
	}
}

func skipQualifiers(t btf.Type) btf.Type {
	for i := 0; i < MaxDepth; i++ {
		switch v := t.(type) {
		case *btf.Const:
			t = v.Type
		case *btf.Volatile:
			t = v.Type
		case *btf.Restrict:
			t = v.Type
		case *btf.TypeTag:
			t = v.Type
		default:
			return t
		}
	}
	return t
}

func intKind(i *btf.Int) Kind {
	switch {
	case i.Encoding&btf.Bool != 0:
		return KindBool
	case i.Encoding&btf.Signed != 0:
		return KindInt
	}
	return KindUint
}

func (c *compiler) scalar(name string, off, size int, k Kind, signed bool, e *btf.Enum) error {
	switch size {
	case 1, 2, 4, 8:
	default:
		return c.raw(name, off, size)
	}
	l := leaf{Desc: Desc{Name: name, Kind: k, Offset: off, Size: size}, signed: signed, enum: e}
	if e != nil {
		// Keys are the values as Decode sees them: sign-extended from the
		// enum's size for signed enums, so bitfields of them match too.
		l.byName = make(map[uint64]string, len(e.Values))
		for _, ev := range e.Values {
			v := ev.Value
			if signed {
				v = uint64(signExtend(v, 8*int(e.Size)))
			}
			l.byName[v] = ev.Name
		}
	}
	c.d.leaves = append(c.d.leaves, l)
	return nil
}

// enumSigned reports whether an enum is signed: BTF says so (clang 15 and
// later), or, for older compilers, one of its values is negative at the
// enum's size.
func enumSigned(e *btf.Enum) bool {
	if e.Signed {
		return true
	}
	if e.Size == 0 || e.Size > 8 {
		return false
	}
	for _, v := range e.Values {
		if signExtend(v.Value, 8*int(e.Size)) < 0 {
			return true
		}
	}
	return false
}

func signExtend(u uint64, bits int) int64 {
	if bits <= 0 || bits >= 64 {
		return int64(u)
	}
	shift := 64 - bits
	return int64(u<<shift) >> shift
}

func (c *compiler) raw(name string, off, size int) error {
	if size <= 0 {
		return nil
	}
	c.d.leaves = append(c.d.leaves, leaf{Desc: Desc{Name: name, Kind: KindBytes, Offset: off, Size: size}})
	return nil
}

func (c *compiler) bytes(t btf.Type, name string, off int) error {
	size, err := btf.Sizeof(t)
	if err != nil {
		return fmt.Errorf("field %q: %w", name, err)
	}
	return c.raw(name, off, size)
}

func join(prefix, name string) string {
	switch {
	case name == "":
		return prefix
	case prefix == "":
		return name
	}
	return prefix + "." + name
}

func (c *compiler) members(ms []btf.Member, name string, off, depth int) error {
	for _, m := range ms {
		path := join(name, m.Name)
		if m.Name == "" && !isComposite(m.Type) {
			continue // unnamed padding bitfield
		}
		if m.BitfieldSize > 0 {
			if err := c.bitfield(m, path, off); err != nil {
				return err
			}
			continue
		}
		if m.Offset%8 != 0 {
			return fmt.Errorf("field %q: offset %d bits is not byte aligned", path, m.Offset)
		}
		if err := c.add(m.Type, path, off+int(m.Offset/8), depth+1); err != nil {
			return err
		}
	}
	return nil
}

func isComposite(t btf.Type) bool {
	switch skipQualifiers(btf.UnderlyingType(t)).(type) {
	case *btf.Struct, *btf.Union:
		return true
	}
	return false
}

func (c *compiler) bitfield(m btf.Member, path string, off int) error {
	if m.BitfieldSize > 64 {
		return fmt.Errorf("field %q: bitfield of %d bits", path, m.BitfieldSize)
	}
	under := skipQualifiers(btf.UnderlyingType(m.Type))
	k, signed := KindUint, false
	var e *btf.Enum
	switch v := under.(type) {
	case *btf.Int:
		k, signed = intKind(v), v.Encoding&btf.Signed != 0
	case *btf.Enum:
		k, signed, e = KindEnum, enumSigned(v), v
	default:
		return fmt.Errorf("field %q: bitfield of %T", path, under)
	}
	first := int(m.Offset) / 8
	last := (int(m.Offset) + int(m.BitfieldSize) - 1) / 8
	if err := c.scalar(path, off+first, 8, k, signed, e); err != nil {
		return err
	}
	l := &c.d.leaves[len(c.d.leaves)-1]
	l.Size = last - first + 1
	l.BitOffset = int(m.Offset) % 8
	l.BitSize = int(m.BitfieldSize)
	return nil
}

func (c *compiler) array(a *btf.Array, name string, off, depth int) error {
	elem := skipQualifiers(a.Type)
	esize, err := btf.Sizeof(elem)
	if err != nil {
		return fmt.Errorf("field %q: element size: %w", name, err)
	}
	n := int(a.Nelems)
	if n == 0 || esize == 0 {
		return nil // flexible array member: no bytes in the fixed record
	}
	if isChar(elem) {
		c.d.leaves = append(c.d.leaves, leaf{Desc: Desc{Name: name, Kind: KindString, Offset: off, Size: n}})
		return nil
	}
	if isByte(elem) {
		return c.raw(name, off, n)
	}
	per := leafCount(elem, 0)
	if per == 0 || len(c.d.leaves)+per*n > MaxFields {
		return c.raw(name, off, n*esize)
	}
	for i := 0; i < n; i++ {
		if err := c.add(a.Type, name+"["+strconv.Itoa(i)+"]", off+i*esize, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// isChar reports whether t is a character type: an Int with the char
// encoding or named "char" / "signed char" (a typedef such as __u8 or
// uint8_t marks bytes, not text).
func isChar(t btf.Type) bool {
	i, ok := t.(*btf.Int)
	if !ok || i.Size != 1 {
		return false
	}
	return i.Encoding&btf.Char != 0 || i.Name == "char" || i.Name == "signed char"
}

// isByte reports whether t (typedefs resolved) is a one-byte integer that is
// not a character: arrays of them (__u8 buf[16]) decode as bytes.
func isByte(t btf.Type) bool {
	i, ok := skipQualifiers(btf.UnderlyingType(t)).(*btf.Int)
	return ok && i.Size == 1 && i.Encoding&btf.Bool == 0
}

// leafCount estimates how many leaves type t flattens to (0 if unknown).
func leafCount(t btf.Type, depth int) int {
	if depth > MaxDepth {
		return 0
	}
	switch v := skipQualifiers(btf.UnderlyingType(t)).(type) {
	case *btf.Struct:
		return membersCount(v.Members, depth)
	case *btf.Union:
		return membersCount(v.Members, depth)
	case *btf.Array:
		if e := skipQualifiers(v.Type); isChar(e) || isByte(e) {
			return 1
		}
		return int(v.Nelems) * leafCount(v.Type, depth+1)
	}
	return 1
}

func membersCount(ms []btf.Member, depth int) int {
	n := 0
	for _, m := range ms {
		n += leafCount(m.Type, depth+1)
		if n > MaxFields {
			return MaxFields + 1
		}
	}
	return n
}
