package demangle

// The parser builds a small tree of these node types; print.go turns a tree
// into text the way binutils' c++filt does. Types that can carry a
// declarator part on the right (functions, arrays) are printed in two halves,
// left and right, so that "pointer to function" reads "void (*)(int)".

type node interface{}

// nameN is an identifier or a fixed piece of text (a builtin type name,
// "std", "(anonymous namespace)").
type nameN struct{ s string }

// builtinN is a builtin type; code is its mangling (used to print literals).
type builtinN struct {
	s    string
	code string
}

// qualN is scope::name.
type qualN struct{ scope, name node }

// tmplN is name<args...>.
type tmplN struct {
	name node
	args []node
}

// abiN is name[abi:tag].
type abiN struct {
	name node
	tag  string
}

// ctorN is a constructor or destructor; base is the class name it repeats.
type ctorN struct {
	base node
	dtor bool
}

// opN is an operator function name such as "operator+".
type opN struct{ op *opInfo }

// convN is a conversion operator, "operator T".
type convN struct{ typ node }

// litOpN is a literal operator, operator"" _suffix.
type litOpN struct{ suffix string }

// specialN is a special name such as "vtable for T".
type specialN struct {
	prefix string
	child  node
	suffix string
	tail   node // printed after suffix when set
}

// encN is a function: [ret] name(params) cv ref.
type encN struct {
	name   node
	ret    node
	params []node
	cv     string
	ref    string
}

// localN is an entity local to a function: enc::entity.
type localN struct {
	enc    node
	entity node
}

// lambdaN is a closure type, {lambda(params)#num}.
type lambdaN struct {
	params []node
	num    int
}

// unnamedN is an unnamed type, {unnamed type#num}.
type unnamedN struct{ num int }

// defaultArgN is the scope of a default argument, {default arg#num}.
type defaultArgN struct{ num int }

// bindingN is a structured binding, [a, b].
type bindingN struct{ names []node }

// qualTypeN is a cv-qualified (or vendor-qualified) type: child + suffix.
type qualTypeN struct {
	child node
	q     string
}

// ptrN is a pointer ("*"), lvalue ("&") or rvalue ("&&") reference.
type ptrN struct {
	child node
	sym   string
}

// funcTypeN is a function type.
type funcTypeN struct {
	ret    node
	params []node
	cv     string
	ref    string
	exc    string
}

// arrayN is an array type; dim may be nil (unknown bound).
type arrayN struct {
	child node
	dim   node
}

// ptrMemN is a pointer to member, cls::*mem.
type ptrMemN struct{ cls, mem node }

// vectorN is a vendor vector type, T __vector(N).
type vectorN struct {
	child node
	dim   node
}

// packN is a template argument pack.
type packN struct{ elems []node }

// expandN is a pack expansion (Dp <type>, sp <expr>).
type expandN struct{ child node }

// tparamN is a template parameter, T_ = 0. Like c++filt, it is resolved
// when printed, against the template arguments of the function being
// printed (so a substitution of T_ can mean different types in different
// places), and prints as auto:N inside a lambda's signature.
type tparamN struct {
	idx int
	off int // byte offset in the mangled name, for errors
}

// litN is an integer or other literal of a type.
type litN struct {
	typ node
	val string
	neg bool
}

// exprN is an expression in a template argument or decltype.
type exprN struct {
	kind exprKind
	op   string
	typ  node
	args []node
}

type exprKind int

const (
	exBinary     exprKind = iota // (a)op(b)
	exUnary                      // op(a)
	exPostfix                    // (a)op
	exTernary                    // (a)?(b):(c)
	exCall                       // a(args)
	exCast                       // (T)(a)
	exNamedCast                  // static_cast<T>(a)
	exSizeofT                    // sizeof (T)
	exPrefix                     // op a (sizeof expr, throw, noexcept)
	exMember                     // a.name, a->name
	exBraced                     // T{args}
	exText                       // fixed text
	exParen                      // op(a) where a is a type (typeid (T))
	exSizeofPack                 // sizeof...(a)
	exNew                        // new (placement) T(init)
	exFold                       // (... op a), (a op ...), (a op ... op b)
)
