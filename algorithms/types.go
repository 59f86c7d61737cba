package algorithms

import (
	"fmt"
	"strings"
)

// DType is an element type. The numeric values are part of the C ABI
// (capi/gotree.h, gotree_dtype_t) and must not change.
type DType int

const (
	Float32 DType = iota
	Float64
	Float16
	BFloat16
	Int8
	Uint8
	Int16
	Int32
	Int64
	Bool
	Complex64
	Complex128
	Uint16
	Uint32
	Uint64
	// Float8E4M3 is torch.float8_e4m3fn (OCP FP8 E4M3: bias 7, no
	// infinities, one NaN per sign, largest finite 448).
	Float8E4M3
	// Float8E5M2 is torch.float8_e5m2 (OCP FP8 E5M2: the top byte of an
	// IEEE binary16, largest finite 57344).
	Float8E5M2
	numDTypes
)

var dtypeNames = [...]string{"float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool", "complex64", "complex128",
	"uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"}
var dtypeSizes = [...]int{4, 8, 2, 2, 1, 1, 2, 4, 8, 1, 8, 16, 2, 4, 8, 1, 1}

// NumDTypes is the number of element types: the valid DTypes are 0 to
// NumDTypes-1.
const NumDTypes = int(numDTypes)

// Valid reports whether d is a known element type.
func (d DType) Valid() bool { return d >= 0 && d < numDTypes }

// Size is the element size in bytes.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeSizes[d]
}

func (d DType) String() string {
	if !d.Valid() {
		return fmt.Sprintf("dtype(%d)", int(d))
	}
	return dtypeNames[d]
}

// IsFloat reports whether d is a real floating-point type.
func (d DType) IsFloat() bool {
	return d == Float32 || d == Float64 || d == Float16 || d == BFloat16 || d.IsFloat8()
}

// IsFloat8 reports whether d is one of the 8-bit floating-point types.
func (d DType) IsFloat8() bool { return d == Float8E4M3 || d == Float8E5M2 }

// IsComplex reports whether d is a complex type.
func (d DType) IsComplex() bool { return d == Complex64 || d == Complex128 }

// IsInteger reports whether d is an integer type (bool counts as one).
func (d DType) IsInteger() bool { return d.Valid() && !d.IsFloat() && !d.IsComplex() }

// ParseDType maps a name such as "float32" (or nccl-tests' "float") to a DType.
func ParseDType(s string) (DType, error) {
	switch s {
	case "float", "fp32":
		return Float32, nil
	case "double", "fp64":
		return Float64, nil
	case "half", "fp16":
		return Float16, nil
	case "bf16":
		return BFloat16, nil
	case "int":
		return Int32, nil
	case "char":
		return Int8, nil
	case "fp8_e4m3", "f8e4m3":
		return Float8E4M3, nil
	case "fp8_e5m2", "f8e5m2":
		return Float8E5M2, nil
	}
	for i, n := range dtypeNames {
		if n == s {
			return DType(i), nil
		}
	}
	return 0, fmt.Errorf("gotree/algorithms: unknown dtype %q", s)
}

// Op is a reduction operator. The numeric values are part of the C ABI
// (gotree_op_t).
type Op int

const (
	Sum Op = iota
	Avg
	Prod
	Min
	Max
	BAnd
	BOr
	BXor
	PremulSum
	numOps
)

var opNames = [...]string{"sum", "avg", "prod", "min", "max", "band", "bor", "bxor", "premul_sum"}

// Valid reports whether o is a known operator.
func (o Op) Valid() bool { return o >= 0 && o < numOps }

func (o Op) String() string {
	if !o.Valid() {
		return fmt.Sprintf("op(%d)", int(o))
	}
	return opNames[o]
}

// ParseOp maps a name such as "sum" to an Op.
func ParseOp(s string) (Op, error) {
	for i, n := range opNames {
		if n == s {
			return Op(i), nil
		}
	}
	return 0, fmt.Errorf("gotree/algorithms: unknown reduction op %q", s)
}

