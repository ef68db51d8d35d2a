package testgen

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Bombs are small CUE files that ask the evaluator for more than any host
// has: a stack a million calls deep, a terabyte, minutes of CPU. Each is one
// file of package pkg; the chains ("plus", "and") start at line 3, column 4.
var Bombs = map[string]func(pkg string) []byte{
	// A million + terms: every stage of CUE recurses down the chain.
	"plus": func(pkg string) []byte { return chain(pkg, "1", " + ", 1_000_000) },
	// A million & terms.
	"and": func(pkg string) []byte { return chain(pkg, "int", " & ", 1_000_000) },
	// 40 lines of string doubling: a terabyte.
	"double": func(pkg string) []byte {
		var b bytes.Buffer
		fmt.Fprintf(&b, "package %s\n\na0: \"x\"\n", pkg)
		for i := 1; i <= 40; i++ {
			fmt.Fprintf(&b, "a%d: a%d + a%d\n", i, i-1, i-1)
		}
		return b.Bytes()
	},
	// A 3000x3000 comprehension: nine million elements.
	"comprehension": func(pkg string) []byte {
		return fmt.Appendf(nil, "package %s\n\nimport \"list\"\n\nx: [for i in list.Range(0, 3000, 1) for j in list.Range(0, 3000, 1) {i * j}]\n", pkg)
	},
	// A struct of 300,000 fields: minutes of evaluation.
	"fields": func(pkg string) []byte {
		var b bytes.Buffer
		fmt.Fprintf(&b, "package %s\n\nx: {\n", pkg)
		for i := range 300_000 {
			fmt.Fprintf(&b, "\tf%d: %d\n", i, i)
		}
		b.WriteString("}\n")
		return b.Bytes()
	},
}

// BombNames lists Bombs in order.
func BombNames() []string {
	return slices.Sorted(maps.Keys(Bombs))
}

func chain(pkg, term, op string, n int) []byte {
	var b strings.Builder
	b.Grow(n * (len(term) + len(op)))
	fmt.Fprintf(&b, "package %s\n\nx: %s", pkg, term)
	for range n - 1 {
		b.WriteString(op)
		b.WriteString(term)
	}
	b.WriteString("\n")
	return []byte(b.String())
}
