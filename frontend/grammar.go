// Package frontend reads .amsp files: a participle grammar (this file),
// the syntax tree it builds, and the lowering of that tree to an ir.Job.
//
// In: source text. Out: an ir.Job whose graph is verified, or a list of
// user errors, each `file:line:col: message`. This is the only package that
// imports participle.
//
// The language is free-form (newlines are whitespace). Statements need no
// separator because every statement starts with a keyword or `NAME =`, and
// no expression can continue with a bare name. Units after a number
// (`200 GB/s`, `4Mi tokens`) are names not followed by `=`, which a
// negative lookahead separates from the next setting's key.
package frontend

import (
	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"
)

var amspLexer = lexer.MustSimple([]lexer.SimpleRule{
	{Name: "Comment", Pattern: `#[^\n]*`},
	{Name: "Whitespace", Pattern: `[ \t\r\n]+`},
	// 8x4: a 2-D sharding factor, before Number so "8x4" is one token.
	{Name: "Mesh", Pattern: `[0-9]+x[0-9]+`},
	{Name: "Number", Pattern: `(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][+-]?[0-9]+)?`},
	{Name: "String", Pattern: `"(?:\\.|[^"\\\n])*"`},
	{Name: "Ident", Pattern: `[A-Za-z_][A-Za-z0-9_]*`},
	{Name: "Punct", Pattern: `[-+*/@=:,(){}\[\]]`},
})

// File is a whole .amsp file: up to one section of each kind.
type File struct {
	Pos      lexer.Position
	Sections []*Section `parser:"@@*"`
}

// Section is one top-level block.
type Section struct {
	Pos     lexer.Position
	Model   *ModelSection   `parser:"@@"`
	Cluster *ClusterSection `parser:"| @@"`
	Train   *TrainSection   `parser:"| @@"`
	Shard   *ShardSection   `parser:"| @@"`
}

// ModelSection: `model NAME { statements }`.
type ModelSection struct {
	Pos   lexer.Position
	Name  string  `parser:"\"model\" @Ident \"{\""`
	Stmts []*Stmt `parser:"@@* \"}\""`
}

// Stmt is one model statement.
type Stmt struct {
	Pos    lexer.Position
	Dim    *DimStmt    `parser:"@@"`
	Input  *InputStmt  `parser:"| @@"`
	Param  *ParamStmt  `parser:"| @@"`
	Repeat *RepeatStmt `parser:"| @@"`
	Assign *AssignStmt `parser:"| @@"`
}

// DimStmt: `dim NAME = EXPR`.
type DimStmt struct {
	Pos   lexer.Position
	Name  string `parser:"\"dim\" @Ident \"=\""`
	Value *Expr  `parser:"@@"`
}

// InputStmt: `input NAME : DTYPE[dims]`.
type InputStmt struct {
	Pos   lexer.Position
	Name  string   `parser:"\"input\" @Ident \":\""`
	DType *TypeRef `parser:"@@"`
	Dims  []*Expr  `parser:"\"[\" (@@ (\",\" @@)*)? \"]\""`
}

// TypeRef is a dtype name where it is written.
type TypeRef struct {
	Pos  lexer.Position
	Name string `parser:"@Ident"`
}

// ParamStmt: `param NAME : [dims] (init INIT)?`.
type ParamStmt struct {
	Pos  lexer.Position
	Name string  `parser:"\"param\" @Ident \":\""`
	Dims []*Expr `parser:"\"[\" (@@ (\",\" @@)*)? \"]\""`
	Init *Init   `parser:"(\"init\" @@)?"`
}

// Init is a param initialiser: `ones`, `zeros`, `normal(0.02)`.
type Init struct {
	Pos  lexer.Position
	Name string `parser:"@Ident"`
	Args []*Arg `parser:"(\"(\" (@@ (\",\" @@)*)? \")\")?"`
}

// RepeatStmt: `repeat COUNT { statements }`.
type RepeatStmt struct {
	Pos   lexer.Position
	Count *Expr   `parser:"\"repeat\" @@ \"{\""`
	Body  []*Stmt `parser:"@@* \"}\""`
}

// AssignStmt: `NAME = EXPR`.
type AssignStmt struct {
	Pos   lexer.Position
	Name  string `parser:"@Ident \"=\""`
	Value *Expr  `parser:"@@"`
}