// Supports reports whether op is defined on dtype, and why not.
func Supports(op Op, d DType) error {
	if !d.Valid() {
		return fmt.Errorf("unsupported dtype %v", d)
	}
	if !op.Valid() {
		return fmt.Errorf("unsupported reduction op %v", op)
	}
	switch op {
	case BAnd, BOr, BXor:
		if !d.IsInteger() {
			return fmt.Errorf("op %v needs an integer or bool dtype, got %v", op, d)
		}
	case Min, Max:
		if d.IsComplex() {
			return fmt.Errorf("op %v is not defined for complex dtype %v", op, d)
		}
	case Prod:
		if d.IsComplex() {
			return fmt.Errorf("op %v is not supported for complex dtype %v", op, d)
		}
	case Avg:
		if d == Bool {
			return fmt.Errorf("op %v is not defined for dtype %v", op, d)
		}
	case PremulSum:
		if !d.IsFloat() && !d.IsComplex() {
			return fmt.Errorf("op %v needs a floating-point or complex dtype, got %v", op, d)
		}
	}
	return nil
}

// Collective names a collective operation.
type Collective int

const (
	AllReduce Collective = iota
	Broadcast
	Reduce
	AllGather
	ReduceScatter
	// The point-to-point family: planned by LocalP2PPlan, one rank at a time.
	AllToAll
	Gather
	Scatter
	SendRecv
)

var collNames = [...]string{"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "alltoall", "gather", "scatter", "sendrecv"}

// Reduces reports whether c combines the ranks' data with a reduction op
// (allreduce, reduce, reduce-scatter).
func (c Collective) Reduces() bool { return c == AllReduce || c == Reduce || c == ReduceScatter }

func (c Collective) String() string {
	if c < 0 || int(c) >= len(collNames) {
		return fmt.Sprintf("collective(%d)", int(c))
	}
	return collNames[c]
}

// Algorithm names a schedule family.
type Algorithm int

const (
	Ring Algorithm = iota
	Tree
	// HalvingDoubling is Rabenseifner's allreduce (halvdouble.go): a CPU
	// algorithm for ranks that share a host, not one of NCCL's.
	HalvingDoubling
	// Direct is single-copy allreduce for ranks that share a host
	// (direct.go): each rank reduces its slice reading the others'
	// buffers in place and writes the result into theirs.
	// Not one of NCCL's for the CPU; its GPU cousins are NCCL's P2P
	// direct pointers.
	Direct
	// OneShot is the small-message allreduce for ranks that share a host
	// (oneshot.go): every rank sends its whole message to every other
	// and reduces all of them itself, in rank order. One round instead of
	// the ring's 2(n−1) dependent hand-offs. Not one of NCCL's.
	OneShot
	// Shared is allreduce through staging regions that every rank of one
	// host maps (shared.go): each rank copies a chunk of its input into
	// its region, reduces its slice of everyone's chunk, and copies the
	// reduced slices back out; plain loads and stores, no system call per
	// byte. Not one of NCCL's.
	Shared
)

// ParseAlgorithm maps a name ("ring", "tree", "hd", "direct", "oneshot", "shared") to its Algorithm:
// the inverse of String.
func ParseAlgorithm(name string) (Algorithm, error) {
	for a := Algorithm(0); int(a) < NumAlgorithms; a++ {
		if name == a.String() {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want one of %s)", name, AlgorithmNames())
}

// AlgorithmNames lists every algorithm's name in order: "ring, tree, hd,
// direct, oneshot, shared".
func AlgorithmNames() string {
	names := make([]string, NumAlgorithms)
	for a := range names {
		names[a] = Algorithm(a).String()
	}
	return strings.Join(names, ", ")
}

func (a Algorithm) String() string {
	switch a {
	case Ring:
		return "ring"
	case Tree:
		return "tree"
	case HalvingDoubling:
		return "hd"
	case Direct:
		return "direct"
	case OneShot:
		return "oneshot"
	case Shared:
		return "shared"
	}
	return fmt.Sprintf("algorithm(%d)", int(a))
}

// Protocol names NCCL's wire protocols; CPU executors only use Simple.
type Protocol int

const (
	LL Protocol = iota
	LL128
	Simple
)

func (p Protocol) String() string {
	switch p {
	case LL:
		return "LL"
	case LL128:
		return "LL128"
	case Simple:
		return "Simple"
	}
	return fmt.Sprintf("protocol(%d)", int(p))
}
