package ptxmod

// Span is a byte range [Pos, End) of the module's source.
type Span struct {
	Pos, End int
}

// StmtKind says what a statement is.
type StmtKind uint8

// Statement kinds.
const (
	StmtInstr     StmtKind = iota + 1 // an instruction, possibly guarded: @%p1 bra $L;
	StmtLabel                         // name:
	StmtDirective                     // .reg .b32 %r<4>; .loc 1 2 3; .pragma "nounroll";
	StmtBlock                         // { ... } nested in a body (call sequences, inline asm)
)

// String returns a short name of the kind.
func (k StmtKind) String() string {
	switch k {
	case StmtInstr:
		return "instruction"
	case StmtLabel:
		return "label"
	case StmtDirective:
		return "directive"
	case StmtBlock:
		return "block"
	}
	return "statement"
}

// Stmt is one statement of a function body. Its Span covers its first
// token to its last (the ';' for instructions and most directives, the
// ':' of a label, the '}' of a block); white space and comments around
// it are not part of it.
type Stmt struct {
	Span
	Kind      StmtKind
	Line, Col int // of Pos, 1-based
	Depth     int // 0 for statements directly in the body, 1 inside one { }, ...

	// Instructions.
	Guard    string    // guard predicate register ("%p1"), "" when unguarded
	GuardNot bool      // the guard is negated: @!%p1
	Opcode   string    // "ld.global.v4.f32", "ret", "bra.uni"
	Operands []Operand // in source order

	// Labels.
	Label string

	// Directives: the directive word (".reg") and the statement's text.
	Directive string

	// Blocks: the statements inside the braces.
	Body []*Stmt
}

// OperandKind says what an operand is.
type OperandKind uint8

// Operand kinds.
const (
	OperandOther     OperandKind = iota // anything else: %p|%q, expressions
	OperandRegister                     // %r1, %tid.x
	OperandImmediate                    // 1, -1, 0f3F800000
	OperandSymbol                       // a label or variable name
	OperandAddress                      // [%rd1+4], [name], [%rd1]
	OperandVector                       // {%r1, %r2}
	OperandList                         // (param0, param1) in call
	OperandNot                          // !%p1
)

// Operand is one comma-separated operand of an instruction.
type Operand struct {
	Span
	Kind OperandKind
	Text string // the source text
	// For addresses: the base register or symbol and the constant
	// offset, when the address has the form [base], [base+n] or
	// [base-n]; Base is "" for other forms.
	Base   string
	Offset int64
	// For vectors and lists: the elements' text.
	Elems []string
}

// Param is one parameter (or return parameter) of a .entry or .func.
type Param struct {
	Span
	Space     string // ".param" or ".reg"
	Type      string // ".u64", ".b8", ...
	Align     int    // from .align N, 0 when absent
	Name      string
	ArraySize int  // N of name[N], 0 when not an array
	Ptr       bool // has .ptr (with its state space and alignment)
	Text      string
}

// Func is a .entry (kernel) or .func (device function), with or without
// a body.
type Func struct {
	Span             // from the first attribute (.visible) to the closing '}' or ';'
	Line, Col   int  // of Pos
	Entry       bool // .entry: a kernel
	Linkage     string
	Name        string
	NameSpan    Span
	Returns     []Param  // .func return parameters
	Params      []Param  // parameters
	ParamList   Span     // the parameter list, parentheses included; empty when absent
	Performance []string // .maxntid 256, 1, 1 and the like, one per directive, as written

	// Body, for definitions (empty for declarations ending in ';').
	HasBody   bool
	BodyOpen  int // offset of '{'
	BodyClose int // offset of '}'
	Body      []*Stmt

	// For the injector, computed by the parser:
	Top   *Stmt       // first statement after the leading declarations; nil when the body has none
	Exits []*Stmt     // every ret and exit instruction, at any depth, guarded or not
	Mem   []MemAccess // every ld and st, at any depth, in source order
}

// Decl is a module-scope statement that is not a function: .version,
// .target, .address_size, variable declarations, .file, .section, ...
type Decl struct {
	Span
	Line, Col int
	Directive string // the first directive word that is not a linkage attribute: ".global", ".version", ...
	Linkage   string // ".extern", ".visible", ".weak", ".common" or ""
	Name      string // declared variable name, for .global/.const/.shared/...; "" otherwise
}

// MemAccess describes a load or store.
type MemAccess struct {
	Stmt  *Stmt
	Store bool   // st (true) or ld/ldu (false)
	Space string // "global", "shared", "local", "const", "param", ... or "" for generic
	Type  string // "f32", "b128", ... ("" when the opcode has none)
	Vec   int    // 1, 2, 4 or 8
	Size  int    // bytes moved: Vec times the size of Type; 0 when unknown
	Addr  Operand
}

// Global reports whether the access is to global memory, explicitly.
func (m MemAccess) Global() bool { return m.Space == "global" }

// Generic reports whether the access has no state space, so that it may
// touch global, shared or local memory depending on the address.
func (m MemAccess) Generic() bool { return m.Space == "" }
