package schema

import (
	"os"
	"path/filepath"

	"cuelang.org/go/cue/scanner"
	"cuelang.org/go/cue/token"
)

// suspect is where a config that exceeded its budget most likely asks for
// too much.
type suspect struct {
	pos   token.Position
	depth int // estimated nesting of the expression at pos; 0 when pos is a file
}

// deepAt is the estimated nesting from which an expression is named as the
// cause of a stack overflow; below it the recursion came from evaluation
// (references chained through fields), not from one expression.
const deepAt = 1000

// maxScan bounds how much of one file locate reads.
const maxScan = 64 << 20

// fileStats is what a token scan of one file tells about its cost.
type fileStats struct {
	name       string
	size       int64
	fors       int // comprehension clauses: each multiplies what follows
	operators  int // binary operators: doubling a string takes one per line
	depth      int
	depthStart token.Position
}

// locate finds, without parsing or evaluating anything (either may be what
// overflowed), where the config in dir most likely exceeds its budget.
// CUE evaluates a package as a whole and says nothing on the way, so this
// reads the tokens of each file:
//
//   - a stack overflow is pinned on the deepest expression, estimated as the
//     brackets open around it plus the binary operators chained in it (a
//     chain of a million + is a million levels deep: the parser, the
//     resolver and the evaluator all recurse down it), when that is at
//     least deepAt;
//   - otherwise the cause is named at file level: the file with the most
//     comprehension clauses, then binary operators, then bytes.
func locate(dir string, stack bool) suspect {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return suspect{}
	}
	defer root.Close()
	d, err := root.Open(".")
	if err != nil {
		return suspect{}
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return suspect{}
	}
	var best *fileStats
	var deepest *fileStats
	for _, e := range entries {
		if !cueFile(e) {
			continue
		}
		src, size, err := readRegular(root, e.Name(), maxScan)
		if err != nil && size == 0 {
			continue
		}
		st := scanStats(filepath.Join(dir, e.Name()), src)
		st.size = size
		if deepest == nil || st.depth > deepest.depth {
			deepest = &st
		}
		if best == nil || heavier(&st, best) {
			best = &st
		}
	}
	switch {
	case stack && deepest != nil && deepest.depth >= deepAt:
		return suspect{pos: deepest.depthStart, depth: deepest.depth}
	case best != nil:
		return suspect{pos: token.Position{Filename: best.name, Line: 1, Column: 1}}
	}
	return suspect{}
}

func heavier(a, b *fileStats) bool {
	if a.fors != b.fors {
		return a.fors > b.fors
	}
	if a.operators != b.operators {
		return a.operators > b.operators
	}
	return a.size > b.size
}

// scanStats scans src iteratively: a million tokens cost a million steps
// and no stack.
func scanStats(name string, src []byte) fileStats {
	st := fileStats{name: name}
	f := token.NewFile(name, -1, len(src))
	var s scanner.Scanner
	s.Init(f, src, func(token.Pos, string, []any) {}, 0)
	type level struct {
		ops   int
		start token.Pos // first token of the expression being read
	}
	levels := []level{{}}
	depth := 0 // open brackets plus the operators of every open expression
	operand := false
	for {
		pos, tok, _ := s.Scan()
		if tok == token.EOF {
			break
		}
		cur := &levels[len(levels)-1]
		switch {
		case tok == token.LPAREN || tok == token.LBRACK || tok == token.LBRACE:
			if !cur.start.IsValid() {
				cur.start = pos
			}
			levels = append(levels, level{})
			depth++
			if depth > st.depth {
				st.depth, st.depthStart = depth, pos.Position()
			}
			operand = false
			continue
		case tok == token.RPAREN || tok == token.RBRACK || tok == token.RBRACE:
			if len(levels) > 1 {
				depth -= 1 + cur.ops
				levels = levels[:len(levels)-1]
			}
			operand = true
			continue
		case tok == token.COMMA || tok == token.COLON:
			depth -= cur.ops
			*cur = level{}
			operand = false
			continue
		case tok == token.FOR:
			st.fors++
		case tok.Precedence() > 0 && operand:
			st.operators++
			cur.ops++
			depth++
			if depth > st.depth {
				st.depth = depth
				st.depthStart = cur.start.Position()
			}
			operand = false
			continue
		}
		if !cur.start.IsValid() {
			cur.start = pos
		}
		operand = tok.IsLiteral() || tok == token.TRUE || tok == token.FALSE || tok == token.NULL || tok == token.BOTTOM
	}
	return st
}