// Expr is a sum: terms joined by + and -.
type Expr struct {
	Pos  lexer.Position
	Left *Term     `parser:"@@"`
	Rest []*OpTerm `parser:"@@*"`
}

// OpTerm is one `+ term` or `- term`; Pos is the operator's.
type OpTerm struct {
	Pos   lexer.Position
	Op    string `parser:"@(\"+\" | \"-\")"`
	Right *Term  `parser:"@@"`
}

// Term is a product: factors joined by *, / and @ (one precedence level,
// left to right, as in Python).
type Term struct {
	Pos  lexer.Position
	Left *Unary     `parser:"@@"`
	Rest []*OpUnary `parser:"@@*"`
}

// OpUnary is one `* factor`, `/ factor` or `@ factor`.
type OpUnary struct {
	Pos   lexer.Position
	Op    string `parser:"@(\"*\" | \"/\" | \"@\")"`
	Right *Unary `parser:"@@"`
}

// Unary is a negation or a primary.
type Unary struct {
	Pos     lexer.Position
	Neg     *Unary   `parser:"\"-\" @@"`
	Primary *Primary `parser:"| @@"`
}

// Primary is a literal, a call, a name or a parenthesised expression.
type Primary struct {
	Pos    lexer.Position
	Number *string `parser:"@Number"`
	Call   *Call   `parser:"| @@"`
	Ident  *string `parser:"| @Ident"`
	Sub    *Expr   `parser:"| \"(\" @@ \")\""`
}

// Call: `NAME(args)`, an op application, an initialiser or an optimizer.
type Call struct {
	Pos  lexer.Position
	Name string `parser:"@Ident \"(\""`
	Args []*Arg `parser:"(@@ (\",\" @@)*)? \",\"? \")\""`
}

// Arg is a positional or keyword argument.
type Arg struct {
	Pos   lexer.Position
	Key   string `parser:"(@Ident \"=\")?"`
	Value *Expr  `parser:"@@"`
}

// ClusterSection: `cluster NAME? { key = value ... }`.
type ClusterSection struct {
	Pos      lexer.Position
	Name     string     `parser:"\"cluster\" @Ident? \"{\""`
	Settings []*Setting `parser:"@@* \"}\""`
}

// TrainSection: `train NAME? { key = value ... }`.
type TrainSection struct {
	Pos      lexer.Position
	Name     string     `parser:"\"train\" @Ident? \"{\""`
	Settings []*Setting `parser:"@@* \"}\""`
}

// ShardSection: `shard auto`, `shard zero3`, `shard mics(8)` or
// `shard { params = 2, grads = 2, optim = 8 }`.
type ShardSection struct {
	Pos      lexer.Position
	Settings []*Setting `parser:"\"shard\" ( \"{\" @@* \"}\""`
	Call     *Call      `parser:"| @@"`
	Preset   *string    `parser:"| @Ident )"`
}

// Setting: `key = value`, optionally followed by a comma.
type Setting struct {
	Pos   lexer.Position
	Key   string    `parser:"@Ident \"=\""`
	Value *SetValue `parser:"@@ \",\"?"`
}

// SetValue is the right-hand side of a setting.
type SetValue struct {
	Pos      lexer.Position
	Str      *string   `parser:"@String"`
	Quantity *Quantity `parser:"| @@"`
	Call     *Call     `parser:"| @@"`
	Ident    *string   `parser:"| @Ident"`
}

// Quantity is a number (or an s0xs1 factor) with optional units:
// `80 GiB`, `200 GB/s`, `4Mi tokens`, `312 TFLOP/s`.
type Quantity struct {
	Pos    lexer.Position
	Number string   `parser:"@(Number | Mesh)"`
	Units  []string `parser:"(@Ident (?! \"=\"))*"`
	Per    string   `parser:"(\"/\" @Ident)?"`
}

var parser = participle.MustBuild[File](
	participle.Lexer(amspLexer),
	participle.Elide("Comment", "Whitespace"),
	// One token of lookahead: enough for `NAME (` vs `NAME`, `KEY =` vs a
	// unit, and it makes a branch that consumed two tokens commit, so a
	// syntax error is reported where it is, not where backtracking gave up.
	participle.UseLookahead(1),
)

// Grammar returns the language's grammar in EBNF, as participle sees it.
// docs/grammar.ebnf holds a copy, pinned by a test.
func Grammar() string { return parser.String() }
